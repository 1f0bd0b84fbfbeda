"""Operators that drive Lockgate pipelines from Airflow.

* :class:`LockgateCompileOperator`: compile a pipeline, register its plan version, return a summary.
* :class:`LockgateRunWindowsOperator`: run the cycle windows of the DAG run's data interval,
  in order, resuming from the last checkpoint on retry; one asset event per window.
* :class:`LockgateStartPipelineOperator` / :class:`LockgateStopPipelineOperator`: a
  continuous pipeline.
* :class:`LockgateRestoreOperator`: roll a job back to a chosen window, on purpose.

All of them talk to Lockgate through :class:`~lockgate_provider.hooks.lockgate.LockgateHook`
(the embedded engine, or a controller) and link to their job. As with the Databricks and
Dataflow operators, the hook does the work and the waiting (running windows, following a
controller's run, the run's summary); the operators hold the task's arguments, logs, links
and asset events.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator, ResumableJobMixin
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lockgate import check_catchup
from lockgate.errors import JobStateError, LockgateError
from lockgate_provider import lineage
from lockgate_provider.assets import lockgate_asset
from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.links.lockgate import LockgateJobLink
from lockgate_provider.triggers.lockgate import LockgateRunTrigger
from lockgate_provider.utils import (
    LockgateWindowGapError,
    airflow_errors,
    airflow_labels,
    as_window,
    data_interval,
    is_active,
    iso,
    partition_key,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = [
    "LockgateCompileOperator",
    "LockgateRestoreOperator",
    "LockgateRunWindowsOperator",
    "LockgateStartPipelineOperator",
    "LockgateStopPipelineOperator",
    "LockgateWindowGapError",
]

COMPLETE = "COMPLETE"
"""The run operator's status of a run whose every window is committed (ResumableJobMixin)."""


class _LockgateOperatorMixin:
    """The hook and the job link, shared by every Lockgate operator."""

    lockgate_conn_id: str
    spark_conn_id: str | None
    operator_extra_links = (LockgateJobLink(),)

    @cached_property
    def hook(self) -> LockgateHook:
        """The :class:`LockgateHook` of this task's connection."""
        return LockgateHook(self.lockgate_conn_id, spark_conn_id=self.spark_conn_id)

    def _link(self, context: Context, job: str) -> None:
        url = self.hook.job_url(job)
        LockgateJobLink.persist(context, self, url, job)
        self.log.info("Lockgate job %r: %s", job, url)  # type: ignore[attr-defined]


# -- compile ---------------------------------------------------------------------------
class LockgateCompileOperator(_LockgateOperatorMixin, BaseOperator):
    """Compile a Lockgate pipeline, register its plan version, and return a summary.

    The summary (pushed to XCom) holds the pipeline name, the plan version (its hash), the
    operators, the stateful operators, the sinks, the cycle window, the cycle windows of the
    DAG run's data interval, the job it is registered as and the ``explain`` text.
    A pipeline that does not compile fails the task (without retries) with the compile
    error's own message, which names the operator and the fix.

    .. seealso::
        the README, "Airflow" / "LockgateCompileOperator".

    :param pipeline: The pipeline, as ``path/to/file.py:attr`` or ``package.module:attr``
        (templated). A controller loads it on its side: give a path it can read.
    :param job: The job to register the plan under (templated); the pipeline's name by default.
    :param register: Register the plan version with the job (``False``: only validate).
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    :param spark_conn_id: An apache-spark ``spark`` / ``spark_connect`` connection for the
        embedded engine's Spark (the Lockgate connection's ``spark_conn_id`` by default).
    """

    template_fields: Sequence[str] = ("pipeline", "job", "lockgate_conn_id")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        pipeline: str,
        job: str | None = None,
        register: bool = True,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.job = job
        self.register = register
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        result = self.hook.compile_pipeline(self.pipeline)
        summary: dict[str, Any] = result.to_dict()
        self.log.info(
            "Compiled %s: plan version %s, %d operators (%d stateful), sinks %s, cycle window %ss\n%s",
            result.pipeline, result.plan_version, len(result.operators), len(result.stateful_operators),
            ", ".join(result.sinks), result.cycle_window_s, result.explain,
        )
        start, end = data_interval(context)
        if start is not None and end is not None and end > start:
            first, last = self.hook.windows_for(self.pipeline, start, end)
            summary["windows"] = {
                "first": first, "last": last, "count": last - first + 1, "start": iso(start), "end": iso(end),
            }
        else:
            summary["windows"] = None
        job = self.job or result.pipeline
        if self.register:
            info = self.hook.get_conn().submit(self.pipeline, job, labels=airflow_labels(context))
            job = info.name
            self.log.info("Registered plan version %s as job %r (state %s)", info.plan_version, job, info.state)
        summary["job"] = job
        summary["registered"] = self.register
        self._link(context, job)
        return summary


# -- run windows -----------------------------------------------------------------------
#: ``first_window`` value meaning "the window after the job's last committed one"
NEXT_WINDOW = "next"


class LockgateRunWindowsOperator(_LockgateOperatorMixin, ResumableJobMixin, BaseOperator):
    """Run the cycle windows of the DAG run's data interval, in order, exactly once each.

    The data interval ``[data_interval_start, data_interval_end)`` (or ``start`` / ``end``,
    or explicit ``first_window`` / ``last_window``) maps to a range of cycle windows through
    ``Client.windows_for``. Windows run strictly in order:

    * windows already committed (by an earlier attempt, or an earlier run of this DAG run)
      are never run again: a **retry resumes from the last completed window**, restoring
      the job's keyed state from its checkpoint. The job's identity is kept in the task
      state store (:class:`~airflow.sdk.ResumableJobMixin`), so a retry re-attaches to a
      run still going on the controller instead of starting another;
    * a **gap** (an earlier window of the job not complete) fails the task with a message
      naming the missing windows, their time range and the fix;
    * with a controller the task is **deferrable** (default): it starts the run and hands
      it to :class:`~lockgate_provider.triggers.lockgate.LockgateRunTrigger`, freeing the
      worker slot. With the embedded engine the windows run synchronously in the task's
      process (the run cannot outlive it);
    * killing the task stops the run **at a window boundary**: the window in progress
      finishes and is checkpointed (``on_kill``, and the trigger's ``on_kill`` when deferred).

    Each completed window emits an **asset event**: through every
    :class:`~airflow.sdk.AssetAlias` in ``outlets``, one event per window on
    ``window_asset`` (default :func:`~lockgate_provider.assets.lockgate_asset` of the job),
    each with ``job``, ``window``, ``window_start``, ``window_end``, ``rows_in``,
    ``rows_out`` in its extra; every plain :class:`~airflow.sdk.Asset` in ``outlets`` gets one
    event whose extra has the run's totals and a ``windows`` map, and, with
    ``partition_by_window=True``, one partition key per window (its start,
    ``%Y-%m-%dT%H:%M:%S`` UTC, what Airflow's temporal partition mappers read).

    Returns (XCom) the run's summary: job, windows, rows in and out, and the checkpoints.

    .. seealso::
        the README, "Airflow" / "LockgateRunWindowsOperator".

    :param pipeline: The pipeline, ``path/to/file.py:attr`` or ``package.module:attr`` (templated).
    :param job: The job name (templated); the pipeline's name by default. Keep it the same
        for every DAG run: windows of one job run in order across runs.
    :param start: Start of the event-time range (templated; default ``data_interval_start``).
    :param end: End of the range, exclusive (templated; default ``data_interval_end``).
    :param first_window: Explicit first window id (templated); overrides ``start``/``end``.
        ``"next"``: the window after the job's last committed one (the range's first window for a
        job with none), so that one task runs everything the job missed up to ``end`` or
        ``last_window`` (a DAG with ``catchup=False`` taking a backlog in one run).
    :param last_window: Explicit last window id, inclusive (templated).
    :param deferrable: Defer to the triggerer while a controller runs the windows (default
        ``True``); ignored with the embedded engine, which runs synchronously.
    :param poll_interval: Seconds between two looks at the job when following it.
    :param reset_state: Start this run with empty keyed state (after a restore, or a plan
        change that alters the state layout).
    :param catchup: Catch-up group size for a backlog (templated): ``"auto"`` (adaptive),
        ``"off"`` or the most windows one group may run in one go; every window is still
        committed and checkpointed on its own. ``None`` (default): one window at a time with
        the embedded engine (a kill stops at the next window), the controller's default
        (``$LOCKGATE_CATCHUP``, else ``auto``) with a controller.
    :param window_asset: The asset that per-window events attach to through alias outlets.
    :param partition_by_window: Give plain asset outlets one partition key per window.
    :param stop_on_kill: Stop the job at a window boundary when the task is killed.
    :param durable: Keep the job's identity in the task state store, so retries re-attach
        (see :class:`~airflow.sdk.ResumableJobMixin`).
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    :param spark_conn_id: apache-spark connection for the embedded engine's Spark.
    """

    template_fields: Sequence[str] = (
        "pipeline", "job", "start", "end", "first_window", "last_window", "catchup", "lockgate_conn_id",
    )
    ui_color = "#aed6f1"
    external_id_key = "lockgate_run"

    def __init__(
        self,
        *,
        pipeline: str,
        job: str | None = None,
        start: str | datetime | None = None,
        end: str | datetime | None = None,
        first_window: int | str | None = None,
        last_window: int | str | None = None,
        deferrable: bool = True,
        poll_interval: float = 5.0,
        reset_state: bool = False,
        catchup: str | int | None = None,
        window_asset: Asset | None = None,
        partition_by_window: bool = False,
        stop_on_kill: bool = True,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.job = job
        self.start = start
        self.end = end
        self.first_window = first_window
        self.last_window = last_window
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.reset_state = reset_state
        self.catchup = catchup
        self.window_asset = window_asset
        self.partition_by_window = partition_by_window
        self.stop_on_kill = stop_on_kill
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id
        self._kill: threading.Event | None = None  # made in execute(): operators are deep-copied
        self._result: dict[str, Any] | None = None
        self._window_rows: dict[int, dict[str, Any]] = {}
        self._plan: dict[str, Any] = {}

    # -- the range ----------------------------------------------------------------------
    def _resolve(self, context: Context) -> dict[str, Any]:
        """Job name, window range and time range of this run.

        The embedded engine compiles the pipeline first (in process, it is cheap and fails
        early with the compile error). A controller resolves pipelines in its workers, so it is
        asked only what it must: the job's name when none is given, and the windows of a time
        range; a compile error then comes back from those calls, or from starting the run.
        """
        self._catchup()  # a bad value fails the task before anything runs
        compiled = self.hook.compile_pipeline(self.pipeline) if self.hook.embedded or not self.job else None
        job = self.job or compiled.pipeline
        resume = isinstance(self.first_window, str) and self.first_window.strip().lower() == NEXT_WINDOW
        first = None if resume else as_window(self.first_window, "first_window")
        last = as_window(self.last_window, "last_window")
        start, end = data_interval(context, self.start, self.end)
        if resume:  # from where the job left off: one task takes the whole backlog
            info = self.hook.get_job(job)
            if info is not None and info.last_window is not None:
                first = info.last_window + 1
        if first is None or last is None:
            if start is None or end is None:
                raise AirflowFailException(
                    "LockgateRunWindowsOperator needs a time range: this DAG run has no data interval "
                    "(schedule it with an interval timetable, e.g. CronDataIntervalTimetable), or pass "
                    "start= and end= (or first_window= and last_window=)"
                )
            wf, wl = self.hook.windows_for(self.pipeline, start, end)
            first = wf if first is None else first
            last = wl if last is None else last
        return {
            "job": job, "first": first, "last": last, "start": start, "end": end,
            "cycle_s": compiled.cycle_window_s if compiled else None,
            "plan_version": compiled.plan_version if compiled else None,
        }

    def _plan_from_event(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The run's plan again after a deferral, from the trigger's event (no compile)."""
        start, end = data_interval(context, self.start, self.end)
        cps = event.get("checkpoints") or []
        return {
            "job": event["job"], "first": int(event["first_window"]), "last": int(event["last_window"]),
            "start": start, "end": end, "cycle_s": None, "plan_version": cps[-1]["plan_version"] if cps else None,
        }

    def execute(self, context: Context) -> Any:
        self._kill = threading.Event()
        self._plan = plan = self._resolve(context)
        self._link(context, plan["job"])
        if plan["last"] < plan["first"]:
            self.log.info("The range %s..%s holds no cycle window: nothing to run", plan["start"], plan["end"])
            return self._finish(context)
        self.log.info(
            "Lockgate job %r: windows %d..%d (%d windows, %s to %s) via %s",
            plan["job"], plan["first"], plan["last"], plan["last"] - plan["first"] + 1,
            iso(plan["start"]), iso(plan["end"]), self.hook.address,
        )
        return self.execute_resumable(context)

    def _catchup(self) -> str | None:
        """The rendered ``catchup`` (None, or ``"auto"``, ``"off"``, a number), checked."""
        if self.catchup is None or str(self.catchup).strip() == "":
            return None
        try:
            return check_catchup(self.catchup, "catchup")
        except LockgateError as err:
            raise AirflowFailException(str(err)) from err

    # -- ResumableJobMixin --------------------------------------------------------------
    def _external_id(self) -> dict[str, Any]:
        p = self._plan
        return {"job": p["job"], "first": p["first"], "last": p["last"], "controller": self.hook.address}

    def submit_job(self, context: Context) -> Any:
        p = self._plan
        info = self.hook.get_job(p["job"])
        self.hook.check_window_gap(p["job"], p["first"], p["last"], info)
        done = info.last_window if info is not None else None
        if done is not None and done >= p["first"]:
            self.log.info(
                "Windows %d..%d of job %r are already committed (an earlier attempt or run): they are not run "
                "again; resuming at window %d from the checkpoint of window %d",
                p["first"], min(done, p["last"]), p["job"], done + 1, done,
            )
        if done is not None and done >= p["last"]:
            self.log.info("Every window of the range is committed already: nothing to run")
        elif not self.hook.embedded:
            started = self.hook.start_run(self.pipeline, p["job"], p["first"], p["last"], reset_state=self.reset_state,
                                          catchup=self._catchup(), labels=airflow_labels(context))
            self.log.info("Started job %r on %s (%s)", started.name, self.hook.address, started.state)
        return self._external_id()

    def get_job_status(self, external_id: Any, context: Context) -> str:
        if not isinstance(external_id, dict) or external_id != self._external_id():
            self.log.info("The stored Lockgate run %s is not this run's %s: starting afresh", external_id, self._external_id())
            return "STALE"
        info = self.hook.get_job(self._plan["job"])
        if info is None:
            return "NOT_FOUND"
        if info.last_window is not None and info.last_window >= self._plan["last"]:
            return COMPLETE
        return info.state

    def is_job_active(self, status: str) -> bool:
        return is_active(status)

    def is_job_succeeded(self, status: str) -> bool:
        return status == COMPLETE

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        p = self._plan
        if self.hook.embedded:
            rows = self.hook.run_windows(
                self.pipeline, p["job"], p["first"], p["last"], reset_state=self.reset_state, stop=self._kill,
                catchup=self._catchup(), labels=airflow_labels(context),
            )
            self._window_rows.update(rows)
        elif self.deferrable:
            self._defer()
        else:
            self.hook.wait_for_windows(p["job"], p["first"], p["last"], poll_interval=self.poll_interval, stop=self._kill)
        return self.get_job_result(external_id, context)

    def get_job_result(self, external_id: Any, context: Context) -> Any:
        return self._finish(context)

    # -- deferred -------------------------------------------------------------------------
    def _defer(self) -> None:
        p = self._plan
        self.defer(
            trigger=LockgateRunTrigger(
                job=p["job"],
                first_window=p["first"],
                last_window=p["last"],
                lockgate_conn_id=self.lockgate_conn_id,
                poll_interval=self.poll_interval,
                stop_on_kill=self.stop_on_kill,
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after :class:`LockgateRunTrigger` fired."""
        self._plan = self._plan_from_event(context, event)
        self._link(context, self._plan["job"])
        status = event.get("status")
        if status == "success":
            self.log.info("Trigger: %s", event.get("message"))
            return self._finish(context)
        if status == "incomplete":
            info = self.hook.get_job(self._plan["job"])
            if info is not None and is_active(info.state):
                self.log.info("Job %r is %s again: following it", self._plan["job"], info.state)
            else:
                self.log.warning("%s: starting the remaining windows", event.get("message"))
                self.submit_job(context)
            self._defer()
        raise self.hook.run_failed(self._plan["job"], self._plan["first"], event.get("message"), event.get("last_complete"))

    # -- the result and the asset events ------------------------------------------------
    def _finish(self, context: Context) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        p = self._plan
        result = self.hook.run_result(
            p["job"], p["first"], p["last"], start=p["start"], end=p["end"], window_rows=self._window_rows,
            cycle_s=p["cycle_s"], plan_version=p["plan_version"],
        )
        self._emit_asset_events(context, p["job"], result["checkpoints"], result)
        self.log.info(
            "Job %r: windows %d..%d complete, %d rows in, %d rows out",
            p["job"], p["first"], p["last"], result["rows_in"], result["rows_out"],
        )
        self._result = result
        return result

    def _emit_asset_events(self, context: Context, job: str, windows: list[dict[str, Any]], result: dict[str, Any]) -> None:
        if not self.outlets or not windows:
            return
        events = context["outlet_events"]
        target = self.window_asset or lockgate_asset(job)
        per_window = {e["window"]: {"job": job, **e} for e in windows}
        for outlet in self.outlets:
            if isinstance(outlet, AssetAlias):
                for extra in per_window.values():
                    events[outlet].add(target, extra=extra)
            elif isinstance(outlet, Asset):
                acc = events[outlet]
                acc.extra = {
                    "job": job,
                    "first_window": result["first_window"],
                    "last_window": result["last_window"],
                    "rows_in": result["rows_in"],
                    "rows_out": result["rows_out"],
                    "windows": {partition_key(e) if self.partition_by_window else str(w): e for w, e in per_window.items()},
                }
                if self.partition_by_window:
                    acc.add_partitions([partition_key(e) for e in per_window.values()])

    def on_kill(self) -> None:
        """Stop at a window boundary: the window in progress finishes and is checkpointed."""
        if self._kill is not None:
            self._kill.set()
        job = self._plan.get("job")
        if not self.stop_on_kill or job is None:
            return
        if self.hook.embedded:
            self.log.warning("Killed: job %r stops after the window in progress is committed", job)
            return
        try:
            info = self.hook.get_conn().stop(job, drain=True, timeout=4)
            self.log.warning("Killed: job %r stopped at window %s (%s)", job, info.last_window, info.state)
        except Exception:
            self.log.exception("Killed: stopping job %r failed", job)

    # -- OpenLineage (the lineage extra; see lockgate_provider.lineage) --------------------
    def get_openlineage_facets_on_start(self) -> Any:
        """The job's sources and sinks as datasets, when its plan is known before the run."""
        return lineage.guarded(f"task {self.task_id}", lambda: self._lineage(done=False))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The run's datasets, the rows written, its window range and the plan's SQL."""
        return lineage.guarded(f"task {self.task_id}", lambda: self._lineage(done=True))

    def _lineage(self, done: bool) -> Any:
        p, result = self._plan, self._result or {}
        job = p.get("job") or self.job or ""
        version = p.get("plan_version") if done else None
        first = p.get("first", self.first_window if isinstance(self.first_window, int) else None)
        last = p.get("last", self.last_window if isinstance(self.last_window, int) else None)
        return lineage.build_lineage(
            lineage.job_plan(self.hook, job, version, connect=done), job=job, plan_version=version, first=first,
            last=last, start=p.get("start"), end=p.get("end"), rows_out=result.get("rows_out"),
            sink_rows=lineage.range_sink_rows(self.hook, job, first, last) if done else None,
        )


# -- continuous pipelines --------------------------------------------------------------
class LockgateStartPipelineOperator(_LockgateOperatorMixin, BaseOperator):
    """Start a continuous pipeline: its windows run as they become available until stopped.

    Starting a job that is already running is not an error: the task re-attaches (logs and
    returns the job), so retries and re-runs are safe. The job restores from its last
    checkpoint, like any run.

    With the embedded engine the job runs in the task's own process and ends with it (fine
    for ``dag.test()`` / ``airflow dags test``); use a controller for a pipeline that must
    outlive the task.

    Returns (XCom) the job as a dict (name, state, plan version, last window).

    :param pipeline: The pipeline, ``path/to/file.py:attr`` or ``package.module:attr`` (templated).
    :param job: The job name (templated); the pipeline's name by default.
    :param reset_state: Start with empty keyed state (from the last checkpoint's positions).
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    :param spark_conn_id: apache-spark connection for the embedded engine's Spark.
    """

    template_fields: Sequence[str] = ("pipeline", "job", "lockgate_conn_id")
    ui_color = "#a9dfbf"

    def __init__(
        self,
        *,
        pipeline: str,
        job: str | None = None,
        reset_state: bool = False,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.job = job
        self.reset_state = reset_state
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        client = self.hook.get_conn()
        job = self.job or self.hook.compile_pipeline(self.pipeline).pipeline
        self._link(context, job)
        current = self.hook.get_job(job)
        if current is not None and is_active(current.state) and not self.hook.embedded:
            self.log.info("Job %r is already %s (window %s): not starting it again", job, current.state, current.last_window)
            return current.to_dict()
        if self.hook.embedded:
            self.log.warning(
                "Embedded Lockgate: job %r runs inside this task's process and stops with it; use a "
                "Lockgate controller (a connection with a host) for a pipeline that outlives the task",
                job,
            )
        try:
            with airflow_errors(pipeline=self.pipeline):
                info = client.start(self.pipeline, job=job, reset_state=self.reset_state,
                                    labels=airflow_labels(context))
        except JobStateError as err:
            if "already running" not in str(err):
                raise AirflowException(str(err)) from None
            info = client.get_job(job)
            self.log.info("Job %r is already running here: %s", job, err)
        self.log.info("Started continuous job %r (%s), resuming after window %s", job, info.state, info.last_window)
        self._lineage_run = {"job": job, "first": None if info.last_window is None else info.last_window + 1}
        return info.to_dict()

    def get_openlineage_facets_on_start(self) -> Any:
        """The job's facets (a streaming run); its datasets when its plan is known here already
        (the start event is built in a forked process, which looks no connection up)."""
        return lineage.guarded(f"task {self.task_id}", lambda: lineage.build_lineage(
            lineage.job_plan(self.hook, self.job, connect=False), job=self.job or "", streaming=True))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The started job's sources and sinks (a streaming run from its resume window on)."""
        run = getattr(self, "_lineage_run", None) or {"job": self.job}
        return lineage.guarded(f"task {self.task_id}", lambda: lineage.build_lineage(
            lineage.job_plan(self.hook, run["job"]), job=run["job"] or "", first=run.get("first"), streaming=True))


class LockgateStopPipelineOperator(_LockgateOperatorMixin, BaseOperator):
    """Stop a continuous pipeline: drain (finish the window in progress and checkpoint it)
    or cancel (abandon it; the next run redoes that window from the last checkpoint).

    Stopping a job that is not running returns it as it is. Returns (XCom) the job as a dict.

    :param job: The job to stop (templated).
    :param drain: ``True`` (default): stop at a window boundary with a final checkpoint;
        ``False``: cancel now (nothing is lost: an unfinished window is never committed).
    :param timeout: Seconds to wait for the job to stop.
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    :param spark_conn_id: apache-spark connection for the embedded engine's Spark.
    """

    template_fields: Sequence[str] = ("job", "lockgate_conn_id")
    ui_color = "#f5b7b1"

    def __init__(
        self,
        *,
        job: str,
        drain: bool = True,
        timeout: float | None = 300,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.drain = drain
        self.timeout = timeout
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        client = self.hook.get_conn()
        self._link(context, self.job)
        how = "draining to a window boundary" if self.drain else "cancelling"
        self.log.info("Stopping job %r (%s)", self.job, how)
        with airflow_errors(action=f"Stopping job '{self.job}'"):
            info = client.stop(self.job, drain=self.drain, timeout=self.timeout)
        self.log.info("Job %r is %s; last complete window %s", self.job, info.state, info.last_window)
        return info.to_dict()


# -- restore ---------------------------------------------------------------------------
class LockgateRestoreOperator(_LockgateOperatorMixin, BaseOperator):
    """Roll a job back to a chosen window, on purpose (or restart it without state).

    Checkpoints after ``window`` are dropped and the sink output of those windows retracted;
    the next run resumes at ``window + 1``. What is dropped is logged before it is done.
    With ``reset_state=True`` the keyed state is dropped too (restart without state, from
    the checkpoint's source positions); with ``reset_state=True`` and no ``window``, the job
    keeps its position and restarts without state.

    Returns (XCom) ``job``, ``restored_to``, ``dropped_windows``, ``reset_state`` and ``state``.

    :param job: The job (templated).
    :param window: The window to go back to (templated): a window id, or an instant (ISO
        string or datetime; the last window ending at or before it).
    :param reset_state: Drop the keyed state as well.
    :param pipeline: The pipeline, to map an instant to a window (default: the job's own).
    :param lockgate_conn_id: The Lockgate connection (``lockgate_default``).
    :param spark_conn_id: apache-spark connection for the embedded engine's Spark.
    """

    template_fields: Sequence[str] = ("job", "window", "pipeline", "lockgate_conn_id")
    ui_color = "#f9e79f"

    def __init__(
        self,
        *,
        job: str,
        window: int | str | datetime | None = None,
        reset_state: bool = False,
        pipeline: str | None = None,
        lockgate_conn_id: str = LockgateHook.default_conn_name,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.window = window
        self.reset_state = reset_state
        self.pipeline = pipeline
        self.lockgate_conn_id = lockgate_conn_id
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        client = self.hook.get_conn()
        self._link(context, self.job)
        with airflow_errors():
            info = client.get_job(self.job)
        window = self.hook.window_at(self.window, self.pipeline or info.pipeline_ref)
        if window is None:
            if not self.reset_state:
                raise AirflowFailException("LockgateRestoreOperator needs window=, or reset_state=True to restart without state")
            if info.last_window is None:
                raise AirflowFailException(f"job '{self.job}' has no checkpoint: there is nothing to restart from")
            window = info.last_window
        cps = client.list_checkpoints(self.job)
        dropped = sorted(c.window for c in cps if c.window > window)
        last = info.last_window
        what = (
            f"windows {window + 1}..{last} are rolled back (checkpoints dropped, sink output retracted)"
            if last is not None and last > window else "no later window to roll back"
        )
        self.log.warning(
            "RESTORE requested by %s.%s (run %s): job %r goes back to window %d; %s%s; the next run resumes at window %d",
            context["dag"].dag_id if context.get("dag") else "?", self.task_id, context.get("run_id"), self.job,
            window, what, "; keyed state is reset" if self.reset_state else "", window + 1,
        )
        with airflow_errors(action=f"Restoring job '{self.job}' to window {window}", retry=False):
            restored = client.restore(self.job, window, reset_state=self.reset_state)
        self.log.warning("Job %r restored to window %d: %s", self.job, window, restored.state)
        self._lineage_window = window
        return {
            "job": self.job,
            "restored_to": window,
            "dropped_windows": list(range(window + 1, last + 1)) if last is not None and last > window else dropped,
            "reset_state": self.reset_state,
            "state": restored.state,
        }

    def get_openlineage_facets_on_start(self) -> Any:
        """The job's facets; its datasets when its plan is known here already (the start event
        is built in a forked process, which looks no connection up)."""
        return lineage.guarded(f"task {self.task_id}", lambda: lineage.build_lineage(
            lineage.job_plan(self.hook, self.job, connect=False), job=self.job))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The job's sources and sinks (the sinks' output after the window retracted), and the window."""
        window = getattr(self, "_lineage_window", None)
        return lineage.guarded(f"task {self.task_id}", lambda: lineage.build_lineage(
            lineage.job_plan(self.hook, self.job), job=self.job, first=window, last=window))

