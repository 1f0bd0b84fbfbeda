"""The controller: owns the catalog, the job states, the runs and the workers.

The gRPC service (:mod:`lockgate.server.service`) is a thin layer over this class; the
controller itself holds no SparkSession (compiles and cycles run in worker processes).
Started over an existing catalog, it resumes what was under way: a job caught RUNNING,
SCHEDULING or RECOVERING goes to RECOVERING and its run request (stored with the job) is
resumed by a new worker from the last complete window; a job caught STOPPING is stopped.
The workers of the previous controller that outlived it (orphans, for the pool's grace
period) are adopted as warm idle workers, so a resumed job does not wait for Spark to start.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..api.loader import ReferencePolicy
from ..checkpoint.catalog import Catalog
from ..checkpoint.snapshots import SnapshotStore
from ..control.info import (
    CheckpointInfo,
    CompileResult,
    CyclePage,
    JobEvent,
    JobInfo,
    PlanInfo,
    SuperstepInfo,
    TransitionInfo,
)
from ..control.jobs import JobOperations, compile_result, windows_for
from ..control.transitions import JobTransitions
from ..errors import (
    CheckpointNotFoundError,
    InvalidArgumentError,
    JobNotFoundError,
    JobStateError,
    LockgateError,
    SinkNotFoundError,
    WindowGapError,
)
from ..logs import get_logger, log_event
from ..metrics import NO_METRICS, MetricsRecorder, PrometheusMetrics
from ..states import JobState, is_terminal
from .config import ServerConfig
from .limits import check_name
from .pool import WorkerPool
from .runner import JobRunner, RemotePlan, RunContext, RunSpec, compile_failure, plan_from

log = get_logger("server.controller")

_END = object()


class EventHub:
    """Fan-out of job events to watchers (each watcher has a queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[str, list[queue.Queue[Any]]] = {}

    def subscribe(self, job: str) -> queue.Queue[Any]:
        q: queue.Queue[Any] = queue.Queue()
        with self._lock:
            self._subs.setdefault(job, []).append(q)
        return q

    def unsubscribe(self, job: str, q: queue.Queue[Any]) -> None:
        with self._lock:
            subs = self._subs.get(job, [])
            if q in subs:
                subs.remove(q)
            if not subs:
                self._subs.pop(job, None)

    def publish(self, event: JobEvent) -> None:
        with self._lock:
            subs = list(self._subs.get(event.job, []))
        for q in subs:
            q.put(event)

    def wake(self, job: str) -> None:
        with self._lock:
            subs = list(self._subs.get(job, []))
        for q in subs:
            q.put(_END)


class Controller:
    """Jobs, runs and workers behind ``lockgate server``."""

    def __init__(self, config: ServerConfig):
        self.config = config
        os.makedirs(config.home, exist_ok=True)
        self.catalog = Catalog(config.catalog_url or "")
        self.snapshots = SnapshotStore(config.snapshots or os.path.join(config.home, "snapshots"))
        self.jobs = JobOperations(self.catalog, config.home, self.snapshots)
        self.hub = EventHub()
        #: where pipeline references may come from (relative paths: from the workers' folder, the home)
        self.policy = ReferencePolicy.of(config.pipelines, config.pipeline_modules, base=config.home,
                                         unrestricted=config.allow_any_pipeline and not config.confined)
        self.lock = threading.RLock()
        self.runners: dict[str, JobRunner] = {}
        self._restoring: set[str] = set()
        # made now, so an orphan that calls as soon as the gRPC server listens is adopted;
        # it starts workers only from start() on
        self.pool: WorkerPool | None = WorkerPool(config, on_lost=self._worker_lost)
        #: Prometheus metrics of the jobs and workers (--metrics-port; recorded only when served)
        self.metrics: MetricsRecorder = PrometheusMetrics() if config.metrics_port is not None else NO_METRICS
        self.pool.metrics = self.metrics
        self.metrics.watch_workers(lambda: [h.state.value for h in self.pool.workers()] if self.pool else [])
        self.metrics.watch_jobs(lambda: {rec.name: rec.state.value for rec in self.catalog.list_jobs()})
        #: set when the controller goes away: runs end without writing; the next controller resumes them
        self.shutting_down = False
        self.started_at = time.time()

    # -- life cycle --------------------------------------------------------------------
    def start(self, advertise: str) -> None:
        """Start the worker pool (workers reach the controller at ``advertise``; the previous
        controller's orphans calling there are adopted) and resume the jobs a previous
        controller left under way."""
        assert self.pool is not None
        self.pool.start(advertise)
        self.recover_jobs()

    def close(self) -> None:
        """Shut down: workers are released, runs end without changing their jobs (a job
        caught RUNNING stays so, and the next controller started over the catalog resumes it)."""
        self.shutting_down = True
        with self.lock:
            runners = list(self.runners.values())
        if self.pool is not None:
            self.pool.close()
        for r in runners:
            r.stop_event.set()  # wakes a backoff; the runner sees shutting_down and leaves
            r.done.wait(15)
        self.catalog.close()

    def _run_context(self) -> RunContext:
        assert self.pool is not None, "start() the controller first"
        return RunContext(
            config=self.config,
            catalog=self.catalog,
            snapshots=self.snapshots,
            jobs=self.jobs,
            pool=self.pool,
            policy=self.policy,
            publish=self.hub.publish,
            register=self.register,
            ended=self.runner_ended,
            shutting_down=lambda: self.shutting_down,
            metrics=self.metrics,
        )

    def _worker_lost(self, h: Any) -> None:
        if h.job:
            self.hub.publish(JobEvent("worker_lost", h.job, message=f"{h.describe()}: {h.lost_reason}", at=time.time()))

    def recover_jobs(self) -> list[str]:
        """Resume every job a previous controller left under way; returns their names.

        Each resumed run takes its worker from the pool, which waits for the previous
        controller's orphans to be adopted before it starts new workers: a few seconds for any,
        up to ``ADOPT_JOB_WAIT_S`` for the live one that ran the job. A job not resumed holds no
        worker: adopted workers are idle until a run takes them."""
        resumed = []
        for rec in self.catalog.list_jobs():
            if is_terminal(rec.state) or rec.state == JobState.CREATED:
                continue
            with self.lock:
                if rec.name in self.runners:
                    continue
            spec = RunSpec.from_options(rec.options)
            try:
                moves = JobTransitions(self.catalog, rec.name, self.catalog.acquire(rec.name))  # fences its last runner
                if rec.state == JobState.STOPPING or (spec is not None and spec.stop):
                    moves.stop("stopped: the controller restarted while the job was stopping")
                    continue
                if spec is None:
                    moves.fail(f"found {rec.state.value} at controller start with no run request to resume (it was "
                               "run by another process); run it again to resume from its last complete window")
                    continue
                moves.recover("the controller restarted: recovering from the last complete window")
            except LockgateError:
                log.exception("cannot resume job %s", rec.name)
                continue
            runner = JobRunner(self._run_context(), rec.name, rec.pipeline_ref, spec, recovered=True)
            self.register(runner)
            runner.registered = True
            runner.start()
            resumed.append(rec.name)
            log_event(log, "job_resumed", job=rec.name, state=rec.state.value, mode=spec.mode)
        return resumed

    # -- runners -----------------------------------------------------------------------
    def register(self, runner: JobRunner) -> None:
        job = runner.job or ""
        with self.lock:
            other = self.runners.get(job)
            if other is not None and other is not runner:
                raise JobStateError(f"job '{job}' is already running on this controller; stop it first "
                                    f"(lockgate --controller ... stop is Client.stop)")
            if job in self._restoring:
                raise JobStateError(f"job '{job}' is being restored; try again when the restore is done")
            self.runners[job] = runner

    def runner_ended(self, runner: JobRunner) -> None:
        with self.lock:
            if runner.job and self.runners.get(runner.job) is runner:
                del self.runners[runner.job]
        if runner.job:
            self.hub.wake(runner.job)

    def runner(self, job: str) -> JobRunner | None:
        with self.lock:
            return self.runners.get(job)

    # -- reading ---------------------------------------------------------------------------
    def job_info(self, rec: Any) -> JobInfo:
        return self.jobs.job_info(rec)

    def get_job(self, job: str) -> JobInfo:
        return self.jobs.get_job(job)

    def list_jobs(self) -> list[JobInfo]:
        return self.jobs.list_jobs()

    def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        return self.jobs.list_checkpoints(job)

    def list_cycles(self, job: str, limit: int, before: int | None) -> CyclePage:
        return self.jobs.list_cycles(job, limit, before)

    def list_transitions(self, job: str) -> list[TransitionInfo]:
        return self.jobs.list_transitions(job)

    def list_supersteps(self, job: str, window: int | None) -> list[SuperstepInfo]:
        return self.jobs.list_supersteps(job, window)

    def get_plan(self, job: str, plan_version: str | None) -> PlanInfo:
        return self.jobs.get_plan(job, plan_version)

    def read_state(self, job: str, operator: str | None, window: int | None, table: str | None) -> Any:
        """One operator's keyed state at a checkpoint (see :meth:`JobOperations.read_state`)."""
        return self.jobs.read_state(job, operator, window, table)

    def read_sink(self, job: str, sink: str) -> Any:
        """The committed rows of collect sink ``sink`` of ``job``. The name is checked first (it
        names a folder under the home); messages never show the controller's paths."""
        from ..runtime.committers import read_collected

        check_name("the sink name", sink, new=True)
        rec = self.catalog.get_job(job)
        known = self._collect_sinks(rec.plan_version)
        if known is not None and sink not in known:
            listing = ", ".join(repr(k) for k in sorted(known)) or "none"
            raise SinkNotFoundError(f"job '{job}' has no collect sink {sink!r}; its collect sinks: {listing}")
        try:
            return read_collected(self.config.home, job, sink)
        except SinkNotFoundError as err:
            raise SinkNotFoundError(str(err).replace(f" under {self.config.home}", "")) from None

    def _collect_sinks(self, plan_version: str | None) -> set[str] | None:
        """The collect sink names of a plan (None: the job has no plan recorded)."""
        if not plan_version:
            return None
        from ..control.scheduler import sinks_of

        try:
            graph = self.jobs.graph(plan_version)
        except LockgateError:
            return None
        return {cfg.get("name") or vid for vid, cfg in sinks_of(graph).items() if cfg.get("kind") == "collect"}

    # -- compiling -------------------------------------------------------------------------
    def _compile(self, pipeline: str) -> RemotePlan:
        self.policy.check(pipeline)  # refused before a worker imports anything
        assert self.pool is not None
        done = self.pool.compile(self.config.spark_master, pipeline)
        if not done.ok:
            raise compile_failure(done)
        return plan_from(done.plan_json, done.plan_version, done.explain)

    def compile(self, pipeline: str) -> tuple[CompileResult, str]:
        plan = self._compile(pipeline)
        return compile_result(plan.graph, plan.explain), plan.graph.to_json()

    def submit(self, pipeline: str, job: str | None, labels: Mapping[str, str] | None = None) -> JobInfo:
        return self.jobs.register(self._compile(pipeline).graph, pipeline, job, labels)

    def windows_for(self, pipeline: str, start_us: int, end_us: int) -> tuple[int, int]:
        if end_us <= start_us:
            raise InvalidArgumentError("the end of the range must be after its start")
        return windows_for(self._compile(pipeline).graph.clock, start_us, end_us)

    # -- running ---------------------------------------------------------------------------
    def _check_request(self, job: str | None, spec: RunSpec) -> None:
        for name, v in (("first", spec.first), ("last", spec.last)):
            if v is not None and v < 0:
                raise InvalidArgumentError(f"the {name} window must not be negative, got {v}")
        if spec.first is not None and spec.last is not None and spec.last < spec.first:
            raise InvalidArgumentError(f"the last window ({spec.last}) is before the first ({spec.first})")
        if spec.mode == "range" and spec.last is None and not spec.until_caught_up:
            raise InvalidArgumentError("give the last window (--to TIME / --to-window N) or --until-caught-up")
        if spec.spark_master and not spec.spark_master.startswith(("local", "spark://", "sc://")):
            raise InvalidArgumentError(
                f"unsupported Spark master {spec.spark_master!r}: use local[N], spark://host:port or sc://host:port"
            )
        if job is None:
            return
        if self._running_on(job):
            raise JobStateError(f"job '{job}' is already running on this controller; stop it first")
        try:
            self.catalog.get_job(job)
        except JobNotFoundError:
            return
        if spec.first is not None and not spec.reset_state:
            last = self.jobs.effective_last(job)
            if last is not None and spec.first > last + 1:
                raise WindowGapError(job, last + 1, spec.first - 1, spec.first,
                                     hint=f"e.g. --from-window {last + 1}, or set depends_on_past in Airflow")

    def _running_on(self, job: str) -> bool:
        """Whether a run of ``job`` is under way here. A run that has committed every window of
        its range is only wrapping up (its state, its worker): it is waited for, up to
        ``run_end_wait_s``, so that the next run of a DAG is not refused for being quick."""
        runner = self.runner(job)
        if runner is None:
            return False
        if runner.spec.mode == "range" and runner.last is not None:
            done = self.catalog.last_checkpoint(job)
            if done is not None and done.window >= runner.last:
                runner.done.wait(self.config.run_end_wait_s)
        return self.runner(job) is not None

    def begin(self, pipeline: str, job: str | None, spec: RunSpec,
              listener: queue.Queue[Any] | None = None, labels: Mapping[str, str] | None = None) -> JobRunner:
        """Start a run; returns once it has begun (or raises what stopped it from starting)."""
        self.policy.check(pipeline)  # refused before a worker imports anything
        job = job or None
        self._check_request(job, spec)
        runner = JobRunner(self._run_context(), job, pipeline, spec)
        if listener is not None:
            runner.listeners.append(listener)
        if job is not None:
            self.register(runner)
            runner.registered = True
        runner.start()
        runner.started.wait()
        if runner.error is not None:  # it ended before its first round: the request fails
            raise runner.error
        if runner.job is not None:
            self.jobs.set_labels(runner.job, labels)
        return runner

    def stop(self, job: str, drain: bool, timeout: float | None) -> JobInfo:
        runner = self.runner(job)
        if runner is None:
            rec = self.catalog.get_job(job)
            if is_terminal(rec.state) or rec.state == JobState.CREATED:
                return self.job_info(rec)
            moves = JobTransitions(self.catalog, job, self.catalog.acquire(job))
            moves.stop("stopped on request (no run of it was under way here)")
            return self.get_job(job)
        runner.spec.stop = True
        try:
            runner.save_spec()
        except LockgateError:
            log.exception("cannot record the stop request of job %s", job)
        runner.request_stop(drain)
        runner.done.wait(timeout)
        return self.get_job(job)

    def restore(self, job: str, window: int, reset_state: bool) -> JobInfo:
        self.catalog.get_job(job)
        with self.lock:
            if job in self.runners:
                raise JobStateError(f"job '{job}' is running; stop it before restoring it to window {window}")
            if job in self._restoring:
                raise JobStateError(f"job '{job}' is being restored already")
            self._restoring.add(job)
        try:
            restored = self.jobs.restore(job, window, reset_state)
            self.metrics.restored(job, "rollback")
            return restored
        except CheckpointNotFoundError as err:
            # the job exists, the window has no checkpoint (checked before anything changes):
            # a precondition of the restore fails
            raise JobStateError(str(err)) from err
        finally:
            with self.lock:
                self._restoring.discard(job)

    # -- watching ----------------------------------------------------------------------------
    def watch(self, job: str, timeout: float | None, is_active: Callable[[], bool]) -> Iterator[JobEvent]:
        self.catalog.get_job(job)
        q = self.hub.subscribe(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while is_active():
                try:
                    item = q.get(timeout=0.5)
                except queue.Empty:
                    item = _END
                if item is not _END:
                    yield item
                elif self.runner(job) is None and is_terminal(self.catalog.get_job(job).state) and q.empty():
                    return
                if deadline is not None and time.monotonic() > deadline:
                    return
        finally:
            self.hub.unsubscribe(job, q)
