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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from ..api.loader import load_pipeline
from ..checkpoint.catalog import Catalog
from ..checkpoint.snapshots import SnapshotStore
from ..clock import to_micros
from ..control.catchup import GroupSizer
from ..control.jobs import JobOperations, compile_result, windows_for
from ..control.scheduler import CycleScheduler
from ..defaults import default_home, default_spark_master
from ..errors import JobStateError, LockgateError
from ..names import check_labels
from ..plan.compile import CompiledPlan
from ..plan.explain import explain
from ..runtime.compiler import compile_pipeline
from ..runtime.cycle import CycleRunner
from ..runtime.results import CycleResult, RestorePoint
from ..runtime.spark_failures import mapped_failures
from ..states import is_terminal
from .base import (
    AsyncClient,
    CheckpointInfo,
    Client,
    CompileResult,
    CyclePage,
    EventHandler,
    JobEvent,
    JobInfo,
    PlanInfo,
    RunResult,
    SuperstepInfo,
    TransitionInfo,
)

__all__ = ["EmbeddedAsyncClient", "EmbeddedClient", "LocalCycleExecutor"]


class LocalCycleExecutor:
    """Runs the worker's half of a round in this process: a CycleRunner on the client's SparkSession."""

    def __init__(self, runner: CycleRunner):
        self.runner = runner

    def run_cycle(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        with mapped_failures(self.runner, [window]):  # Spark's failures as one-line errors
            return self.runner.run(window, attempt, restore)

    def run_group(self, windows: list[int], attempts: list[int], restore: RestorePoint | None) -> list[CycleResult]:
        with mapped_failures(self.runner, windows):
            return self.runner.run_group(windows, attempts, restore)


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
        self.jobs = JobOperations(self.catalog, self.home, self.snapshots)
        self.spark_master = spark_master or default_spark_master()
        self.spark_conf = spark_conf or {}
        self.keep_checkpoints = keep_checkpoints
        self._spark: Any = None
        self._continuous: dict[str, tuple[threading.Thread, threading.Event, list[BaseException]]] = {}

    # -- plumbing --------------------------------------------------------------------
    @property
    def spark(self) -> Any:
        if self._spark is None:
            from ..runtime.session import get_spark

            self._spark = get_spark(self.spark_master, conf=self.spark_conf,
                                    log_file=os.path.join(self.home, "logs", "spark-driver.log"))
        return self._spark

    def _compiled(self, pipeline: str) -> CompiledPlan:
        plan = compile_pipeline(load_pipeline(pipeline), self.spark)
        self.spark.conf.set("spark.sql.shuffle.partitions", str(max(v.parallelism for v in plan.graph.vertices.values())))
        return plan

    def _scheduler(self, plan: CompiledPlan, job: str, on_event: EventHandler | None) -> CycleScheduler:
        runner = CycleRunner(self.spark, plan, job, self.home, self.snapshots)
        return CycleScheduler(
            self.catalog, self.snapshots, plan.graph, job, self.home, LocalCycleExecutor(runner),
            self.keep_checkpoints, on_event,
        )

    def _prepared(
        self, pipeline: str, job: str | None, reset_state: bool, on_event: EventHandler | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> CycleScheduler:
        """Compile ``pipeline``, take its job over and restore it to its last complete window."""
        labels = check_labels(labels)  # a bad label is refused before anything starts
        plan = self._compiled(pipeline)
        name = job or plan.name
        if name in self._continuous and self._continuous[name][0].is_alive():
            raise JobStateError(f"job '{name}' is already running in this process; stop it first")
        sched = self._scheduler(plan, name, on_event)
        sched.prepare(reset_state=reset_state or self.jobs.pending_reset(name), pipeline_ref=pipeline)
        self.jobs.set_labels(name, labels)
        return sched

    # -- Client ----------------------------------------------------------------------
    def compile(self, pipeline: str) -> CompileResult:
        plan = self._compiled(pipeline)
        return compile_result(plan.graph, explain(plan))

    def submit(self, pipeline: str, job: str | None = None, *, labels: Mapping[str, str] | None = None) -> JobInfo:
        labels = check_labels(labels)
        return self.jobs.register(self._compiled(pipeline).graph, pipeline, job, labels)

    def windows_for(self, pipeline: str, start: datetime, end: datetime) -> tuple[int, int]:
        return windows_for(load_pipeline(pipeline).clock, to_micros(start), to_micros(end))

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
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """See :meth:`Client.run`; ``stop`` (this client only), once set, ends the run at the
        next boundary between rounds, the job STOPPED with what it committed."""
        return self._run(pipeline, job=job, first=first, last=last, until_caught_up=until_caught_up,
                         reset_state=reset_state, on_event=on_event, catchup=catchup, stop=stop, labels=labels)

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
        catchup: str | int | None = None,
        stop: threading.Event | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RunResult:
        if catchup is not None:
            GroupSizer.parse(catchup)  # a bad value is refused before anything starts
        sched = self._prepared(pipeline, job, reset_state, on_event, labels)
        s = self.jobs.run_range(sched, first, last, until_caught_up, stop, catchup=catchup)
        return RunResult(
            s.job, s.first_window, s.last_window, s.windows_run, s.windows_skipped, s.rows_in, s.rows_out,
            s.late_rows, round(s.elapsed_s, 3), s.state,
        )

    def start_run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        if catchup is not None:
            GroupSizer.parse(catchup)
        return self._background(pipeline, job, reset_state, lambda sched, stop, started: self.jobs.run_range(
            sched, first, last, until_caught_up, stop, on_started=started, catchup=catchup), labels)

    def start(
        self, pipeline: str, *, job: str | None = None, reset_state: bool = False,
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        return self._background(pipeline, job, reset_state, lambda sched, stop, started: self.jobs.run_continuous(
            sched, stop, on_started=started), labels)

    def _background(
        self,
        pipeline: str,
        job: str | None,
        reset_state: bool,
        body: Callable[[CycleScheduler, threading.Event, Callable[[], None]], object],
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        """Prepare the job here, then run ``body(sched, stop, started)`` in a thread; return once
        its rounds have begun (or it ended before that: its error is raised here)."""
        sched = self._prepared(pipeline, job, reset_state, labels=labels)
        name = sched.job
        errors: list[BaseException] = []
        started = threading.Event()
        stop = threading.Event()  # set by stop(): the run ends at the next window boundary

        def target() -> None:
            try:
                body(sched, stop, started.set)
            except BaseException as err:  # recorded in the catalog as FAILED by the scheduler
                errors.append(err)
            finally:
                started.set()

        t = threading.Thread(target=target, name=f"lockgate-run-{name}", daemon=True)
        self._continuous[name] = (t, stop, errors)
        t.start()
        started.wait()
        if errors:
            raise errors[0]
        return self.get_job(name)

    def wait(self, job: str, timeout: float | None = None) -> JobInfo:
        """Wait for a run begun with :meth:`start_run` in this process to end."""
        entry = self._continuous.get(job)
        if entry is not None:
            entry[0].join(timeout)
            if not entry[0].is_alive():
                del self._continuous[job]
        return self.get_job(job)

    def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        entry = self._continuous.get(job)
        if entry is None:
            rec = self.catalog.get_job(job)
            if is_terminal(rec.state):
                return self.jobs.job_info(rec)
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
        return self.get_job(job)

    # -- inspection ------------------------------------------------------------------
    def get_job(self, job: str) -> JobInfo:
        return self.jobs.get_job(job)

    def list_jobs(self) -> list[JobInfo]:
        return self.jobs.list_jobs()

    def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        return self.jobs.list_checkpoints(job)

    def list_cycles(self, job: str, *, limit: int = 100, before: int | None = None) -> CyclePage:
        return self.jobs.list_cycles(job, limit, before)

    def list_transitions(self, job: str) -> list[TransitionInfo]:
        return self.jobs.list_transitions(job)

    def list_supersteps(self, job: str, window: int | None = None) -> list[SuperstepInfo]:
        return self.jobs.list_supersteps(job, window)

    def get_plan(self, job: str, plan_version: str | None = None) -> PlanInfo:
        return self.jobs.get_plan(job, plan_version)

    def restore(self, job: str, window: int, *, reset_state: bool = False) -> JobInfo:
        self.catalog.get_job(job)
        if job in self._continuous:
            raise JobStateError(f"job '{job}' is running; stop it before restoring it to window {window}")
        return self.jobs.restore(job, window, reset_state)

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
        from ..runtime.committers import read_collected

        return read_collected(self.home, job, sink)

    def read_state(
        self, job: str, operator: str | None = None, *, window: int | None = None, table: str | None = None
    ) -> Any:
        return self.jobs.read_state(job, operator, window, table)

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
