"""The cycle scheduler: runs a job's windows strictly in order, one round per window.

A round (GeaFlow's head and tail) for window ``W``:

1. head: a cycle row RUNNING is written and the worker runs ``W`` (read, compute, merge
   state, snapshot state, stage sink output);
2. tail: the worker's result is written as the cycle's manifest (STAGED) -- the
   pre-commit record, like Structured Streaming's offset log;
3. the sinks commit, each idempotently per (job, sink, window);
4. the checkpoint row is written, in one transaction with the cycle becoming COMMITTED.

``W`` is complete only when 4 is. On restore, a STAGED cycle is committed again from its
manifest (a replay is a no-op for a sink that had committed), a RUNNING one is aborted
and its staged files deleted, and sink output of windows after the last checkpoint is
retracted: whatever instant the last run died at, nothing is lost or duplicated.

A plan whose state layout does not fit the checkpoint to restore, or a damaged state
snapshot, is refused before the scheduler takes the job over, so nothing changes; any
later error (a window gap included) leaves the job FAILED with the error, never resting
half-started in SCHEDULING or RUNNING.

Two runs of one job started together: the later one takes the job over (a new
generation) and deletes every staged file it finds, the earlier one's in-flight attempt
included. The earlier run learns it was fenced at its next catalog write, or sooner when
its Spark job fails because its files vanished; either way it deletes whatever it wrote
late (its attempt's staged output and snapshot) and stops with one
:class:`~lockgate.errors.FencedError`, never the storage error the fencing caused.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import faults
from ..checkpoint.catalog import Catalog, CheckpointRecord, CycleState, StagedCycle
from ..checkpoint.layers import has_state, needed_by_all
from ..checkpoint.snapshots import SnapshotStore, parse_snapshot_uri
from ..errors import (
    DETAIL_MARKER,
    FencedError,
    JobNotFoundError,
    SnapshotError,
    StateLayoutError,
    WindowGapError,
)
from ..logs import get_logger, log_event
from ..metrics import MetricsRecorder
from ..metrics import current as current_metrics
from ..plan.logical import OperatorKind, PipelineGraph
from ..plan.one_pass import one_pass
from ..runtime.availability import slices_by_arrival
from ..runtime.committers import committer_for
from ..runtime.results import CycleResult, RestorePoint, late_sink_config
from ..runtime.staging import staging_uri
from ..states import JobState, is_terminal
from .catchup import GroupSizer
from .info import JobEvent
from .transitions import JobTransitions

log = get_logger("scheduler")


class CycleExecutor(Protocol):
    """What runs the worker's half of a round: a CycleRunner in this process (embedded),
    or a worker process behind gRPC (a controller's run)."""

    def run_cycle(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult: ...

    def run_group(self, windows: list[int], attempts: list[int], restore: RestorePoint | None) -> list[CycleResult]:
        """Consecutive windows in one go (a catch-up group): one result per window."""
        ...


def failure_text(err: BaseException) -> str:
    """What a failed cycle's record keeps of ``err``: its one line and, for an error that carries
    the full text Spark gave (``detail``: the JVM's stack trace, the Python worker's traceback),
    that text after :data:`~lockgate.errors.DETAIL_MARKER`."""
    text = f"{type(err).__name__}: {err}"
    detail = getattr(err, "detail", None)
    return f"{text}\n\n{DETAIL_MARKER}\n{detail}" if isinstance(detail, str) and detail else text


def _event(kind: str, job: str, **fields: Any) -> JobEvent:
    """An event of a run (``kind``: state, cycle_started, cycle_done, cycle_failed, recovered,
    run_planned), stamped now."""
    return JobEvent(kind, job, at=time.time(), **fields)


@dataclass
class RunSummary:
    """What a run of a range of windows did."""

    job: str
    first_window: int | None
    last_window: int | None
    windows_run: int = 0
    windows_skipped: int = 0
    rows_in: int = 0
    rows_out: int = 0
    late_rows: int = 0
    elapsed_s: float = 0.0
    state: str = ""


def sinks_of(graph: PipelineGraph) -> dict[str, dict[str, Any]]:
    """Every sink of the plan by name, including per-source late-record side sinks."""
    out = {v.id: v.config["sink"] for v in graph.sinks()}
    late = graph.watermark["late"]
    if not isinstance(late, str):
        for v in graph.sources():
            if slices_by_arrival(v.config["source"]):
                out[f"late.{v.id}"] = late_sink_config(late["sink"], v.id)
    return out


def _setting_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``name old -> new`` for every setting of one operator that differs."""
    def show(v: Any) -> str:
        return "unset" if v is None else json.dumps(v, sort_keys=True)

    return [f"{k} {show(old.get(k))} -> {show(new.get(k))}"
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def check_state_layout(
    old: dict[str, Any],
    new: dict[str, Any],
    job: str,
    window: int,
    old_settings: dict[str, dict[str, Any]] | None = None,
    new_settings: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Refuse to restore state into a plan whose stateful operators do not fit it: a state
    table whose columns changed, or (when both plans' settings are given) an operator whose
    settings changed while its columns did not, which would silently give wrong results."""
    problems = []
    for op, tables in old.items():
        if op not in new:
            problems.append(f"operator '{op}' has state in the checkpoint but is not in the new plan")
            continue
        for table, schema in tables.items():
            if new[op].get(table) != schema:
                problems.append(
                    f"operator '{op}' state '{table}' changed from [{schema}] to [{new[op].get(table)}]"
                )
        if old_settings is not None and new_settings is not None and op in old_settings and op in new_settings:
            changes = _setting_changes(old_settings[op], new_settings[op])
            if changes:
                problems.append(f"operator '{op}' settings changed ({'; '.join(changes)})")
    if problems:
        raise StateLayoutError(
            f"job '{job}': the new plan's state layout does not fit checkpoint {window}: "
            + "; ".join(problems)
            + ". Keep stateful operators' names, keys, windows, aggregates and settings unchanged to keep state, "
            "or rerun with --reset-state (reset_state=True) to continue from the checkpoint's positions with "
            "empty state."
        )


class CycleScheduler:
    """Drives one job: recovery at start, then rounds window after window.

    Its public moves (:meth:`prepare`, :meth:`run_windows`, :meth:`finish_empty`,
    :meth:`enter_running`, :meth:`stop_drained`, :meth:`fail`) are the only way a run
    changes its job's state; each goes through :class:`~lockgate.control.transitions.JobTransitions`
    under this runner's generation.
    """

    def __init__(
        self,
        catalog: Catalog,
        snapshots: SnapshotStore,
        graph: PipelineGraph,
        job: str,
        home: str,
        executor: CycleExecutor,
        keep_checkpoints: int = 10,
        on_event: Callable[[JobEvent], None] | None = None,
        metrics: MetricsRecorder | None = None,
    ):
        self.catalog = catalog
        self.snapshots = snapshots
        self.graph = graph
        self.job = job
        self.home = home
        self.executor = executor
        self.keep = max(1, keep_checkpoints)
        self.on_event = on_event or (lambda e: None)
        #: what the rounds tell Prometheus (default: this process' recorder, a no-op unless served)
        self.metrics = metrics or current_metrics()
        self.restore: RestorePoint | None = None
        self.last_window: int | None = None
        self.sinks = sinks_of(graph)
        #: the plan's version (a hash of its JSON), computed once: every cycle row records it
        self.plan_version = graph.version
        self.moves = JobTransitions(catalog, job, on_move=self._moved)
        #: how many due windows the next catch-up group takes (LOCKGATE_CATCHUP)
        self.sizer = GroupSizer.from_setting()

    @property
    def generation(self) -> int | None:
        """The fencing token this runner holds (None before :meth:`prepare` took the job)."""
        return self.moves.generation

    @property
    def state(self) -> JobState | None:
        """The last state this runner moved the job to."""
        return self.moves.state

    # -- events and states -----------------------------------------------------------
    def _emit(self, event: JobEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a watcher must never break a run
            log.exception("event handler failed")

    def _moved(self, state: JobState, reason: str) -> None:
        self.metrics.job_state(self.job, state.value)
        self._emit(_event("state", self.job, state=state.value, message=reason))

    def enter_running(self, reason: str) -> None:
        """To RUNNING (once: a continuous run enters it once, however many ranges it runs)."""
        if self.moves.state != JobState.RUNNING:
            self.moves.move(JobState.RUNNING, reason)

    def finish_empty(self) -> None:
        """A run with no window to run: RUNNING, then FINISHED, unless the job rests already."""
        if not is_terminal(self.moves.current()):
            self.enter_running("nothing to run")
            self.moves.move(JobState.FINISHED, f"no window to run: caught up at window {self.last_window}")

    def stop_drained(self) -> None:
        """A stop honoured at a window boundary: STOPPING, then STOPPED."""
        self.moves.move(JobState.STOPPING, "stop requested: drained at a window boundary")
        self.moves.move(JobState.STOPPED, f"stopped after window {self.last_window}")

    def fail(self, err: BaseException) -> None:
        """Record ``err`` as the job's failure (FAILED). Never raises: when the job cannot
        be moved (fenced, the catalog down) the original error matters more. A fenced
        runner records nothing: the job is another runner's now."""
        if isinstance(err, FencedError):
            return
        try:
            self.moves.move(JobState.FAILED, f"{type(err).__name__}: {err}")
        except FencedError:
            log_event(log, "failure_not_recorded", job=self.job, reason="fenced: another runner has the job")
        except Exception as record_err:
            log_event(log, "failure_not_recorded", job=self.job, reason=f"{type(record_err).__name__}: {record_err}")

    # -- fencing ---------------------------------------------------------------------
    def fenced(self) -> bool:
        """Whether another runner took the job over since this one did."""
        if self.generation is None:
            return False
        try:
            return self.catalog.get_job(self.job).generation != self.generation
        except Exception:  # the catalog down: the caller's own error stands
            return False

    def _abandon(self, window: int, attempt: int) -> None:
        """Delete what this fenced runner's attempt at ``window`` wrote: its staged output
        and its snapshot (attempt numbers are per window, so they are this run's alone)."""
        for name, sink in self.sinks.items():
            uri = staging_uri(sink, job=self.job, sink_name=name, window=window, attempt=attempt, home=self.home)
            with contextlib.suppress(Exception):
                committer_for(sink, self.home).discard({"uri": uri})
        with contextlib.suppress(Exception):
            self.snapshots.delete(self.snapshots.snapshot_uri(self.job, window, attempt))
        log_event(log, "fenced_attempt_removed", job=self.job, window=window, attempt=attempt)

    def _fenced_error(self, window: int, cause: BaseException) -> FencedError:
        current = None
        with contextlib.suppress(Exception):
            current = self.catalog.get_job(self.job).generation
        return FencedError(
            f"job '{self.job}': another run took the job over (generation {current}, this run's was "
            f"{self.generation}) while window {window} ran; this run stopped and removed what it wrote. "
            "Nothing is lost: the other run goes on from the last complete window"
            + ("" if isinstance(cause, FencedError) else f" (this run's round failed with {type(cause).__name__})")
        )

    # -- recovery --------------------------------------------------------------------
    def prepare(self, reset_state: bool = False, pipeline_ref: str | None = None) -> None:
        """Become the job's runner and restore it to its last complete window.

        A plan whose state layout does not fit the checkpoint to restore, or a damaged
        state snapshot, is refused *before* anything is written: the job (state, plan,
        generation, pipeline reference), its cycles, checkpoints and sink output stay as
        they were. A failure after this runner took the job over leaves the job FAILED
        (never stuck in SCHEDULING), and the next run recovers from the catalog.
        """
        graph = self.graph
        if not reset_state:
            try:
                self._check_restorable()
            except (SnapshotError, StateLayoutError) as err:
                # refused before taking the job over: the job's record still says why
                with contextlib.suppress(Exception):
                    self.catalog.note_error(self.job, f"{type(err).__name__}: {err}")
                raise
        self.catalog.ensure_job(self.job, pipeline_ref or graph.name)
        self.moves.generation = generation = self.catalog.acquire(self.job)
        prior = self.moves.current()  # read after acquire: no runner moves it now
        if is_terminal(prior) or prior == JobState.CREATED:
            self.moves.move(JobState.COMPILING, f"run of plan {graph.version}")
        elif prior == JobState.STOPPING:
            self.moves.move(JobState.STOPPED, "the previous runner stopped without finishing its stop")
            self.moves.move(JobState.COMPILING, f"run of plan {graph.version}")
        elif prior != JobState.COMPILING and prior != JobState.RECOVERING:
            self.moves.move(
                JobState.RECOVERING, f"the previous runner (generation {generation - 1}) ended while {prior.value}"
            )
        try:
            self.catalog.save_plan(graph.version, graph.name, graph.to_json(), graph.state_layout())
            self.catalog.set_job_plan(self.job, graph.version)
            self.moves.move(JobState.SCHEDULING, "restoring from the last complete window")
            self._recover(reset_state)
        except BaseException as err:
            self.fail(err)
            raise
        if self.last_window is not None:
            resumed = is_terminal(prior) or prior in (JobState.CREATED, JobState.STOPPING)
            self.metrics.restored(self.job, "resume" if resumed else "recovery")
            if self.metrics.enabled:  # the job's last checkpoint, before this run commits any (a stuck run ages)
                with contextlib.suppress(Exception):
                    self.metrics.checkpoint_seen(self.job, self.catalog.last_checkpoint(self.job), self.graph)

    def _recover(self, reset_state: bool) -> None:
        # 1. rounds that never reached STAGED: what they wrote is garbage (collected below;
        #    a RUNNING cycle has no manifest, so its files are found by location)
        self.catalog.abort_open_cycles(self.job, reason="runner lost before staging")
        # 2. rounds that staged but did not finish committing: commit them again
        for cyc in self.catalog.staged_cycles(self.job):
            last = self.catalog.last_checkpoint(self.job)
            if last is not None and cyc.window != last.window + 1:
                self.catalog.fail_cycle(cyc.id, "staged out of order; discarded")
                self._discard(cyc.manifest)
                continue
            self._commit(cyc.id, cyc.window, cyc.manifest, cyc.rows_in, cyc.rows_out, cyc.plan_version)
            log_event(log, "replayed_commit", job=self.job, window=cyc.window)
            self._emit(_event("recovered", self.job, window=cyc.window, message="commit replayed"))
        # 3. the last complete window, its state, and nothing committed after it
        last = self.catalog.last_checkpoint(self.job)
        self.last_window = last.window if last else None
        self._collect_garbage()
        if last is not None:
            for name, sink in self.sinks.items():
                committer_for(sink, self.home, self.job).retract_after(self.job, name, last.window)
            self.restore = self._restore_point(last, reset_state)
        else:
            self.restore = None

    def _check_restorable(self) -> None:
        """Read-only pre-flight of :meth:`prepare`: the checkpoint the job will restore
        (the last complete one, or the staged window whose commit will be replayed) must
        fit the new plan's state layout, and its snapshot must be intact."""
        try:
            self.catalog.get_job(self.job)
        except JobNotFoundError:
            return  # a new job: nothing to restore
        last = self.catalog.last_checkpoint(self.job)
        target = None
        if last is not None:
            target = (last.window, last.plan_version, last.snapshot_uri, last.snapshot_manifest)
        for cyc in self.catalog.staged_cycles(self.job):
            if target is None or cyc.window == target[0] + 1:
                m = cyc.manifest
                target = (cyc.window, cyc.plan_version, m.get("snapshot_uri"), m.get("snapshot_manifest") or {})
        if target is not None:
            self._check_state(*target)

    def _check_state(
        self, window: int, plan_version: str | None, snapshot_uri: str | None, manifest: dict[str, Any]
    ) -> None:
        if plan_version and plan_version != self.plan_version:
            plan = self.catalog.get_plan(plan_version)
            old_settings = PipelineGraph.from_json(plan.plan_json).state_settings() if plan.plan_json else None
            check_state_layout(plan.state_layout, self.graph.state_layout(), self.job, window,
                               old_settings, self.graph.state_settings())
        if has_state(snapshot_uri, manifest):
            self.snapshots.verify(snapshot_uri, manifest)

    def _restore_point(self, cp: CheckpointRecord, reset_state: bool) -> RestorePoint:
        if reset_state:
            return RestorePoint(cp.window, None, {}, cp.positions)
        self._check_state(cp.window, cp.plan_version, cp.snapshot_uri, cp.snapshot_manifest)
        return RestorePoint(cp.window, cp.snapshot_uri, cp.snapshot_manifest, cp.positions)

    def _collect_garbage(self) -> None:
        """Delete staged output and snapshots that no checkpoint refers to: after the
        replay above, every staged file of this job belongs to an abandoned attempt."""
        for name, sink in self.sinks.items():
            self._sweep(f"staged output of sink '{name}'",
                        lambda name=name, sink=sink: committer_for(sink, self.home, self.job).discard_all_staged(self.job, name))
        self._delete_unneeded_snapshots()

    def _delete_unneeded_snapshots(self, up_to: int | None = None) -> None:
        """Delete the job's snapshot folders no retained checkpoint needs (its own, or as a
        layer of its state: a base or a delta written by an earlier round); ``up_to``: only
        folders of windows up to it."""
        keep = needed_by_all((cp.snapshot_uri, cp.snapshot_manifest) for cp in self.catalog.list_checkpoints(self.job))
        for uri in self.snapshots.list_snapshots(self.job):
            parsed = parse_snapshot_uri(uri)
            if uri not in keep and (up_to is None or (parsed is not None and parsed[1] <= up_to)):
                self._sweep(f"snapshot {uri}", lambda uri=uri: self.snapshots.delete(uri))

    def _sweep(self, what: str, delete: Callable[[], object]) -> None:
        """One delete of garbage. A folder that a fenced run is still writing into (it has
        not seen yet that it lost the job) is left for the next sweep: nothing refers to
        it, and this run's work must not fail over it."""
        try:
            delete()
        except OSError as err:
            log_event(log, "garbage_left", job=self.job, what=what, reason=f"{type(err).__name__}: {err}")

    def _discard(self, manifest: dict[str, Any]) -> None:
        for name, staged in (manifest.get("staged") or {}).items():
            sink = (manifest.get("sinks") or {}).get(name) or self.sinks.get(name)
            if sink:
                committer_for(sink, self.home).discard(staged)
        if manifest.get("snapshot_uri"):
            self.snapshots.delete(manifest["snapshot_uri"])

    # -- rounds ----------------------------------------------------------------------
    def _commit(
        self,
        cycle_id: int,
        window: int,
        manifest: dict[str, Any],
        rows_in: int,
        rows_out: int,
        plan_version: str | None,
        expire: bool = True,
        record_checkpoint_time: bool = True,
    ) -> dict[str, float]:
        """Commit a staged window: its sinks, then its checkpoint row; returns the commit's and
        the checkpoint's milliseconds (written to the cycle unless ``record_checkpoint_time`` is
        off: a catch-up group writes its windows' together, one transaction instead of one a window)."""
        t0 = time.perf_counter()
        commits = {}
        sinks = manifest.get("sinks") or self.sinks
        for i, (name, staged) in enumerate(sorted(manifest["staged"].items())):
            if i == 1:
                faults.maybe_crash("mid_commit", window)
            commits[name] = committer_for(sinks[name], self.home, self.job).commit(self.job, name, window, staged)
        faults.maybe_crash("after_commit", window)
        t1 = time.perf_counter()
        self.catalog.complete_window(
            self.job,
            self.generation,
            cycle_id,
            window=window,
            plan_version=plan_version,
            positions=manifest.get("positions", {}),
            snapshot_uri=manifest.get("snapshot_uri"),
            snapshot_manifest=manifest.get("snapshot_manifest", {}),
            sink_commits=commits,
            rows_in=rows_in,
            rows_out=rows_out,
            timings={"commit": round((t1 - t0) * 1000, 1)},
        )
        tail = {"commit": round((t1 - t0) * 1000, 1), "checkpoint": round((time.perf_counter() - t1) * 1000, 1)}
        if record_checkpoint_time:
            self.catalog.update_cycle_timings(cycle_id, {"checkpoint": tail["checkpoint"]})
        faults.maybe_crash("after_checkpoint", window)
        self.last_window = window
        if expire:
            self._expire()
        return tail

    def _expire(self) -> None:
        """Expire checkpoints beyond the retention; their snapshot folders go once no
        retained checkpoint needs them (a base stays while later deltas build on it)."""
        if self.catalog.expire_checkpoints(self.job, self.keep):
            self._delete_unneeded_snapshots(up_to=self.last_window)

    def run_window(self, window: int) -> CycleResult:
        """One full round for ``window`` (which must be the next one)."""
        t0 = time.perf_counter()
        cycle = self.catalog.begin_cycle(self.job, window, self.generation, self.plan_version)
        self._emit(_event("cycle_started", self.job, window=window))
        faults.maybe_crash("before_run", window)
        try:
            result = self.executor.run_cycle(window, cycle.attempt, self.restore)
        except Exception as err:
            if self.fenced():  # the take-over deleted this round's files: that is the error
                self._abandon(window, cycle.attempt)
                raise self._fenced_error(window, err) from err
            self.catalog.fail_cycle(cycle.id, failure_text(err))
            self.metrics.round_failed(self.job)
            self._emit(_event("cycle_failed", self.job, window=window, message=str(err)))
            raise
        except BaseException as err:
            self.catalog.fail_cycle(cycle.id, failure_text(err))
            self.metrics.round_failed(self.job)
            self._emit(_event("cycle_failed", self.job, window=window, message=str(err)))
            raise
        manifest = {**result.to_manifest(), "sinks": self.sinks}
        faults.maybe_crash("before_stage", window)
        try:
            self.catalog.stage_cycle(
                cycle.id, self.generation, manifest, result.rows_in, result.rows_out, result.late_rows,
                result.timings,
            )
        except FencedError as err:
            self._abandon(window, cycle.attempt)
            raise self._fenced_error(window, err) from err
        self.catalog.record_supersteps(cycle.id, result.supersteps)
        faults.maybe_crash("after_stage", window)
        tail = self._commit(cycle.id, window, manifest, result.rows_in, result.rows_out, self.plan_version)
        result.timings.update(tail)
        self.restore = RestorePoint(window, result.snapshot_uri, result.snapshot_manifest, result.positions)
        self.metrics.round_committed(self.job, result, time.perf_counter() - t0, self.graph)
        self._emit(
            _event(
                "cycle_done",
                self.job,
                window=window,
                rows_in=result.rows_in,
                rows_out=result.rows_out,
                late_rows=result.late_rows,
                timings=result.timings,
            )
        )
        return result

    def run_group(self, windows: list[int]) -> list[CycleResult]:
        """A catch-up group: consecutive ``windows`` (the next ones) computed in one go by
        the worker, then staged and committed one window at a time, in order, each with its
        own sink commits and checkpoint row, exactly as single rounds would be. A failure
        before the first commit leaves every window of the group to run again; one after it
        leaves the committed windows committed and the staged ones to the recovery."""
        if len(windows) == 1:
            return [self.run_window(windows[0])]
        t0 = time.perf_counter()
        cycles = self.catalog.begin_cycles(self.job, windows, self.generation, self.plan_version)
        for w in windows:
            self._emit(_event("cycle_started", self.job, window=w))
        faults.maybe_crash("before_run", windows[0])
        try:
            results = self.executor.run_group(windows, [c.attempt for c in cycles], self.restore)
        except Exception as err:
            if self.fenced():
                for c in cycles:
                    self._abandon(c.window, c.attempt)
                raise self._fenced_error(windows[0], err) from err
            self._fail_cycles(cycles, err)
            raise
        except BaseException as err:
            self._fail_cycles(cycles, err)
            raise
        manifests = [{**result.to_manifest(), "sinks": self.sinks} for result in results]
        self.metrics.catchup_group(self.job, len(windows))
        share = (time.perf_counter() - t0) / len(windows)  # each window's part of the group's run
        for result in results:
            faults.maybe_crash("before_stage", result.window)
        try:  # the group's windows are staged together: all of them or none
            self.catalog.stage_cycles(self.generation, [
                StagedCycle(cycle.id, manifest, result.rows_in, result.rows_out, result.late_rows, result.timings)
                for cycle, result, manifest in zip(cycles, results, manifests, strict=True)
            ])
        except FencedError as err:
            for c in cycles:
                self._abandon(c.window, c.attempt)
            raise self._fenced_error(windows[0], err) from err
        for result in results:
            faults.maybe_crash("after_stage", result.window)
        checkpoint_ms: dict[int, dict[str, float]] = {}
        for i, (cycle, result, manifest) in enumerate(zip(cycles, results, manifests, strict=True)):
            # retention is applied once, after the group's last commit (not after each window)
            tail = self._commit(cycle.id, result.window, manifest, result.rows_in, result.rows_out, self.plan_version,
                                expire=i == len(cycles) - 1, record_checkpoint_time=False)
            checkpoint_ms[cycle.id] = {"checkpoint": tail["checkpoint"]}
            result.timings.update(tail)
            self.restore = RestorePoint(result.window, result.snapshot_uri, result.snapshot_manifest, result.positions)
            self.metrics.round_committed(self.job, result, share + (tail["commit"] + tail["checkpoint"]) / 1000,
                                         self.graph)
            self._emit(
                _event(
                    "cycle_done", self.job, window=result.window, rows_in=result.rows_in, rows_out=result.rows_out,
                    late_rows=result.late_rows, timings=result.timings,
                )
            )
        self.catalog.update_cycles_timings(checkpoint_ms)
        return results

    def _fail_cycles(self, cycles: list[Any], err: BaseException) -> None:
        for c in cycles:
            self.catalog.fail_cycle(c.id, failure_text(err))
        self.metrics.round_failed(self.job, len(cycles))
        self._emit(_event("cycle_failed", self.job, window=cycles[0].window, message=str(err)))

    def check_gap(self, first: int) -> None:
        if self.last_window is not None and first > self.last_window + 1:
            raise WindowGapError(
                self.job,
                self.last_window + 1,
                first - 1,
                first,
                hint=f"e.g. lockgate run ... --from-window {self.last_window + 1}, or set depends_on_past in Airflow",
            )

    def _seconds_per_window(self, recent: int = 64) -> float | None:
        """What one of this plan's recently committed windows took, start to commit, from the
        catalog (``None`` without such windows): a group's windows share its time."""
        # a window of a catch-up group of n began with the group and lasted about as long as the
        # group: its share is 1/n of that
        shares = [(c.finished - c.started).total_seconds() / max(1, int(c.timings.get("group") or 1))
                  for c in self.catalog.list_cycles(self.job, limit=recent)
                  if c.state == CycleState.COMMITTED and c.plan_version == self.plan_version
                  and c.finished is not None]
        return sum(shares) / len(shares) if shares else None

    def run_windows(
        self, first: int, last: int, stop: threading.Event | None = None, finish: bool = True
    ) -> RunSummary:
        """Run windows ``first..last`` (inclusive) in order; committed ones are skipped."""
        summary = RunSummary(self.job, first, last)
        t0 = time.perf_counter()
        try:
            # a gap is refused before any round; the job records why (never left SCHEDULING)
            self.check_gap(first)
            self.enter_running(f"windows {first}..{last}")
            todo = [w for w in range(first, last + 1) if self.last_window is None or w > self.last_window]
            self._emit(_event("run_planned", self.job, window=first, total_windows=len(todo),
                             message=f"{len(todo)} windows to run"))
            summary.windows_skipped = (last - first + 1) - len(todo)
            # groups where they pay: plans a group computes in one pass, unless a size was set
            # (a graph operator's rounds run one window each: its supersteps resume per window)
            grouped = (hasattr(self.executor, "run_group") and (not self.sizer.adaptive or one_pass(self.graph))
                       and not any(v.kind == OperatorKind.ITERATOR for v in self.graph.vertices.values()))
            if grouped and len(todo) > 1:
                self.sizer.seed(self._seconds_per_window())
            while todo:
                if stop is not None and stop.is_set():
                    break
                size = self.sizer.next(len(todo)) if grouped else 1
                group, todo = todo[:size], todo[size:]
                t = time.perf_counter()
                results = self.run_group(group) if size > 1 else [self.run_window(group[0])]
                self.sizer.observe(len(group), time.perf_counter() - t)
                for res in results:
                    summary.windows_run += 1
                    summary.rows_in += res.rows_in
                    summary.rows_out += res.rows_out
                    summary.late_rows += res.late_rows
        except BaseException as err:  # KeyboardInterrupt too: the job must not stay RUNNING
            if isinstance(err, FencedError):
                self.metrics.run_fenced(self.job)
            self.fail(err)
            raise
        summary.elapsed_s = time.perf_counter() - t0
        if finish:
            if stop is not None and stop.is_set():
                self.stop_drained()
                summary.state = JobState.STOPPED.value
            else:
                self.moves.move(JobState.FINISHED, f"windows {first}..{last} complete")
                summary.state = JobState.FINISHED.value
        return summary
