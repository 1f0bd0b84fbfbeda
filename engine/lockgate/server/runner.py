"""One run of one job inside the controller: a worker, a CycleScheduler, restarts.

:class:`JobRunner` drives a run (a range of windows, or a continuous job) the way the
embedded client does (both through :mod:`lockgate.control.jobs`), but its
:class:`~lockgate.control.scheduler.CycleScheduler` talks to a worker process through
:class:`RemoteCycleExecutor` (the scheduler's ``CycleExecutor`` protocol over gRPC), and it
sees of the controller only its :class:`RunContext`. The controller's half of every round
(stage, commit the sinks, checkpoint) stays in the controller; the worker only runs the
round on Spark.

When the worker is lost (it died, missed the heartbeat deadline, its stream closed) or
a round fails for a reason that may pass, the job goes to RECOVERING and the runner
starts again after a backoff (0.5 s doubling up to a cap, as Arroyo does): a new worker,
a new generation (the old one is fenced), and the scheduler's ``prepare()`` restores the
job from its last complete window. After ``max_restarts`` restarts (the count is reset
after a healthy stretch) the job goes to FAILED with the last error. Errors that say the
request itself is wrong (an invalid plan, a window gap, a state layout that does not fit,
a damaged snapshot) fail the job at once.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..api.loader import ReferencePolicy
from ..checkpoint.catalog import Catalog
from ..checkpoint.snapshots import SnapshotStore
from ..control.info import JobEvent, RunResult
from ..control.jobs import RESET_KEY, RUN_REQUEST_KEY, JobOperations
from ..control.scheduler import CycleScheduler
from ..control.transitions import JobTransitions
from ..errors import CompileError, FencedError, LockgateError
from ..logs import get_logger, log_event
from ..metrics import NO_METRICS, MetricsRecorder
from ..plan.logical import PipelineGraph
from ..runtime.results import CycleResult, RestorePoint
from ..states import JobState
from .config import ServerConfig
from .errors import FATAL_CODES, CycleFailedError, WorkerLostError, WorkerStartError, rebuild
from .generated import lockgate_worker_pb2 as wpb
from .limits import check_windows_in_clock

if TYPE_CHECKING:
    from .pool import WorkerHandle, WorkerPool

log = get_logger("server.runner")



@dataclass
class RemotePlan:
    """What the scheduler needs of a compiled plan, rebuilt from the worker's plan JSON
    (the Python callables stay in the worker)."""

    graph: PipelineGraph
    explain: str = ""
    pipeline: Any = None

    @property
    def version(self) -> str:
        return self.graph.version

    @property
    def name(self) -> str:
        return self.graph.name


def plan_from(plan_json: str, plan_version: str, explain: str = "") -> RemotePlan:
    graph = PipelineGraph.from_json(plan_json)
    if graph.version != plan_version:
        raise LockgateError(
            f"the plan JSON of plan {plan_version} hashes to {graph.version} after a round trip; "
            "the controller and the worker run different Lockgate versions"
        )
    return RemotePlan(graph, explain)


def compile_failure(done: Any) -> LockgateError:
    """The error a worker reported for a failed compile (CompileError for non-Lockgate ones)."""
    from .errors import CODES

    if not done.error_code:
        return CompileError(f"the pipeline failed to compile: {done.message}")
    status = CODES.get(done.error_code)
    return rebuild(done.error_type, status, done.message) if status else LockgateError(done.message)


@dataclass
class RunSpec:
    """A run request, as stored in the job's options (``lockgate_run``)."""

    mode: str = "range"  # "range" | "continuous"
    first: int | None = None
    last: int | None = None
    until_caught_up: bool = False
    reset_state: bool = False
    spark_master: str | None = None
    #: catch-up group size ("auto", "off", a number); None: the controller's $LOCKGATE_CATCHUP
    catchup: str | None = None
    stop: bool = False
    requested: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> RunSpec | None:
        data = (options or {}).get(RUN_REQUEST_KEY)
        if not isinstance(data, dict):
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def is_transient(err: BaseException) -> bool:
    """Whether a restart may help: lost workers, failed rounds and infrastructure errors
    yes; errors that say the request or the job's data is wrong no (among them a round that
    failed deterministically, and OverflowError, ValueError or TypeError raised here)."""
    if isinstance(err, WorkerLostError | WorkerStartError):
        return True
    if isinstance(err, CycleFailedError):
        return err.error_code not in FATAL_CODES and not err.deterministic
    if isinstance(err, FencedError):
        return False
    if isinstance(err, LockgateError):
        return err.code not in FATAL_CODES and err.code != "LOCKGATE_ERROR"
    # an out-of-range value, a ValueError or a TypeError fails the same way every time
    return isinstance(err, Exception) and not isinstance(err, ArithmeticError | ValueError | TypeError)


@dataclass
class RunContext:
    """What a :class:`JobRunner` may use of the controller that runs it, and no more."""

    config: ServerConfig
    catalog: Catalog
    snapshots: SnapshotStore
    jobs: JobOperations
    pool: WorkerPool
    #: where pipeline references may come from (checked again before each attempt: a resumed
    #: job's reference was accepted by an earlier controller, perhaps with other flags)
    policy: ReferencePolicy
    #: hands an event to the job's watchers
    publish: Callable[[JobEvent], None]
    #: makes the runner the job's one runner on this controller (JobStateError when another is)
    register: Callable[[JobRunner], None]
    #: tells the controller the runner ended
    ended: Callable[[JobRunner], None]
    #: True once the controller is going away: runs end without writing, the next controller resumes them
    shutting_down: Callable[[], bool]
    #: the controller's metrics (a no-op without --metrics-port)
    metrics: MetricsRecorder = NO_METRICS


class ServerScheduler(CycleScheduler):
    """The cycle scheduler of a controller's run: lost workers and other passing failures
    move the job to RECOVERING instead of FAILED."""

    def __init__(self, *args: Any, runner: JobRunner, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.runner = runner

    def fail(self, err: BaseException) -> None:
        runner = self.runner
        if runner.ctx.shutting_down():
            return  # the job stays as it is; the next controller resumes it
        try:
            if isinstance(err, CycleFailedError) and err.cancelled and runner.stop_event.is_set():
                self.moves.move(JobState.STOPPING, "stop requested without drain: the running window was cancelled")
                self.moves.move(JobState.STOPPED, f"stopped after window {self.last_window}")
                return
            if isinstance(err, FencedError):
                log.warning("job %s: this runner was fenced: %s", self.job, err)
                return
            if is_transient(err):
                self.moves.recover(f"{type(err).__name__}: {err}")
                return
        except LockgateError:
            log.exception("job %s: could not record the failure", self.job)
            return
        super().fail(err)


class RemoteCycleExecutor:
    """Runs the worker's half of a round in the job's worker process: ExecuteCycle to it,
    CycleDone back."""

    def __init__(self, runner: JobRunner):
        self.runner = runner

    def run_cycle(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        return CycleResult(**json.loads(self._execute([window], [attempt], restore)))

    def run_group(self, windows: list[int], attempts: list[int], restore: RestorePoint | None) -> list[CycleResult]:
        body = json.loads(self._execute(windows, attempts, restore, group=True))
        return [CycleResult(**r) for r in body["results"]]

    def _execute(self, windows: list[int], attempts: list[int], restore: RestorePoint | None, group: bool = False) -> str:
        """Send one ExecuteCycle (a group when ``group``) and wait for its CycleDone's result JSON."""
        window, attempt = windows[0], attempts[0]
        runner = self.runner
        pool = runner.ctx.pool
        h = runner.worker
        if h is None:
            raise WorkerLostError(f"job '{runner.job}' has no worker")
        rid = pool.next_request_id()
        task = wpb.ExecuteCycle(request_id=rid, generation=runner.generation or 0, window=window, attempt=attempt)
        if group:
            task.group_windows.extend(windows)
            task.group_attempts.extend(attempts)
        if restore is not None:
            task.restore.window = restore.window
            if restore.snapshot_uri is not None:
                task.restore.snapshot_uri = restore.snapshot_uri
            task.restore.snapshot_manifest_json = json.dumps(restore.snapshot_manifest)
            task.restore.positions_json = json.dumps(restore.positions)
        cancel_sent = 0.0

        def on_wait() -> None:  # a stop without drain cancels the round (resent: it may cross the task)
            nonlocal cancel_sent
            if runner.stop_event.is_set() and not runner.drain and time.monotonic() - cancel_sent > 1.0:
                cancel_sent = time.monotonic()
                pool.send(h, wpb.WorkerTask(cancel=wpb.Cancel(reason="stop without drain")))

        h.cycles_sent += 1
        report = pool.call(h, rid, wpb.WorkerTask(execute=task), on_wait=on_wait)
        if isinstance(report, wpb.CycleFailedRequest):
            raise CycleFailedError(
                f"window {window} failed in {h.describe()}: {report.message}",
                report.error_type, report.error_code, report.cancelled, report.deterministic,
            )
        return report.result_json


class JobRunner:
    """Runs one run request of one job until it ends (FINISHED, STOPPED or FAILED)."""

    def __init__(self, ctx: RunContext, job: str | None, pipeline_ref: str, spec: RunSpec, recovered: bool = False):
        self.ctx = ctx
        self.job = job
        self.ref = pipeline_ref
        self.spec = spec
        self.recovered = recovered
        self.claimed = recovered
        self.spec_saved = recovered
        self.registered = False
        self.stop_event = threading.Event()
        self.drain = True
        self.started = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.last_error: BaseException | None = None
        self.worker: WorkerHandle | None = None
        self.generation: int | None = None
        self.restarts = 0
        self.last_restart = 0.0
        self.backoff = ctx.config.restart_backoff_s
        self.listeners: list[queue.Queue[Any]] = []
        self.t0 = time.perf_counter()
        self.first: int | None = None
        self.last: int | None = None
        self.initial_last: int | None = None
        self.counts = {"windows_run": 0, "rows_in": 0, "rows_out": 0, "late_rows": 0}
        self.thread = threading.Thread(target=self._main, name=f"lockgate-job-{job or pipeline_ref}", daemon=True)

    # -- events ------------------------------------------------------------------------
    def emit(self, event: JobEvent) -> None:
        for q in list(self.listeners):
            q.put(event)
        if self.job:
            self.ctx.publish(event)

    def _event(self, kind: str, **fields: Any) -> None:
        self.emit(JobEvent(kind, self.job or "", at=time.time(), **fields))

    def _on_cycle_event(self, e: JobEvent) -> None:
        if e.kind == "cycle_done":
            self.counts["windows_run"] += 1
            self.counts["rows_in"] += e.rows_in
            self.counts["rows_out"] += e.rows_out
            self.counts["late_rows"] += e.late_rows
            if self.restarts and time.monotonic() - self.last_restart > self.ctx.config.restart_reset_s:
                self.restarts = 0  # healthy for a while: the restart budget and the backoff start over
                self.backoff = self.ctx.config.restart_backoff_s
        self.emit(e)

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def request_stop(self, drain: bool) -> None:
        self.drain = drain
        self.stop_event.set()
        h = self.worker
        if not drain and h is not None:
            self.ctx.pool.send(h, wpb.WorkerTask(cancel=wpb.Cancel(reason="stop without drain")))

    def _fail_start(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err

    # -- the run -------------------------------------------------------------------------
    def _main(self) -> None:
        clean = False
        try:
            self._loop()
            # a run stopped without draining may have had its round cancelled: not kept
            clean = self.error is None and not (self.stop_event.is_set() and not self.drain)
        except BaseException as err:
            log.exception("job %s: the runner crashed", self.job)
            self._fail_start(err)
            if self.claimed and self.job:
                try:
                    JobTransitions(self.ctx.catalog, self.job).fail(f"{type(err).__name__}: {err}")
                except LockgateError:
                    log.exception("job %s: could not record the failure", self.job)
        finally:
            # a run that ended cleanly leaves its worker to the job's next run (a queued DAG run)
            self._drop_worker("run ended", keep_for=self.job if clean else None)
            self.ctx.ended(self)
            self.started.set()
            self.done.set()

    def _drop_worker(self, reason: str, keep_for: str | None = None) -> None:
        h, self.worker = self.worker, None
        if h is not None:
            self.ctx.pool.give_back(h, reason, keep_for=keep_for)

    def _loop(self) -> None:
        cfg = self.ctx.config
        while True:
            if self.ctx.shutting_down():
                return
            if self.stop_event.is_set():
                self._stop_now()
                return
            try:
                self._attempt()
                return
            except CycleFailedError as err:
                if err.cancelled and self.stop_event.is_set():
                    return  # the scheduler recorded STOPPED
                if not self._handle_failure(err):
                    return
            except FencedError as err:
                log.warning("job %s: fenced, this run ends without writing: %s", self.job, err)
                self._fail_start(err)
                return
            except BaseException as err:
                if not self._handle_failure(err):
                    return
            delay = self.backoff
            self.backoff = min(self.backoff * 2, cfg.restart_backoff_max_s)
            last = self.last_error
            self._event("restart_scheduled", message=f"restart {self.restarts}/{cfg.max_restarts} in {delay:.1f}s "
                                                     f"after {type(last).__name__}: {last}")
            self.stop_event.wait(delay)

    def _handle_failure(self, err: BaseException) -> bool:
        """Record ``err``; True when the run should restart."""
        cfg = self.ctx.config
        self.last_error = err
        if self.ctx.shutting_down():
            self._drop_worker("controller shutting down")
            return False
        lost = self.worker
        if lost is not None:
            self._drop_worker(f"{type(err).__name__}: {err}")
        if isinstance(err, WorkerLostError | WorkerStartError):
            self._event("worker_lost", message=str(err))
        log_event(log, "run_failure", job=self.job, error=f"{type(err).__name__}: {err}", restarts=self.restarts,
                  transient=is_transient(err))
        if not isinstance(err, Exception) or not is_transient(err) or self.restarts >= cfg.max_restarts:
            if not self.claimed:
                self._fail_start(err)  # nothing was recorded: the request fails as a whole
                return False
            reason = f"{type(err).__name__}: {err}"
            if is_transient(err):
                reason = f"gave up after {self.restarts} restarts; the last error: {reason}"
            try:
                JobTransitions(self.ctx.catalog, self.job or "").fail(reason)
            except LockgateError:
                log.exception("job %s: could not record the failure", self.job)
            self._fail_start(err)
            self._event("run_failed", message=reason)
            return False
        self.restarts += 1
        self.last_restart = time.monotonic()
        if self.claimed and self.job:
            try:
                JobTransitions(self.ctx.catalog, self.job).recover(f"{type(err).__name__}: {err}")
            except LockgateError:
                log.exception("job %s: could not record RECOVERING", self.job)
        return True

    def _stop_now(self) -> None:
        """A stop requested while no round runs (during a restart's backoff, or before start)."""
        if self.claimed and self.job:
            moves = JobTransitions(self.ctx.catalog, self.job, self.ctx.catalog.acquire(self.job))
            moves.stop(f"stop requested while {'recovering' if self.restarts else 'starting'}; "
                       "the job resumes from its last complete window")

    def _attempt(self) -> None:
        ctx = self.ctx
        cfg = ctx.config
        master = self.spec.spark_master or cfg.spark_master
        ctx.policy.check(self.ref)
        self.worker = h = ctx.pool.take(master, self.job or self.ref, self.stop_event)
        hello = h.hello
        rid = ctx.pool.next_request_id()
        assign = wpb.WorkerTask(assign=wpb.Assign(request_id=rid, job=self.job or "", pipeline=self.ref))
        done = ctx.pool.load_call(h, rid, assign, self.ref, timeout=cfg.compile_timeout_s)
        if not done.ok:
            raise compile_failure(done)
        plan = plan_from(done.plan_json, done.plan_version, done.explain)
        # a window beyond the pipeline's clock is a wrong request, refused before anything is written
        check_windows_in_clock(plan.graph.clock, self.spec.first, self.spec.last)
        if self.job is None:  # the pipeline's name
            self.job = plan.name
        if not self.registered:
            ctx.register(self)
            self.registered = True
        ctx.pool.assign_job(h, self.job)
        self._event("worker_started", message=(
            f"{h.describe()} on {hello.spark_master} ({hello.address}, {hello.slots} slots, app {hello.spark_app_id}); "
            f"plan {plan.version}"))
        sched = ServerScheduler(
            ctx.catalog, ctx.snapshots, plan.graph, self.job, cfg.home, RemoteCycleExecutor(self),
            cfg.keep_checkpoints, self._on_cycle_event, runner=self, metrics=ctx.metrics,
        )
        # the first attempt of a request resets state when asked; later ones only while no
        # window completed since (reset_state_at), so a retry never drops the new state
        reset = (self.spec.reset_state and not self.claimed) or ctx.jobs.pending_reset(self.job)
        try:
            # refuses a state layout that does not fit, or a damaged snapshot, before writing
            sched.prepare(reset_state=reset, pipeline_ref=self.ref)
        finally:
            if sched.generation is not None:
                self.claimed = True  # the job was taken over: failures from here on are recorded
        self._claim()
        self.generation = h.generation = sched.generation
        log_event(log, "run_prepared", job=self.job, generation=self.generation, worker=h.id,
                  last_window=sched.last_window)
        if self.initial_last is None:
            self.initial_last = sched.last_window if sched.last_window is not None else -(2**62)
        if self.spec.mode == "continuous":
            ctx.jobs.run_continuous(sched, self.stop_event, on_started=self.started.set)
        else:
            spec = self.spec
            ctx.jobs.run_range(sched, spec.first, spec.last, spec.until_caught_up, self.stop_event,
                               on_range=self._planned, on_started=self.started.set, catchup=spec.catchup)

    def _planned(self, first: int, last: int) -> None:
        """The run's range is known: kept with the job, so a restarted controller resumes the same range."""
        if (self.spec.first, self.spec.last) != (first, last):
            self.spec.first, self.spec.last = first, last
            self.save_spec()
        self.first, self.last = first, last

    def _claim(self) -> None:
        """Record the run request with the job (prepared), so a restarted controller resumes it."""
        if self.spec_saved:
            return
        job = self.job or ""
        update: dict[str, Any] = {RUN_REQUEST_KEY: self.spec.to_dict()}
        last = self.ctx.catalog.last_checkpoint(job)
        if self.spec.reset_state and last is not None:
            update[RESET_KEY] = last.window  # reset once: retries after progress keep the new state
        self.ctx.jobs.set_options(job, update)
        self.spec_saved = True

    def save_spec(self) -> None:
        if self.job:
            self.ctx.jobs.set_options(self.job, {RUN_REQUEST_KEY: self.spec.to_dict()})

    # -- results ---------------------------------------------------------------------------
    def run_result(self) -> RunResult:
        state = self.ctx.catalog.get_job(self.job).state.value if self.job else "FAILED"
        skipped = 0
        if self.first is not None and self.last is not None and self.initial_last is not None:
            skipped = max(0, min(self.last, self.initial_last) - self.first + 1)
        return RunResult(
            job=self.job or "",
            first_window=self.first,
            last_window=self.last,
            windows_run=self.counts["windows_run"],
            windows_skipped=skipped,
            rows_in=self.counts["rows_in"],
            rows_out=self.counts["rows_out"],
            late_rows=self.counts["late_rows"],
            elapsed_s=round(time.perf_counter() - self.t0, 3),
            state=state,
        )


__all__ = ["JobRunner", "RemoteCycleExecutor", "RemotePlan", "RunContext", "RunSpec", "ServerScheduler",
           "is_transient"]
