"""The embedded client: controller and worker in the caller's process.

Local Spark (or the master given), the SQLite catalog and the snapshot folder under
``$LOCKGATE_HOME`` (default ``~/.lockgate``): one call runs a pipeline with no server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..api.loader import load_pipeline
from ..checkpoint.catalog import Catalog, CheckpointRecord, JobRecord
from ..checkpoint.snapshots import SnapshotStore
from ..control.scheduler import CycleEvent, CycleScheduler, sinks_of
from ..control.states import JobState, is_terminal
from ..errors import InvalidArgumentError, JobStateError, LockgateError
from ..plan.compile import CompiledPlan, compile_pipeline
from ..plan.explain import explain
from ..plan.logical import PipelineGraph
from ..runtime.commit import committer_for
from ..runtime.cycle import CycleRunner
from ..runtime.results import CycleResult, RestorePoint
from .base import (
    AsyncClient,
    CheckpointInfo,
    Client,
    CompileResult,
    EventHandler,
    JobEvent,
    JobInfo,
    RunResult,
)


def default_home() -> str:
    return os.environ.get("LOCKGATE_HOME") or str(Path.home() / ".lockgate")


class LocalWorker:
    """A worker in this process: a CycleRunner on the client's SparkSession."""

    def __init__(self, runner: CycleRunner):
        self.runner = runner

    def run_cycle(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        return self.runner.run(window, attempt, restore)


def _event(e: CycleEvent) -> JobEvent:
    return JobEvent(
        kind=e.kind,
        job=e.job,
        window=e.window,
        state=e.state,
        rows_in=e.rows_in,
        rows_out=e.rows_out,
        late_rows=e.late_rows,
        timings=dict(e.timings),
        message=e.message,
        at=e.at,
    )


class EmbeddedClient(Client):
    """Runs pipelines in this process.

    :param home: Lockgate's folder (catalog, snapshots, staging, collected results).
    :param catalog_url: SQLAlchemy URL of the catalog; SQLite under ``home`` by default.
    :param snapshots: snapshot store root (a folder or a Hadoop file system URI).
    :param spark_master: ``local[2]``, ``spark://host:7077`` or ``sc://host:15002``.
    :param keep_checkpoints: how many complete checkpoints to keep per job.
    """

    def __init__(
        self,
        home: str | None = None,
        catalog_url: str | None = None,
        snapshots: str | None = None,
        spark_master: str | None = None,
        keep_checkpoints: int = 10,
        spark_conf: dict[str, str] | None = None,
    ):
        self.home = os.path.abspath(home or default_home())
        os.makedirs(self.home, exist_ok=True)
        self.catalog = Catalog(catalog_url or f"sqlite:///{os.path.join(self.home, 'catalog.db')}")
        self.snapshots = SnapshotStore(snapshots or os.path.join(self.home, "snapshots"))
        self.spark_master = spark_master or os.environ.get("LOCKGATE_SPARK_MASTER", "local[2]")
        self.spark_conf = spark_conf or {}
        self.keep_checkpoints = keep_checkpoints
        self._spark: Any = None
        self._continuous: dict[str, tuple[threading.Thread, threading.Event, list[BaseException]]] = {}

    # -- plumbing --------------------------------------------------------------------
    @property
    def spark(self) -> Any:
        if self._spark is None:
            from ..runtime.session import get_spark

            self._spark = get_spark(self.spark_master, conf=self.spark_conf)
        return self._spark

    def _compiled(self, pipeline: str) -> CompiledPlan:
        plan = compile_pipeline(load_pipeline(pipeline), self.spark)
        self.spark.conf.set("spark.sql.shuffle.partitions", str(max(v.parallelism for v in plan.graph.vertices.values())))
        return plan

    def _job_info(self, rec: JobRecord) -> JobInfo:
        last = self.catalog.last_checkpoint(rec.name)
        return JobInfo(
            name=rec.name,
            state=rec.state.value if hasattr(rec.state, "value") else str(rec.state),
            pipeline_ref=rec.pipeline_ref,
            plan_version=rec.plan_version,
            generation=rec.generation,
            last_window=last.window if last else None,
            last_error=rec.last_error,
            updated=rec.updated,
        )

    def _scheduler(self, plan: CompiledPlan, job: str, on_event: EventHandler | None) -> CycleScheduler:
        runner = CycleRunner(self.spark, plan, job, self.home, self.snapshots)
        handler = (lambda e: on_event(_event(e))) if on_event else None
        return CycleScheduler(
            self.catalog, self.snapshots, plan, job, self.home, LocalWorker(runner), self.keep_checkpoints, handler
        )

    # -- Client ----------------------------------------------------------------------
    def compile(self, pipeline: str) -> CompileResult:
        plan = self._compiled(pipeline)
        g = plan.graph
        return CompileResult(
            pipeline=g.name,
            plan_version=plan.version,
            operators=g.topological_order(),
            stateful_operators=[v.id for v in g.vertices.values() if v.stateful],
            sinks=list(sinks_of(plan)),
            cycle_window_s=g.cycle_window_us / 1e6,
            explain=explain(plan),
        )

    def submit(self, pipeline: str, job: str | None = None) -> JobInfo:
        plan = self._compiled(pipeline)
        name = job or plan.name
        self.catalog.ensure_job(name, pipeline)
        self.catalog.save_plan(plan.version, plan.name, plan.graph.to_json(), plan.graph.state_layout())
        self.catalog.set_job_plan(name, plan.version)
        return self._job_info(self.catalog.get_job(name))

    def windows_for(self, pipeline: str, start: datetime, end: datetime) -> tuple[int, int]:
        if end <= start:
            raise InvalidArgumentError("the end of the range must be after its start")
        p = load_pipeline(pipeline)
        return p.window_of(start), p.window_of(end - timedelta(microseconds=1))

    def _range(
        self, plan: CompiledPlan, sched: CycleScheduler, first: int | None, last: int | None, until_caught_up: bool
    ) -> tuple[int, int]:
        from ..runtime.sources import available_from, available_until

        p = plan.pipeline
        if first is None:
            if sched.last_window is not None:
                first = sched.last_window + 1
            else:
                starts = [available_from(v.config["source"]) for v in plan.graph.sources()]
                known = [s for s in starts if s is not None]
                if not known:
                    raise LockgateError(
                        f"job '{sched.job}' has no checkpoint yet and its sources cannot tell where data starts: "
                        "pass the first window (--from TIME or --from-window N)"
                    )
                first = (min(known) - plan.graph.origin_us) // plan.graph.cycle_window_us
        if last is None:
            if not until_caught_up:
                raise LockgateError("give the last window (--to TIME / --to-window N) or --until-caught-up")
            bounds = [available_until(v.config["source"]) for v in plan.graph.sources()]
            now_us = int(datetime.now(UTC).timestamp() * 1e6)
            bound = min(b if b is not None else now_us for b in bounds)
            last = (bound - 1 - plan.graph.origin_us) // plan.graph.cycle_window_us
            if not any(b is not None for b in bounds):
                last -= 1  # unbounded sources: only windows that have fully passed
            if p.window_bounds(last)[1] > datetime.now(UTC) and all(b is None for b in bounds):
                last -= 1
        return first, last

    def run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        on_event: EventHandler | None = None,
    ) -> RunResult:
        return self._run(pipeline, job=job, first=first, last=last, until_caught_up=until_caught_up,
                         reset_state=reset_state, on_event=on_event)

    def _run(
        self,
        pipeline: str,
        *,
        job: str | None,
        first: int | None,
        last: int | None,
        until_caught_up: bool,
        reset_state: bool,
        on_event: EventHandler | None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        plan = self._compiled(pipeline)
        name = job or plan.name
        sched = self._scheduler(plan, name, on_event)
        reset = reset_state or self._pending_reset(name)
        sched.prepare(reset_state=reset, pipeline_ref=pipeline)
        try:
            first, last = self._range(plan, sched, first, last, until_caught_up)
        except LockgateError as err:
            sched._fail(err)
            raise
        if last < first:
            rec = self.catalog.get_job(name)
            if not is_terminal(rec.state):
                sched._to(JobState.RUNNING, "nothing to run")
                sched._to(JobState.FINISHED, f"no window to run: caught up at window {sched.last_window}")
            return RunResult(name, first, last, 0, 0, 0, 0, 0, 0.0, self.catalog.get_job(name).state.value)
        summary = sched.run_windows(first, last, stop)
        self._clear_reset(name)
        return RunResult(
            name,
            summary.first_window,
            summary.last_window,
            summary.windows_run,
            summary.windows_skipped,
            summary.rows_in,
            summary.rows_out,
            summary.late_rows,
            round(summary.elapsed_s, 3),
            summary.state,
        )

    def _pending_reset(self, job: str) -> bool:
        try:
            rec = self.catalog.get_job(job)
        except LockgateError:
            return False
        pending = (rec.options or {}).get("reset_state_at")
        last = self.catalog.last_checkpoint(job)
        return pending is not None and last is not None and last.window == pending

    def _clear_reset(self, job: str) -> None:
        rec = self.catalog.get_job(job)
        if "reset_state_at" in (rec.options or {}):
            opts = {k: v for k, v in rec.options.items() if k != "reset_state_at"}
            self.catalog.ensure_job(job, rec.pipeline_ref, opts)

    def start_run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
    ) -> JobInfo:
        plan = self._compiled(pipeline)
        name = job or plan.name
        if name in self._continuous and self._continuous[name][0].is_alive():
            raise JobStateError(f"job '{name}' is already running in this process")
        errors: list[BaseException] = []
        started = threading.Event()
        stop = threading.Event()  # set by stop(): the run ends at the next window boundary

        def on_event(e: CycleEvent) -> None:  # returns once the job is restored and running
            if e.kind == "state" and e.state not in ("COMPILING", "SCHEDULING", "RECOVERING"):
                started.set()

        def target() -> None:
            try:
                self._run(pipeline, job=name, first=first, last=last, until_caught_up=until_caught_up,
                          reset_state=reset_state, on_event=on_event, stop=stop)
            except BaseException as err:  # recorded in the catalog as FAILED
                errors.append(err)
            finally:
                started.set()

        t = threading.Thread(target=target, name=f"lockgate-run-{name}", daemon=True)
        self._continuous[name] = (t, stop, errors)
        t.start()
        started.wait()
        if errors and not isinstance(errors[0], LockgateError):
            raise errors[0]
        if errors:
            raise errors[0]
        return self._job_info(self.catalog.get_job(name))

    def wait(self, job: str, timeout: float | None = None) -> JobInfo:
        """Wait for a run begun with :meth:`start_run` in this process to end."""
        entry = self._continuous.get(job)
        if entry is not None:
            entry[0].join(timeout)
            if not entry[0].is_alive():
                del self._continuous[job]
        return self._job_info(self.catalog.get_job(job))

    # -- continuous ------------------------------------------------------------------
    def start(self, pipeline: str, *, job: str | None = None, reset_state: bool = False) -> JobInfo:
        plan = self._compiled(pipeline)
        name = job or plan.name
        if name in self._continuous and self._continuous[name][0].is_alive():
            raise JobStateError(f"job '{name}' is already running in this process; stop it first")
        sched = self._scheduler(plan, name, None)
        sched.prepare(reset_state=reset_state or self._pending_reset(name), pipeline_ref=pipeline)
        stop = threading.Event()
        errors: list[BaseException] = []

        def loop() -> None:
            try:
                sched._to(JobState.RUNNING, "continuous run started")
                while not stop.is_set():
                    first, last = self._range(plan, sched, None, None, True)
                    if last >= first:
                        sched.run_windows(first, last, stop, finish=False)
                    else:
                        stop.wait(min(1.0, plan.graph.cycle_window_us / 1e6))
                sched._to(JobState.STOPPING, "stop requested: drained at a window boundary")
                sched._to(JobState.STOPPED, f"stopped after window {sched.last_window}")
            except BaseException as err:  # recorded as FAILED by the scheduler
                errors.append(err)

        t = threading.Thread(target=loop, name=f"lockgate-{name}", daemon=True)
        self._continuous[name] = (t, stop, errors)
        t.start()
        return self._job_info(self.catalog.get_job(name))

    def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        entry = self._continuous.get(job)
        if entry is None:
            rec = self.catalog.get_job(job)
            if is_terminal(rec.state):
                return self._job_info(rec)
            raise JobStateError(
                f"job '{job}' is {rec.state.value} but not running in this process; an embedded client can "
                "only stop jobs it started (use a controller, grpc://..., to stop jobs across processes)"
            )
        thread, stop, errors = entry
        stop.set()
        if not drain:
            self.spark.sparkContext.cancelAllJobs()
        thread.join(timeout)
        del self._continuous[job]
        if errors and drain:
            raise errors[0]
        return self._job_info(self.catalog.get_job(job))

    # -- inspection ------------------------------------------------------------------
    def get_job(self, job: str) -> JobInfo:
        return self._job_info(self.catalog.get_job(job))

    def list_jobs(self) -> list[JobInfo]:
        return [self._job_info(r) for r in self.catalog.list_jobs()]

    def _checkpoint_info(self, cp: CheckpointRecord, graphs: dict[str, PipelineGraph]) -> CheckpointInfo:
        if cp.plan_version not in graphs:
            graphs[cp.plan_version] = PipelineGraph.from_json(self.catalog.get_plan(cp.plan_version).plan_json)
        g = graphs[cp.plan_version]
        start_us = g.origin_us + cp.window * g.cycle_window_us
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        return CheckpointInfo(
            job=cp.job,
            window=cp.window,
            window_start=epoch + timedelta(microseconds=start_us),
            window_end=epoch + timedelta(microseconds=start_us + g.cycle_window_us),
            plan_version=cp.plan_version,
            rows_in=cp.rows_in,
            rows_out=cp.rows_out,
            status=cp.status.value if hasattr(cp.status, "value") else str(cp.status),
            created=cp.created,
            snapshot_uri=cp.snapshot_uri,
        )

    def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        self.catalog.get_job(job)
        graphs: dict[str, PipelineGraph] = {}
        return [self._checkpoint_info(cp, graphs) for cp in self.catalog.list_checkpoints(job)]

    def restore(self, job: str, window: int, *, reset_state: bool = False) -> JobInfo:
        rec = self.catalog.get_job(job)
        if job in self._continuous:
            raise JobStateError(f"job '{job}' is running; stop it before restoring it to window {window}")
        plan = self._compiled(rec.pipeline_ref)
        self.catalog.get_checkpoint(job, window)  # clear error when there is none, before fencing anyone
        generation = self.catalog.acquire(job)

        def to(state: JobState, reason: str) -> None:
            self.catalog.transition(job, state, reason, expected_generation=generation)

        if is_terminal(rec.state) or rec.state == JobState.CREATED:
            to(JobState.COMPILING, f"restore to window {window} requested")
            to(JobState.SCHEDULING, f"rolling back to window {window}")
        elif rec.state != JobState.RECOVERING:
            to(JobState.RECOVERING, f"restore to window {window} requested while {rec.state.value}")
        rolled = self.catalog.rollback_to(job, window, generation)
        sinks = sinks_of(plan)
        for cyc in self.catalog.abort_open_cycles(job, staged_after=window, reason=f"restore to window {window}"):
            for name, staged in (cyc.manifest.get("staged") or {}).items():
                sink = (cyc.manifest.get("sinks") or {}).get(name) or sinks.get(name)
                if sink:
                    committer_for(sink, self.home).discard(staged)
        for name, sink in sinks.items():
            committer_for(sink, self.home).retract_after(job, name, window)
        if reset_state:
            self.catalog.ensure_job(job, rec.pipeline_ref, {**(rec.options or {}), "reset_state_at": window})
        to(JobState.STOPPING, "rolled back")
        what = f"windows {rolled[0]}..{rolled[-1]} rolled back" if rolled else "nothing after it to roll back"
        state_note = "; keyed state will be reset" if reset_state else ""
        to(JobState.STOPPED, f"restored to window {window} on request ({what}{state_note}); next run resumes at {window + 1}")
        return self._job_info(self.catalog.get_job(job))

    def watch(self, job: str, *, timeout: float | None = None) -> Iterator[JobEvent]:
        deadline = None if timeout is None else time.monotonic() + timeout
        seen_t = {t.id for t in self.catalog.transitions(job)}
        seen_c: dict[int, str] = {c.id: c.state.value for c in self.catalog.list_cycles(job)}
        while deadline is None or time.monotonic() < deadline:
            for t in self.catalog.transitions(job):
                if t.id not in seen_t:
                    seen_t.add(t.id)
                    yield JobEvent("state", job, state=t.to_state.value, message=t.reason, at=t.at.timestamp())
            for c in reversed(self.catalog.list_cycles(job)):
                state = c.state.value
                if seen_c.get(c.id) != state:
                    seen_c[c.id] = state
                    kind = {"RUNNING": "cycle_started", "COMMITTED": "cycle_done"}.get(state, "cycle_failed")
                    if state == "STAGED":
                        continue
                    yield JobEvent(
                        kind, job, window=c.window, rows_in=c.rows_in, rows_out=c.rows_out,
                        late_rows=c.late_rows, timings=dict(c.timings), message=c.error or "",
                    )
            if is_terminal(self.catalog.get_job(job).state) and job not in self._continuous:
                return
            time.sleep(0.3)

    def read_sink(self, job: str, sink: str) -> Any:
        from ..runtime.commit import read_collected

        return read_collected(self.home, job, sink)

    def close(self) -> None:
        for name in list(self._continuous):
            with contextlib.suppress(LockgateError):
                self.stop(name)
        self.catalog.close()


class EmbeddedAsyncClient(AsyncClient):
    """The asyncio face of an :class:`EmbeddedClient` (its calls run in a thread)."""

    def __init__(self, client: EmbeddedClient | None = None, **options: Any):
        self.client = client or EmbeddedClient(**options)

    async def get_job(self, job: str) -> JobInfo:
        return await asyncio.to_thread(self.client.get_job, job)

    async def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        return await asyncio.to_thread(self.client.list_checkpoints, job)

    async def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        return await asyncio.to_thread(self.client.stop, job, drain=drain, timeout=timeout)

    async def watch(self, job: str, *, timeout: float | None = None) -> AsyncIterator[JobEvent]:
        events = self.client.watch(job, timeout=timeout)
        done = object()
        while True:
            e = await asyncio.to_thread(next, events, done)
            if e is done:
                return
            yield e  # type: ignore[misc]

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)
