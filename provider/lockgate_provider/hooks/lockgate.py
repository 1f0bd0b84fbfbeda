"""The Lockgate hook: one Airflow connection, two ways to reach Lockgate.

A connection of type ``lockgate`` (default id ``lockgate_default``) names either

* the **embedded** engine (host empty or ``embedded``): controller and worker run inside the
  Airflow task's own process, on local Spark or on the cluster named by an apache-spark
  ``spark`` / ``spark_connect`` connection, with the SQLite catalog under ``LOCKGATE_HOME``;
* a **controller** (``lockgate server``) at host and port, with an optional token (the
  connection's password) and TLS.

The hook hands out the engine's own clients (:func:`lockgate.connect`,
:func:`lockgate.connect_async`); operators, sensors and triggers use nothing else. Like the
Databricks and Dataflow hooks it also owns the waiting: running windows in this process
(:meth:`LockgateHook.run_windows`) and following a controller's run
(:meth:`LockgateHook.wait_for_windows`), and it assembles a run's summary.

When ``lockgate_default`` is not defined at all, the hook falls back to the embedded engine
with its defaults, so a first DAG runs with no set-up.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

import lockgate
from lockgate import AsyncClient, Client, CompileResult, JobEvent, JobInfo, JobState, is_terminal
from lockgate.defaults import default_home
from lockgate.errors import JobNotFoundError, LockgateError
from lockgate_provider.links.lockgate import job_page_path
from lockgate_provider.utils import (
    LockgateWindowGapError,
    airflow_errors,
    as_datetime,
    failed_run_message,
    gap_message,
    instant_range,
    is_running,
    is_window_id,
    run_summary,
    short_error,
)

DEFAULT_PORT = 50051
"""The controller's port when the connection gives none (``lockgate server`` listens there)."""

EMBEDDED = "embedded"

_EMBEDDED_OPTIONS = ("home", "catalog_url", "snapshots", "spark_master", "keep_checkpoints", "spark_conf")

# One embedded client per set of options and process: a continuous job started by one task
# lives in the client that started it, so a later task of the same process (``dag.test()``,
# ``airflow dags test``) must find the same client to stop it; and the SparkSession is one
# per process anyway.
_EMBEDDED_CLIENTS: dict[tuple[Any, ...], Client] = {}
_EMBEDDED_LOCK = threading.Lock()


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class LockgateHook(BaseHook):
    """Reach Lockgate: the embedded engine, or a controller over gRPC.

    .. seealso::
        The connection type ``lockgate`` and its fields: the README, "Airflow" / "The connection".

    :param lockgate_conn_id: The :ref:`Lockgate connection <howto/connection:lockgate>` to use;
        ``lockgate_default`` by default. When that default connection does not exist the
        embedded engine is used with its defaults.
    :param spark_conn_id: An apache-spark ``spark`` or ``spark_connect`` connection naming
        the Spark cluster the *embedded* engine runs on (overrides the connection's own
        ``spark_conn_id`` field). A controller has its own workers and ignores it.
    :param timeout: Seconds a call to a controller may take (overrides the connection's field).
    """

    conn_name_attr = "lockgate_conn_id"
    default_conn_name = "lockgate_default"
    conn_type = "lockgate"
    hook_name = "Lockgate"

    def __init__(
        self,
        lockgate_conn_id: str = default_conn_name,
        *,
        spark_conn_id: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id
        self.timeout = timeout
        self._settings: dict[str, Any] | None = None
        self._client: Client | None = None

    # -- connection -------------------------------------------------------------------
    @staticmethod
    def _extra(extra: dict[str, Any], name: str, default: Any = None) -> Any:
        for key in (name, f"extra__lockgate__{name}"):
            value = extra.get(key)
            if value not in (None, ""):
                return value
        return default

    def _settings_from(self, conn: Any | None) -> dict[str, Any]:
        """Everything the hook needs from the connection, as plain values."""
        if conn is None:
            host, port, token, extra = "", None, None, {}
        else:
            host, port, token, extra = (conn.host or ""), conn.port, conn.password, (conn.extra_dejson or {})
        host = host.strip()
        if "://" in host:  # "grpc://h", "grpcs://h", "lockgate://h" or "embedded://"
            scheme, _, rest = host.partition("://")
            host = rest.rstrip("/")
            if scheme == "grpcs":
                extra = {**extra, "use_tls": True}
            if scheme == EMBEDDED:
                host = ""
        embedded = host in ("", EMBEDDED)
        timeout = self.timeout if self.timeout is not None else self._extra(extra, "timeout", 30)
        settings: dict[str, Any] = {
            "embedded": embedded,
            "host": host,
            "port": int(port) if port else DEFAULT_PORT,
            "token": token or None,
            "use_tls": _truthy(self._extra(extra, "use_tls", False)),
            "tls_ca": self._extra(extra, "tls_ca"),
            "tls_server_name": self._extra(extra, "tls_server_name"),
            "timeout": float(timeout),
            "ui_url": self._extra(extra, "ui_url"),
            "home": self._extra(extra, "lockgate_home"),
            "catalog_url": self._extra(extra, "catalog_url"),
            "snapshots": self._extra(extra, "snapshots"),
            "spark_conn_id": self.spark_conn_id or self._extra(extra, "spark_conn_id"),
        }
        return settings

    @property
    def settings(self) -> dict[str, Any]:
        """The connection's settings (resolved once per hook)."""
        if self._settings is None:
            try:
                conn = self.get_connection(self.lockgate_conn_id)
            except AirflowNotFoundException:
                if self.lockgate_conn_id != self.default_conn_name:
                    raise
                self.log.info(
                    "Connection %r is not defined: using the embedded Lockgate engine with its defaults",
                    self.lockgate_conn_id,
                )
                conn = None
            self._settings = self._settings_from(conn)
        return self._settings

    @property
    def embedded(self) -> bool:
        """Whether the connection names the embedded engine (runs in this process)."""
        return bool(self.settings["embedded"])

    @property
    def url(self) -> str:
        """The URL given to :func:`lockgate.connect`: ``embedded`` or ``grpc[s]://host:port``."""
        s = self.settings
        if s["embedded"]:
            return EMBEDDED
        return f"{'grpcs' if s['use_tls'] else 'grpc'}://{s['host']}:{s['port']}"

    @property
    def address(self) -> str:
        """Where the jobs live, for people: the controller URL, or the embedded engine's home."""
        if self.embedded:
            return f"embedded:{os.path.abspath(os.path.expanduser(self.settings['home'] or default_home()))}"
        return self.url

    def job_url(self, job: str) -> str:
        """The page of ``job``: the Lockgate plugin's job page inside Airflow's UI (under
        ``[api] base_url``), or ``<ui_url>/jobs/<job>`` when the connection sets ``ui_url``."""
        ui = self.settings.get("ui_url")
        if ui:
            return f"{str(ui).rstrip('/')}/jobs/{quote(job, safe='')}"
        from airflow.sdk.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return f"{base}{job_page_path(job)}"

    # -- Spark for the embedded engine ------------------------------------------------
    def _spark_options(self) -> dict[str, Any]:
        """``spark_master`` and ``spark_conf`` from the apache-spark connection, if one is named.

        The same rules as the apache-spark provider's ``@task.pyspark``: a ``spark_connect``
        connection becomes its ``sc://`` URL; a ``spark`` connection is ``host[:port]``
        (``spark://master:7077``, ``local[2]``, ``yarn``); its ``spark.*`` extras are Spark conf.
        """
        conn_id = self.settings["spark_conn_id"]
        if not conn_id:
            return {}
        conn = self.get_connection(conn_id)
        if conn.conn_type == "spark_connect":
            from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

            return {"spark_master": SparkConnectHook(conn_id).get_connection_url()}
        host = conn.host or ""
        if not host:
            raise ValueError(f"Spark connection {conn_id!r} has no host (e.g. spark://master, local[2])")
        master = f"{host}:{conn.port}" if conn.port else host
        conf = {k: str(v) for k, v in (conn.extra_dejson or {}).items() if k.startswith("spark.")}
        return {"spark_master": master, **({"spark_conf": conf} if conf else {})}

    def client_options(self, spark: bool = True) -> dict[str, Any]:
        """The keyword options given to :func:`lockgate.connect` for this connection.

        :param spark: include the embedded engine's Spark options (not needed to read the catalog).
        """
        s = self.settings
        if s["embedded"]:
            opts: dict[str, Any] = {k: s[k] for k in ("catalog_url", "snapshots") if s[k]}
            # resolved here (not left to the engine) so that the shared client follows $LOCKGATE_HOME
            opts["home"] = os.path.abspath(os.path.expanduser(s["home"] or default_home()))
            if spark:
                opts.update(self._spark_options())
            return opts
        opts = {"timeout": s["timeout"]}
        if s["token"]:
            opts["token"] = s["token"]
        if s["tls_ca"]:
            opts["tls_ca"] = s["tls_ca"]
        if s["tls_server_name"]:
            opts["server_name"] = s["tls_server_name"]
        return opts

    # -- clients ----------------------------------------------------------------------
    def get_conn(self) -> Client:
        """The :class:`lockgate.Client` for this connection.

        The embedded client is shared by every hook of this process with the same options
        (it owns the jobs it started); a controller client is made once per hook.
        """
        if self._client is None:
            if self.embedded:
                opts = self.client_options()
                key = tuple(
                    (k, repr(sorted(v.items())) if isinstance(v, dict) else v)
                    for k, v in sorted(opts.items())
                    if k in _EMBEDDED_OPTIONS
                )
                with _EMBEDDED_LOCK:
                    if key not in _EMBEDDED_CLIENTS:
                        _EMBEDDED_CLIENTS[key] = lockgate.connect(EMBEDDED, **opts)
                    self._client = _EMBEDDED_CLIENTS[key]
            else:
                self._client = lockgate.connect(self.url, **self.client_options())
        return self._client

    def get_async_conn(self) -> AsyncClient:
        """A new :class:`lockgate.AsyncClient` (what triggers use); close it when done.

        For the embedded engine it reads the same catalog from any process (a triggerer
        can follow a job), but only the process that started a job can stop it.
        """
        return lockgate.connect_async(self.url, **self.client_options(spark=False))

    async def aget_async_conn(self) -> AsyncClient:
        """:meth:`get_async_conn` for the event loop: the connection is read without blocking it."""
        if self._settings is None:
            try:
                conn = await self.aget_connection(self.lockgate_conn_id)
            except AirflowNotFoundException:
                if self.lockgate_conn_id != self.default_conn_name:
                    raise
                conn = None
            self._settings = self._settings_from(conn)
        return self.get_async_conn()

    def close(self) -> None:
        """Close a controller client; the shared embedded client stays open for the process."""
        if self._client is not None and not self.embedded:
            self._client.close()
        self._client = None

    # -- the connection test ----------------------------------------------------------
    def test_connection(self) -> tuple[bool, str]:
        """Really reach Lockgate: list the jobs of the controller (or of the embedded catalog)."""
        try:
            url = self.url
        except Exception as err:
            return False, f"Lockgate connection {self.lockgate_conn_id!r} is invalid: {err}"
        client: Client | None = None
        try:
            if self.embedded:
                client = lockgate.connect(EMBEDDED, **self.client_options(spark=False))
            else:
                opts = self.client_options()
                opts["timeout"] = min(float(opts.get("timeout") or 10), 10.0)
                client = lockgate.connect(url, **opts)
            jobs = client.list_jobs()
        except Exception as err:
            where = "the embedded Lockgate catalog" if self.embedded else f"the Lockgate controller at {url}"
            return False, f"Cannot reach {where}: {type(err).__name__}: {err}"
        finally:
            if client is not None:
                try:
                    client.close()
                except Exception:
                    self.log.debug("closing the test client failed", exc_info=True)
        running = sum(1 for j in jobs if is_running(j.state))
        what = f"embedded Lockgate ({self.address})" if self.embedded else f"Lockgate controller at {url}"
        return True, f"Connected to the {what}: {len(jobs)} jobs, {running} running"

    # -- jobs -----------------------------------------------------------------------------
    def compile_pipeline(self, pipeline: str) -> CompileResult:
        """Compile ``pipeline``; one that does not compile fails the task without retries."""
        with airflow_errors(pipeline=pipeline):
            return self.get_conn().compile(pipeline)

    def windows_for(self, pipeline: str, start: datetime, end: datetime) -> tuple[int, int]:
        """The cycle windows ``(first, last)`` (inclusive) that cover ``[start, end)``;
        ``(0, -1)``, no window, when the range is empty."""
        if end <= start:
            return 0, -1
        with airflow_errors(pipeline=pipeline):
            return self.get_conn().windows_for(pipeline, start, end)

    def window_at(self, value: Any, pipeline: str | None, what: str = "window") -> int | None:
        """A window id from an int, a digit string, or an instant (ISO string or datetime: the
        last window ending at or before it, by ``pipeline``'s cycle window); ``None`` when empty."""
        if is_window_id(value):
            return int(value)
        at = as_datetime(value, what)
        if at is None:
            return None
        if pipeline is None:
            raise AirflowFailException(f"{what}={value!r} is an instant: give pipeline= to map it to a window")
        return self.get_conn().windows_for(pipeline, *instant_range(at))[1]

    def get_job(self, job: str) -> JobInfo | None:
        """The job ``job``, or ``None`` when it does not exist."""
        try:
            return self.get_conn().get_job(job)
        except JobNotFoundError:
            return None

    def check_window_gap(self, job: str, first: int, last: int, info: JobInfo | None) -> None:
        """Raise :class:`~lockgate_provider.utils.LockgateWindowGapError` when window ``first``
        cannot run yet: an earlier window of the job is not complete (the message names the
        missing windows, their time range and the fix)."""
        done = info.last_window if info is not None else None
        if done is None or first <= done + 1:
            return
        try:
            cps = self.get_conn().list_checkpoints(job)
        except LockgateError:
            cps = []
        # the last checkpoint always stays in the catalog: it dates the missing windows
        last_cp = max(cps, key=lambda c: c.window) if cps else None
        raise LockgateWindowGapError(gap_message(job, first, last, done, last_cp))

    def start_run(
        self, pipeline: str, job: str, first: int, last: int, *, reset_state: bool = False,
        catchup: str | int | None = None, labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        """Start windows ``first..last`` of ``job`` on the controller and return at once
        (``catchup``: the catch-up group size; None: the controller's default; ``labels``:
        recorded on the job, e.g. the DAG and task that run it)."""
        with airflow_errors(pipeline=pipeline):
            return self.get_conn().start_run(pipeline, job=job, first=first, last=last, reset_state=reset_state,
                                             catchup=catchup, labels=labels)

    # -- waiting for windows ----------------------------------------------------------------
    def run_windows(
        self,
        pipeline: str,
        job: str,
        first: int,
        last: int,
        *,
        reset_state: bool = False,
        stop: threading.Event | None = None,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Run the windows ``first..last`` of ``job`` not yet committed, here (embedded engine).

        Without ``catchup`` the windows run one at a time, so ``stop`` (set when the task is
        killed) ends the run at the next window boundary. With ``catchup`` (``"auto"``, a
        number) the whole range is one run whose due windows go in catch-up groups, each
        window still committed and checkpointed on its own, and ``stop`` ends it at the next
        group's boundary. Returns the rows in and out each window reported.

        :param reset_state: start the first window run here with empty keyed state.
        :param stop: set to stop before the next window (the task was killed).
        :param catchup: catch-up group size for a backlog (``"auto"``, ``"off"``, a number).
        :param labels: recorded on the job (the DAG and task that run it).
        """
        client = self.get_conn()
        rows: dict[int, dict[str, Any]] = {}
        info = self.get_job(job)
        done = info.last_window if info is not None else None
        begin = first if done is None else max(first, done + 1)
        total = last - begin + 1
        t_start = time.monotonic()
        grouped = catchup is not None and str(catchup).strip().lower() != "off"

        def on_event(event: JobEvent) -> None:
            if event.kind == "cycle_done" and event.window is not None:
                rows[event.window] = {"rows_in": event.rows_in, "rows_out": event.rows_out}
                if grouped:
                    self.log.info("Window %d committed (%d/%d): %s rows in, %s rows out, %.1fs since the start",
                                  event.window, len(rows), total, event.rows_in, event.rows_out,
                                  time.monotonic() - t_start)

        if grouped:
            self._run_grouped(client, pipeline, job, first, begin, last, reset_state, stop, catchup, on_event, labels)
            return rows
        for i, w in enumerate(range(begin, last + 1)):
            if stop is not None and stop.is_set():
                raise AirflowException(
                    f"Killed: stopped cleanly at the window boundary after window {w - 1}; windows "
                    f"{first}..{w - 1} are committed and a retry resumes at window {w}"
                )
            t0 = time.monotonic()
            try:
                with airflow_errors(pipeline=pipeline):
                    client.run(pipeline, job=job, first=w, last=w, reset_state=reset_state and w == begin,
                               on_event=on_event, labels=labels)
            except AirflowException:
                raise
            except Exception as err:
                raise self._window_failed(job, first, w, err) from err
            got = rows.get(w, {})
            self.log.info(
                "Window %d committed (%d/%d): %s rows in, %s rows out, %.1fs",
                w, i + 1, total, got.get("rows_in", "?"), got.get("rows_out", "?"), time.monotonic() - t0,
            )
        return rows

    def _window_failed(self, job: str, first: int, window: int, err: Exception) -> AirflowException:
        """The task's error for a run that failed in ``window``: the cause in one line, what
        is committed, and where a retry resumes."""
        committed = f"windows {first}..{window - 1} are committed" if window > first else "no window of this run is committed"
        self.log.error("Window %d failed:\n%s: %s", window, type(err).__name__, err)
        return AirflowException(
            f"Lockgate job '{job}' failed in window {window}: {short_error(f'{type(err).__name__}: {err}')}. "
            f"{committed}; a retry restores the checkpoint of window {window - 1} and resumes at window {window}."
        )

    def _run_grouped(
        self, client: Any, pipeline: str, job: str, first: int, begin: int, last: int, reset_state: bool,
        stop: threading.Event | None, catchup: str | int, on_event: Callable[[JobEvent], None],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """``run_windows`` as one run in catch-up groups; failures say where a retry resumes."""
        try:
            with airflow_errors(pipeline=pipeline):
                res = client.run(pipeline, job=job, first=begin, last=last, reset_state=reset_state,
                                 on_event=on_event, catchup=catchup, stop=stop, labels=labels)
        except AirflowException:
            raise
        except Exception as err:
            info = self.get_job(job)
            done = info.last_window if info is not None else None
            raise self._window_failed(job, first, begin if done is None or done < begin else done + 1, err) from err
        if res.state != "FINISHED":
            info = self.get_job(job)
            done = info.last_window if info is not None and info.last_window is not None else begin - 1
            raise AirflowException(
                f"Killed: stopped cleanly at the boundary after window {done}; windows {first}..{done} are "
                f"committed and a retry resumes at window {done + 1}"
            )

    def wait_for_windows(
        self,
        job: str,
        first: int,
        last: int,
        *,
        poll_interval: float = 5.0,
        stop: threading.Event | None = None,
    ) -> JobInfo:
        """Follow a controller's run of ``job`` until window ``last`` is committed; return the job.

        A FAILED job, or one that ended (STOPPED, FINISHED) before ``last``, raises an
        :class:`AirflowException` saying where a retry resumes.

        :param poll_interval: seconds between two looks at the job.
        :param stop: set to stop following (the task was killed).
        """
        client = self.get_conn()
        seen: int | None = None
        while True:
            if stop is not None and stop.is_set():
                raise AirflowException(f"Killed: job '{job}' asked to stop at a window boundary")
            info = client.get_job(job)
            if info.last_window is not None and info.last_window >= last:
                return info
            if info.last_window != seen:
                seen = info.last_window
                self.log.info("Job %r is %s at window %s (running to %d)", job, info.state, seen, last)
            if info.state == JobState.FAILED:
                raise self.run_failed(job, first, info.last_error, info.last_window)
            if is_terminal(info.state):
                raise AirflowException(
                    f"Lockgate job '{job}' is {info.state} at window {info.last_window}, before window "
                    f"{last}; a retry resumes at window {(info.last_window or first - 1) + 1}"
                )
            _sleep(poll_interval, stop)

    def run_failed(self, job: str, first: int, error: str | None, done: int | None) -> AirflowException:
        """The error of a run of ``job`` from window ``first`` that failed after window ``done``
        (a multi-line engine error is logged whole; the exception holds it in short)."""
        if error and "\n" in error:
            self.log.error("Lockgate job %r failed:\n%s", job, error)
        return AirflowException(failed_run_message(job, first, error, done))

    def run_result(
        self,
        job: str,
        first: int,
        last: int,
        *,
        start: datetime | None,
        end: datetime | None,
        window_rows: dict[int, dict[str, Any]] | None = None,
        cycle_s: float | None = None,
        plan_version: str | None = None,
    ) -> dict[str, Any]:
        """The summary of a run of windows ``first..last``, from the job's checkpoints
        (see :func:`~lockgate_provider.utils.run_summary`)."""
        cps: list[Any] = []
        if last >= first:
            try:
                cps = self.get_conn().list_checkpoints(job)
            except JobNotFoundError:
                cps = []
        return run_summary(job, first, last, start=start, end=end, checkpoints=cps, window_rows=window_rows,
                           cycle_s=cycle_s, plan_version=plan_version)


def _sleep(seconds: float, stop: threading.Event | None) -> None:
    if stop is None:
        time.sleep(seconds)
    else:
        stop.wait(seconds)
