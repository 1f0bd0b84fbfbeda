"""One run of one job inside the controller: a worker, a CycleScheduler, restarts.

:class:`JobRunner` drives a run (a range of windows, or a continuous job) the way the
embedded client does, but its :class:`~lockgate.control.scheduler.CycleScheduler` talks
to a worker process through :class:`RemoteWorker` (the scheduler's ``Worker`` protocol
over gRPC). The controller's half of every round (stage, commit the sinks, checkpoint)
stays in the controller; the worker only runs the round on Spark.

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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..checkpoint.catalog import Catalog
from ..client.base import JobEvent, RunResult
from ..control.scheduler import CycleEvent, CycleScheduler
from ..control.states import JobState, is_terminal
from ..errors import CompileError, FencedError, InvalidArgumentError, JobNotFoundError, LockgateError
from ..logs import get_logger, log_event
from ..plan.logical import PipelineGraph
from ..runtime.results import CycleResult, RestorePoint
from .errors import FATAL_CODES, CycleFailedError, WorkerLostError, WorkerStartError, rebuild
from .generated import lockgate_worker_pb2 as wpb

if TYPE_CHECKING:
    from .controller import Controller
    from .pool import WorkerHandle

log = get_logger("server.runner")

RUN_KEY = "lockgate_run"
"""The job option holding the run request, so a restarted controller can resume it."""


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
    stop: bool = False
    requested: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_options(cls, options: dict[str, Any] | None) -> RunSpec | None:
        data = (options or {}).get(RUN_KEY)
        if not isinstance(data, dict):
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def is_transient(err: BaseException) -> bool:
    """Whether a restart may help: lost workers, failed rounds and infrastructure errors
    yes; errors that say the request or the job's data is wrong no."""
    if isinstance(err, WorkerLostError | WorkerStartError):
        return True
    if isinstance(err, CycleFailedError):
        return err.error_code not in FATAL_CODES
    if isinstance(err, FencedError):
        return False
    if isinstance(err, LockgateError):
        return err.code not in FATAL_CODES and err.code != "LOCKGATE_ERROR"
    return isinstance(err, Exception)


def walk_to(catalog: Catalog, job: str, target: JobState, reason: str, generation: int | None = None) -> None:
    """Move ``job`` to STOPPED or FAILED through the states the state machine allows."""
    state = catalog.get_job(job).state
    path: list[tuple[JobState, str]] = []
    if target == JobState.STOPPED:
        if is_terminal(state) or state == JobState.CREATED:
            return
        if state == JobState.COMPILING:
            path.append((JobState.SCHEDULING, "stop requested before scheduling"))
        if state != JobState.STOPPING:
            path.append((JobState.STOPPING, reason))
        path.append((JobState.STOPPED, reason))
    elif target == JobState.FAILED:
        if state == JobState.FAILED:
            return
        if is_terminal(state) or state == JobState.CREATED:
            path.append((JobState.COMPILING, "run requested"))
        path.append((JobState.FAILED, reason))
    for s, why in path:
        catalog.transition(job, s, why, expected_generation=generation)


class ServerScheduler(CycleScheduler):
    """The cycle scheduler of a controller's run: lost workers and other passing failures
    move the job to RECOVERING instead of FAILED."""

    def __init__(self, *args: Any, runner: JobRunner, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.runner = runner

    def _fail(self, err: BaseException) -> None:
        runner = self.runner
        if runner.ctl.shutting_down:
            return  # the job stays as it is; the next controller resumes it
        try:
            if isinstance(err, CycleFailedError) and err.cancelled and runner.stop_event.is_set():
                self._to(JobState.STOPPING, "stop requested without drain: the running window was cancelled")
                self._to(JobState.STOPPED, f"stopped after window {self.last_window}")
                return
            if isinstance(err, FencedError):
                log.warning("job %s: this runner was fenced: %s", self.job, err)
                return
            if is_transient(err):
                state = self.catalog.get_job(self.job).state
                if state in (JobState.RUNNING, JobState.SCHEDULING):
                    self._to(JobState.RECOVERING, f"{type(err).__name__}: {err}")
                return
        except LockgateError:
            log.exception("job %s: could not record the failure", self.job)
            return
        super()._fail(err)


class RemoteWorker:
    """The scheduler's Worker: ExecuteCycle to the worker process, CycleDone back."""

    def __init__(self, runner: JobRunner):
        self.runner = runner

    def run_cycle(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        runner = self.runner
        pool = runner.ctl.pool
        h = runner.worker
        if h is None:
            raise WorkerLostError(f"job '{runner.job}' has no worker")
        rid = pool.next_request_id()
        task = wpb.ExecuteCycle(request_id=rid, generation=runner.generation or 0, window=window, attempt=attempt)
        if restore is not None:
            task.restore.window = restore.window
            if restore.snapshot_uri is not None:
                task.restore.snapshot_uri = restore.snapshot_uri
            task.restore.snapshot_manifest_json = json.dumps(restore.snapshot_manifest)
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
                report.error_type, report.error_code, report.cancelled,
            )
        return CycleResult(**json.loads(report.result_json))


class JobRunner:
    """Runs one run request of one job until it ends (FINISHED, STOPPED or FAILED)."""

    def __init__(self, ctl: Controller, job: str | None, pipeline_ref: str, spec: RunSpec, recovered: bool = False):
        self.ctl = ctl
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
        self.backoff = ctl.config.restart_backoff_s
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
            self.ctl.hub.publish(event)

    def _event(self, kind: str, **fields: Any) -> None:
        self.emit(JobEvent(kind, self.job or "", at=time.time(), **fields))

    def _on_cycle_event(self, e: CycleEvent) -> None:
        if e.kind == "cycle_done":
            self.counts["windows_run"] += 1
            self.counts["rows_in"] += e.rows_in
            self.counts["rows_out"] += e.rows_out
            self.counts["late_rows"] += e.late_rows
            if self.restarts and time.monotonic() - self.last_restart > self.ctl.config.restart_reset_s:
                self.restarts = 0  # healthy for a while: the restart budget and the backoff start over
                self.backoff = self.ctl.config.restart_backoff_s
        self.emit(JobEvent(e.kind, e.job, window=e.window, state=e.state, rows_in=e.rows_in, rows_out=e.rows_out,
                           late_rows=e.late_rows, timings=dict(e.timings), message=e.message, at=e.at))

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def request_stop(self, drain: bool) -> None:
        self.drain = drain
        self.stop_event.set()
        h = self.worker
        if not drain and h is not None:
            self.ctl.pool.send(h, wpb.WorkerTask(cancel=wpb.Cancel(reason="stop without drain")))

    def _fail_start(self, err: BaseException) -> None:
        if self.error is None:
            self.error = err

    # -- the run -------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as err:
            log.exception("job %s: the runner crashed", self.job)
            self._fail_start(err)
            if self.claimed and self.job:
                try:
                    walk_to(self.ctl.catalog, self.job, JobState.FAILED, f"{type(err).__name__}: {err}")
                except LockgateError:
                    log.exception("job %s: could not record the failure", self.job)
        finally:
            self._drop_worker("run ended")
            self.ctl.runner_ended(self)
            self.started.set()
            self.done.set()

    def _drop_worker(self, reason: str) -> None:
        h, self.worker = self.worker, None
        if h is not None:
            self.ctl.pool.give_back(h, reason)

    def _loop(self) -> None:
        cfg = self.ctl.config
        while True:
            if self.ctl.shutting_down:
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
        cfg = self.ctl.config
        self.last_error = err
        if self.ctl.shutting_down:
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
                walk_to(self.ctl.catalog, self.job or "", JobState.FAILED, reason)
            except LockgateError:
                log.exception("job %s: could not record the failure", self.job)
            self._fail_start(err)
            self._event("run_failed", message=reason)
            return False
        self.restarts += 1
        self.last_restart = time.monotonic()
        if self.claimed and self.job:
            try:
                state = self.ctl.catalog.get_job(self.job).state
                if state in (JobState.RUNNING, JobState.SCHEDULING):
                    self.ctl.catalog.transition(self.job, JobState.RECOVERING, f"{type(err).__name__}: {err}")
            except LockgateError:
                log.exception("job %s: could not record RECOVERING", self.job)
        return True

    def _stop_now(self) -> None:
        """A stop requested while no round runs (during a restart's backoff, or before start)."""
        if self.claimed and self.job:
            gen = self.ctl.catalog.acquire(self.job)
            walk_to(self.ctl.catalog, self.job, JobState.STOPPED,
                    f"stop requested while {'recovering' if self.restarts else 'starting'}; "
                    "the job resumes from its last complete window", gen)

    def _attempt(self) -> None:
        ctl = self.ctl
        cfg = ctl.config
        master = self.spec.spark_master or cfg.spark_master
        self.worker = h = ctl.pool.take(master, self.job or self.ref, self.stop_event)
        hello = h.hello
        rid = ctl.pool.next_request_id()
        assign = wpb.WorkerTask(assign=wpb.Assign(request_id=rid, job=self.job or "", pipeline=self.ref))
        done = ctl.pool.call(h, rid, assign, timeout=cfg.compile_timeout_s)
        if not done.ok:
            raise compile_failure(done)
        plan = plan_from(done.plan_json, done.plan_version, done.explain)
        if self.job is None:  # the pipeline's name
            self.job = plan.name
        if not self.registered:
            ctl.register(self)
            self.registered = True
        h.job = self.job
        self._event("worker_started", message=(
            f"{h.describe()} on {hello.spark_master} ({hello.address}, {hello.slots} slots, app {hello.spark_app_id}); "
            f"plan {plan.version}"))
        sched = ServerScheduler(
            ctl.catalog, ctl.snapshots, plan, self.job, cfg.home, RemoteWorker(self), cfg.keep_checkpoints,
            self._on_cycle_event, runner=self,
        )
        # the first attempt of a request resets state when asked; later ones only while no
        # window completed since (reset_state_at), so a retry never drops the new state
        reset = (self.spec.reset_state and not self.claimed) or self._pending_reset()
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
            self._continuous(sched, plan)
        else:
            self._range(sched, plan)

    def _claim(self) -> None:
        """Record the run request with the job (prepared), so a restarted controller resumes it."""
        if self.spec_saved:
            return
        catalog = self.ctl.catalog
        job = self.job or ""
        options = dict(catalog.get_job(job).options or {})
        last = catalog.last_checkpoint(job)
        if self.spec.reset_state and last is not None:
            options["reset_state_at"] = last.window  # reset once: retries after progress keep the new state
        options[RUN_KEY] = self.spec.to_dict()
        catalog.ensure_job(job, self.ref, options)
        self.spec_saved = True

    def save_spec(self) -> None:
        if not self.job:
            return
        rec = self.ctl.catalog.get_job(self.job)
        self.ctl.catalog.ensure_job(self.job, rec.pipeline_ref, {**(rec.options or {}), RUN_KEY: self.spec.to_dict()})

    def _pending_reset(self) -> bool:
        """A reset asked for (by a restore, or by this run) and not yet done: no window completed since."""
        catalog = self.ctl.catalog
        try:
            rec = catalog.get_job(self.job or "")
        except JobNotFoundError:
            return False
        pending = (rec.options or {}).get("reset_state_at")
        last = catalog.last_checkpoint(rec.name)
        return pending is not None and last is not None and last.window == pending

    def _clear_reset(self) -> None:
        rec = self.ctl.catalog.get_job(self.job or "")
        if "reset_state_at" in (rec.options or {}):
            opts = {k: v for k, v in rec.options.items() if k != "reset_state_at"}
            self.ctl.catalog.ensure_job(rec.name, rec.pipeline_ref, opts)

    # -- ranges ----------------------------------------------------------------------------
    def _first(self, sched: ServerScheduler, plan: RemotePlan) -> int:
        from ..runtime.sources import available_from

        if sched.last_window is not None:
            return sched.last_window + 1
        g = plan.graph
        known = [s for s in (available_from(v.config["source"]) for v in g.sources()) if s is not None]
        if not known:
            raise InvalidArgumentError(
                f"job '{self.job}' has no checkpoint yet and its sources cannot tell where data starts: "
                "pass the first window (--from TIME or --from-window N)"
            )
        return (min(known) - g.origin_us) // g.cycle_window_us

    @staticmethod
    def caught_up(plan: RemotePlan) -> int:
        """The last window the sources hold complete data for (as the embedded client computes it)."""
        from ..runtime.sources import available_until

        g = plan.graph
        bounds = [available_until(v.config["source"]) for v in g.sources()]
        now_us = int(datetime.now(UTC).timestamp() * 1e6)
        bound = min(b if b is not None else now_us for b in bounds)
        last = (bound - 1 - g.origin_us) // g.cycle_window_us
        if not any(b is not None for b in bounds):
            last -= 1  # unbounded sources: only windows that have fully passed
        if g.origin_us + (last + 1) * g.cycle_window_us > now_us and all(b is None for b in bounds):
            last -= 1
        return last

    def _range(self, sched: ServerScheduler, plan: RemotePlan) -> None:
        spec = self.spec
        first = spec.first if spec.first is not None else self._first(sched, plan)
        if spec.last is not None:
            last = spec.last
        elif spec.until_caught_up:
            last = self.caught_up(plan)
        else:
            raise InvalidArgumentError("give the last window (--to TIME / --to-window N) or --until-caught-up")
        if (spec.first, spec.last) != (first, last):
            spec.first, spec.last = first, last
            self.save_spec()  # a restarted controller resumes the same range
        self.first, self.last = first, last
        if last < first:
            sched._to(JobState.RUNNING, "nothing to run")
            sched._to(JobState.FINISHED, f"no window to run: caught up at window {sched.last_window}")
            self.started.set()
            return
        sched.check_gap(first)
        self.started.set()
        sched.run_windows(first, last, self.stop_event)
        self._clear_reset()

    def _continuous(self, sched: ServerScheduler, plan: RemotePlan) -> None:
        sched._to(JobState.RUNNING, "continuous run started")
        self.started.set()
        wait = min(1.0, plan.graph.cycle_window_us / 1e6)
        while not self.stop_event.is_set():
            first = self._first(sched, plan)
            last = self.caught_up(plan)
            if last >= first:
                sched.run_windows(first, last, self.stop_event, finish=False)
            else:
                self.stop_event.wait(wait)
        sched._to(JobState.STOPPING, "stop requested: drained at a window boundary")
        sched._to(JobState.STOPPED, f"stopped after window {sched.last_window}")

    # -- results ---------------------------------------------------------------------------
    def run_result(self) -> RunResult:
        state = self.ctl.catalog.get_job(self.job).state.value if self.job else "FAILED"
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


__all__ = ["RUN_KEY", "JobRunner", "RemotePlan", "RemoteWorker", "RunSpec", "ServerScheduler", "is_transient",
           "walk_to"]
