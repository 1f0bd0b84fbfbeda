"""The Lockgate hook: one Airflow connection, two ways to reach Lockgate.

A connection of type ``lockgate`` (default id ``lockgate_default``) names either

* the **embedded** engine (host empty or ``embedded``): controller and worker run inside the
  Airflow task's own process, on local Spark or on the cluster named by an apache-spark
  ``spark`` / ``spark_connect`` connection, with the SQLite catalog under ``LOCKGATE_HOME``;
* a **controller** (``lockgate server``) at host and port, with an optional token (the
  connection's password) and TLS.

The hook hands out the engine's own clients (:func:`lockgate.connect`,
:func:`lockgate.connect_async`); operators, sensors and triggers use nothing else.

When ``lockgate_default`` is not defined at all, the hook falls back to the embedded engine
with its defaults, so a first DAG runs with no set-up.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

import lockgate
from lockgate import AsyncClient, Client

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


def default_home() -> str:
    """The embedded engine's folder: ``$LOCKGATE_HOME``, else ``~/.lockgate`` (as the engine's CLI)."""
    return os.environ.get("LOCKGATE_HOME") or os.path.join(os.path.expanduser("~"), ".lockgate")


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
        """The page of ``job``: ``<ui_url>/jobs/<job>`` when the connection names a UI (the
        Lockgate Airflow plugin's page), otherwise the controller's address and the job."""
        ui = self.settings.get("ui_url")
        if ui:
            return f"{str(ui).rstrip('/')}/jobs/{job}"
        return f"{self.address}/jobs/{job}"

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
        running = sum(1 for j in jobs if j.state in ("RUNNING", "RECOVERING", "SCHEDULING"))
        what = f"embedded Lockgate ({self.address})" if self.embedded else f"Lockgate controller at {url}"
        return True, f"Connected to the {what}: {len(jobs)} jobs, {running} running"
