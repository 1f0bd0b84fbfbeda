"""The job operations: what the embedded client and the controller both do with a job.

One implementation of each, used by both: what a job and its checkpoints look like to a
client, registering a plan, which windows cover an interval, where a run resumes and
where its sources are caught up, the pending state reset, restoring to a window on
purpose, and the two run loops (a range of windows; a continuous job). Where the two
differ (a SparkSession in this process, or a worker process behind gRPC) is the
scheduler's ``Worker``; nothing here starts or imports Spark.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..checkpoint.catalog import Catalog, CheckpointRecord, JobRecord
from ..checkpoint.catalog.jobs import LABELS_KEY
from ..checkpoint.layers import has_state, replay_range, state_bytes, state_entries
from ..checkpoint.snapshots import SnapshotStore
from ..clock import WindowClock, to_micros
from ..errors import (
    CheckpointNotFoundError,
    InvalidArgumentError,
    JobNotFoundError,
    LockgateError,
    PlanNotFoundError,
    StateNotFoundError,
)
from ..plan.logical import PipelineGraph
from ..plan.physical import build_execution_graph
from ..runtime.availability import available_from, available_until
from ..runtime.committers import committer_for
from ..states import JobState, is_terminal
from .catchup import GroupSizer
from .info import (
    CheckpointInfo,
    CompileResult,
    CycleInfo,
    CyclePage,
    JobInfo,
    PlanInfo,
    SuperstepInfo,
    TransitionInfo,
)
from .scheduler import CycleScheduler, RunSummary, sinks_of
from .transitions import JobTransitions

RUN_REQUEST_KEY = "lockgate_run"
"""The job option holding a controller's run request, so a restarted controller resumes it."""

MAX_CYCLE_PAGE = 1000
"""The most cycles one page of a job's timeline holds."""

RESET_KEY = "reset_state_at"
"""The job option naming the window whose checkpoint the next run restores without state."""


def sink_rows(commits: Mapping[str, Any] | None) -> dict[str, int]:
    """Rows each sink committed for a window, from its checkpoint's sink commits (late-record side
    sinks apart).

    >>> sink_rows({"out": {"target": "file:/o", "rows": 7}, "late.bids": {"rows": 1}, "pg": {"rows": None}})
    {'out': 7, 'pg': 0}
    """
    return {name: int((c or {}).get("rows") or 0) for name, c in (commits or {}).items()
            if not name.startswith("late.") and isinstance(c, Mapping)}


def resume_point(graph: PipelineGraph, job: str, last_window: int | None) -> int:
    """The first window a run of ``job`` runs: after its last complete one, else where its
    sources' data starts (an error when no source can tell)."""
    if last_window is not None:
        return last_window + 1
    known = [s for s in (available_from(v.config["source"]) for v in graph.sources()) if s is not None]
    if not known:
        raise InvalidArgumentError(
            f"job '{job}' has no checkpoint yet and its sources cannot tell where data starts: "
            "pass the first window (--from TIME or --from-window N)"
        )
    return graph.clock.window_at_us(min(known))


def caught_up(graph: PipelineGraph, now: datetime | None = None) -> int:
    """The last window the sources hold complete data for: up to the earliest source's end;
    for unbounded sources only windows that have fully passed."""
    now_us = to_micros(now or datetime.now(UTC))
    bounds = [available_until(v.config["source"]) for v in graph.sources()]
    bound = min(b if b is not None else now_us for b in bounds)
    clock = graph.clock
    last = clock.window_at_us(bound - 1)
    if all(b is None for b in bounds):
        last -= 1  # unbounded sources: only windows that have fully passed
        if clock.end_us(last) > now_us:
            last -= 1
    return last


def windows_for(clock: WindowClock, start_us: int, end_us: int) -> tuple[int, int]:
    """The windows ``(first, last)`` (inclusive) covering ``[start_us, end_us)``."""
    if end_us <= start_us:
        raise InvalidArgumentError("the end of the range must be after its start")
    return clock.windows_for_us(start_us, end_us)


def compile_result(graph: PipelineGraph, explain: str) -> CompileResult:
    """What a client is told of a compiled pipeline."""
    return CompileResult(
        pipeline=graph.name,
        plan_version=graph.version,
        operators=graph.topological_order(),
        stateful_operators=[v.id for v in graph.vertices.values() if v.stateful],
        sinks=list(sinks_of(graph)),
        cycle_window_s=graph.clock.size_s,
        explain=explain,
    )


class JobOperations:
    """The job operations over one catalog, snapshot store and Lockgate home."""

    def __init__(self, catalog: Catalog, home: str, snapshots: SnapshotStore | None = None):
        self.catalog = catalog
        self.home = home
        #: the state snapshots: :meth:`restore` verifies the one it rolls back to
        self.snapshots = snapshots
        self._graphs: dict[str, PipelineGraph] = {}

    # -- reading ---------------------------------------------------------------------------
    def graph(self, plan_version: str) -> PipelineGraph:
        """The logical plan stored under ``plan_version`` (cached: a version never changes)."""
        if plan_version not in self._graphs:
            self._graphs[plan_version] = PipelineGraph.from_json(self.catalog.get_plan(plan_version).plan_json)
        return self._graphs[plan_version]

    def job_info(self, rec: JobRecord) -> JobInfo:
        last = self.catalog.last_checkpoint(rec.name)
        return JobInfo(
            name=rec.name,
            state=rec.state.value,
            pipeline_ref=rec.pipeline_ref,
            plan_version=rec.plan_version,
            generation=rec.generation,
            last_window=last.window if last else None,
            last_error=rec.last_error,
            updated=rec.updated,
            labels=dict((rec.options or {}).get(LABELS_KEY) or {}),
        )

    def get_job(self, job: str) -> JobInfo:
        return self.job_info(self.catalog.get_job(job))

    def list_jobs(self) -> list[JobInfo]:
        return [self.job_info(r) for r in self.catalog.list_jobs()]

    def checkpoint_info(self, cp: CheckpointRecord) -> CheckpointInfo:
        start, end = self.graph(cp.plan_version or "").clock.bounds(cp.window)
        return CheckpointInfo(
            job=cp.job,
            window=cp.window,
            window_start=start,
            window_end=end,
            plan_version=cp.plan_version,
            rows_in=cp.rows_in,
            rows_out=cp.rows_out,
            status=cp.status.value,
            created=cp.created,
            snapshot_uri=cp.snapshot_uri,
            snapshot_bytes=state_bytes(cp.snapshot_uri, cp.snapshot_manifest),
            sink_rows=sink_rows(cp.sink_commits),
        )

    def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        self.catalog.get_job(job)
        return [self.checkpoint_info(cp) for cp in self.catalog.list_checkpoints(job)]

    def list_cycles(self, job: str, limit: int = 100, before: int | None = None) -> CyclePage:
        """A page of the job's cycles (attempts at windows), newest first; ``before`` is the
        ``next_before`` of the previous page."""
        if not 1 <= limit <= MAX_CYCLE_PAGE:
            raise InvalidArgumentError(f"a page of cycles holds 1 to {MAX_CYCLE_PAGE} cycles, not {limit}")
        rows, total = self.catalog.cycle_page(job, limit, before)
        cycles = []
        for cyc, status in rows:
            start, end = self.graph(cyc.plan_version).clock.bounds(cyc.window) if cyc.plan_version else (None, None)
            cycles.append(CycleInfo(
                id=cyc.id, job=cyc.job, window=cyc.window, window_start=start, window_end=end, attempt=cyc.attempt,
                generation=cyc.generation, plan_version=cyc.plan_version, state=cyc.state.value,
                rows_in=cyc.rows_in, rows_out=cyc.rows_out, late_rows=cyc.late_rows, timings=dict(cyc.timings),
                error=cyc.error, started=cyc.started, finished=cyc.finished, checkpoint=status,
                invalid_rows=cyc.invalid_rows,
            ))
        return CyclePage(cycles=cycles, total=total, next_before=rows[-1][0].id if len(rows) == limit else None)

    def list_supersteps(self, job: str, window: int | None = None) -> list[SuperstepInfo]:
        """The supersteps of the job's graph operators (of one ``window``, or all), by window,
        attempt, operator and superstep."""
        self.catalog.get_job(job)  # JobNotFoundError for an unknown job
        return [
            SuperstepInfo(job=s.job, window=s.window, attempt=s.attempt, operator=s.operator, superstep=s.superstep,
                          messages_sent=s.messages_sent, vertices_changed=s.vertices_changed,
                          active_vertices=s.active_vertices, elapsed_ms=s.elapsed_ms, halted_by=s.halted_by,
                          checkpointed=s.checkpointed, resumed=s.resumed)
            for s in self.catalog.list_supersteps(job, window)
        ]

    def list_transitions(self, job: str) -> list[TransitionInfo]:
        """The job's state changes, oldest first, with their reasons."""
        return [
            TransitionInfo(job=t.job, from_state=t.from_state.value if t.from_state else None,
                           to_state=t.to_state.value, reason=t.reason, at=t.at)
            for t in self.catalog.transitions(job)
        ]

    def get_plan(self, job: str, plan_version: str | None = None) -> PlanInfo:
        """A plan of ``job``: ``plan_version`` (default: the job's current one), both levels."""
        rec = self.catalog.get_job(job)
        version = plan_version or rec.plan_version
        if not version:
            raise PlanNotFoundError(f"job '{job}' has no plan yet: submit or run its pipeline first")
        stored = self.catalog.get_plan(version)
        if rec.plan_version and stored.pipeline_name != self.graph(rec.plan_version).name:
            raise PlanNotFoundError(f"plan version '{version}' is not a plan of job '{job}'")
        graph = self.graph(version)
        return PlanInfo(
            plan_version=version, pipeline=stored.pipeline_name, logical=graph.to_dict(),
            physical=build_execution_graph(graph).to_dict(), state_layout=graph.state_layout(),
            created=stored.created,
        )

    def read_state(
        self, job: str, operator: str | None = None, window: int | None = None, table: str | None = None
    ) -> Any:
        """One stateful operator's keyed state at the checkpoint of ``window`` (default: the
        latest) as a ``pyarrow.Table``, merged from its snapshot's layers and verified first.
        ``operator`` may be left out when the job has one stateful operator; ``table`` when
        the operator keeps one table (a join keeps ``left`` and ``right``). No Spark."""
        from ..checkpoint.state_reader import empty_state, read_state_table

        self.catalog.get_job(job)
        cp = self.catalog.get_checkpoint(job, window) if window is not None else self.catalog.last_checkpoint(job)
        if cp is None:
            raise CheckpointNotFoundError(f"job '{job}' has no complete checkpoint yet: run a window first")
        layout = self.graph(cp.plan_version).state_layout() if cp.plan_version else {}
        replay = replay_range(cp.snapshot_manifest)
        if replay is not None:
            stored = [c.window for c in self.catalog.list_checkpoints(job) if replay_range(c.snapshot_manifest) is None]
            before = [w for w in stored if w < cp.window]
            after = [w for w in stored if w > cp.window]
            near = " or ".join([f"window {w}" for w in (before[-1:] + after[:1])]) or "none retained"
            raise StateNotFoundError(
                f"job '{job}': the checkpoint of window {cp.window} is derived (a catch-up group ran windows "
                f"{replay[0]}..{replay[1]} and more in one go): its state is recomputed by replaying them on "
                f"restore and is not stored. Read the nearest checkpoint that stores its state ({near}; "
                "`lockgate checkpoints` lists them), or run with LOCKGATE_CATCHUP=off to store every window")
        tables = sorted({*state_entries(cp.snapshot_manifest),
                         *(f"{op}.{t}" for op, ts in layout.items() for t in ts)})
        operators = sorted({name.split(".", 1)[0] for name in tables})
        if not operators:
            raise StateNotFoundError(f"job '{job}' keeps no keyed state: its pipeline has no stateful operator")
        if operator is None:
            if len(operators) != 1:
                raise InvalidArgumentError(
                    f"job '{job}' has {len(operators)} stateful operators ({', '.join(operators)}): "
                    "say which with operator= (--operator)")
            operator = operators[0]
        mine = [name for name in tables if name.split(".", 1)[0] == operator]
        if not mine:
            raise StateNotFoundError(
                f"job '{job}' has no stateful operator '{operator}' at window {cp.window}; its stateful "
                f"operators: {', '.join(operators) or 'none'}")
        if table is None and len(mine) > 1:
            names = ", ".join(name.split(".", 1)[1] for name in mine)
            raise InvalidArgumentError(f"operator '{operator}' keeps {len(mine)} state tables ({names}): say "
                                       "which with table= (--table)")
        name = mine[0] if table is None else f"{operator}.{table}"
        if name not in mine:
            raise StateNotFoundError(f"operator '{operator}' has no state table '{table}'; its tables: "
                                     f"{', '.join(n.split('.', 1)[1] for n in mine)}")
        entry = cp.snapshot_manifest.get(name) or {}
        if self.snapshots is not None and cp.snapshot_uri:
            self.snapshots.verify(cp.snapshot_uri, {name: entry})
        out = read_state_table(cp.snapshot_uri, name, entry)
        if out.num_columns == 0 and cp.plan_version:  # no rows at that checkpoint: the plan's columns
            op, tab = name.split(".", 1)
            vertex = self.graph(cp.plan_version).vertices.get(op)
            cols = vertex.state.get(tab, []) if vertex is not None else []
            out = empty_state([(c.name, c.type) for c in cols])
        return out

    def effective_last(self, job: str) -> int | None:
        """The last window complete once a recovery replays the staged commit, if any."""
        last = self.catalog.last_checkpoint(job)
        w = last.window if last else None
        for cyc in self.catalog.staged_cycles(job):
            if w is None or cyc.window == w + 1:
                w = cyc.window
        return w

    # -- registering -----------------------------------------------------------------------
    def register(
        self, graph: PipelineGraph, pipeline_ref: str, job: str | None = None, labels: Mapping[str, str] | None = None
    ) -> JobInfo:
        """Record ``job`` (default: the pipeline's name) with this plan as its current one
        (and ``labels`` merged into its labels)."""
        name = job or graph.name
        self.catalog.ensure_job(name, pipeline_ref)
        if labels:
            self.catalog.set_job_labels(name, labels)
        self.catalog.save_plan(graph.version, graph.name, graph.to_json(), graph.state_layout())
        self.catalog.set_job_plan(name, graph.version)
        return self.get_job(name)

    def set_labels(self, job: str, labels: Mapping[str, str] | None) -> None:
        """Merge ``labels`` into the job's labels (nothing when there are none)."""
        if labels:
            self.catalog.set_job_labels(job, labels)

    def set_options(self, job: str, update: dict[str, Any], drop: Iterable[str] = ()) -> None:
        """Change the job's stored options: ``drop`` these keys, then set ``update``."""
        rec = self.catalog.get_job(job)
        gone = set(drop)
        options = {k: v for k, v in (rec.options or {}).items() if k not in gone}
        self.catalog.ensure_job(job, rec.pipeline_ref, {**options, **update})

    # -- the state reset a restore (or a run) asked for --------------------------------------
    def pending_reset(self, job: str) -> bool:
        """A reset asked for and not yet done: no window completed since it was asked."""
        try:
            rec = self.catalog.get_job(job)
        except JobNotFoundError:
            return False
        pending = (rec.options or {}).get(RESET_KEY)
        last = self.catalog.last_checkpoint(job)
        return pending is not None and last is not None and last.window == pending

    def clear_reset(self, job: str) -> None:
        if RESET_KEY in (self.catalog.get_job(job).options or {}):
            self.set_options(job, {}, drop=[RESET_KEY])

    # -- restore on purpose ------------------------------------------------------------------
    def restore(self, job: str, window: int, reset_state: bool = False) -> JobInfo:
        """Roll ``job`` back to the checkpoint of ``window``: later checkpoints dropped, staged
        output after it discarded, committed sink output after it retracted; the job rests
        STOPPED and its next run resumes at ``window + 1``. A catalog change and file deletes:
        no Spark. The caller makes sure no run of the job is under way."""
        rec = self.catalog.get_job(job)
        cp = self.catalog.get_checkpoint(job, window)  # a clear error when there is none, before fencing anyone
        if not reset_state and has_state(cp.snapshot_uri, cp.snapshot_manifest) and self.snapshots is not None:
            # a damaged snapshot is refused now, not at the next run after the rollback
            self.snapshots.verify(cp.snapshot_uri, cp.snapshot_manifest)
        sinks = sinks_of(self.graph(rec.plan_version)) if rec.plan_version else {}
        generation = self.catalog.acquire(job)
        moves = JobTransitions(self.catalog, job, generation)
        if is_terminal(rec.state) or rec.state in (JobState.CREATED, JobState.COMPILING):
            moves.walk(JobState.SCHEDULING, f"rolling back to window {window}",
                       via_reason=f"restore to window {window} requested")
        elif rec.state != JobState.RECOVERING:
            moves.move(JobState.RECOVERING, f"restore to window {window} requested while {rec.state.value}")
        rolled = self.catalog.rollback_to(job, window, generation)
        for cyc in self.catalog.abort_open_cycles(job, staged_after=window, reason=f"restore to window {window}"):
            for name, staged in (cyc.manifest.get("staged") or {}).items():
                sink = (cyc.manifest.get("sinks") or {}).get(name) or sinks.get(name)
                if sink:
                    committer_for(sink, self.home).discard(staged)
        try:
            for name, sink in sinks.items():
                committer_for(sink, self.home, job).retract_after(job, name, window)
        except LockgateError as err:
            # the checkpoints are rolled back, some sink output is not: FAILED with the error
            # until a restore to the same window completes (it retracts what is left)
            moves.fail(f"restore to window {window} incomplete: {err}")
            raise
        self.set_options(job, {RESET_KEY: window} if reset_state else {}, drop=[RUN_REQUEST_KEY])
        moves.move(JobState.STOPPING, "rolled back")
        what = f"windows {rolled[0]}..{rolled[-1]} rolled back" if rolled else "nothing after it to roll back"
        note = "; keyed state will be reset" if reset_state else ""
        moves.move(JobState.STOPPED,
                   f"restored to window {window} on request ({what}{note}); next run resumes at {window + 1}")
        return self.get_job(job)

    # -- the run loops -----------------------------------------------------------------------
    def run_range(
        self,
        sched: CycleScheduler,
        first: int | None,
        last: int | None,
        until_caught_up: bool,
        stop: threading.Event | None = None,
        on_range: Callable[[int, int], None] | None = None,
        on_started: Callable[[], None] | None = None,
        catchup: str | int | None = None,
    ) -> RunSummary:
        """Run a prepared job's windows ``first..last`` (defaults: its resume point; where its
        sources are caught up when ``until_caught_up``). ``on_range`` hears the resolved range
        before any round, ``on_started`` when rounds begin; ``catchup`` sets the catch-up group
        size (:meth:`~lockgate.control.catchup.GroupSizer.parse`; None: ``LOCKGATE_CATCHUP``).
        Any error before the first round leaves the job FAILED with it (through the scheduler)."""
        graph, job = sched.graph, sched.job
        try:
            if catchup is not None:
                sched.sizer = GroupSizer.parse(catchup)
            if first is None:
                first = resume_point(graph, job, sched.last_window)
            if last is None:
                if not until_caught_up:
                    raise InvalidArgumentError("give the last window (--to TIME / --to-window N) or --until-caught-up")
                last = caught_up(graph)
            if on_range is not None:
                on_range(first, last)
            if last < first:
                sched.finish_empty()
                return RunSummary(job, first, last, state=self.catalog.get_job(job).state.value)
            sched.check_gap(first)
        except BaseException as err:
            sched.fail(err)
            raise
        if on_started is not None:
            on_started()
        summary = sched.run_windows(first, last, stop)
        self.clear_reset(job)
        return summary

    def run_continuous(
        self, sched: CycleScheduler, stop: threading.Event, on_started: Callable[[], None] | None = None
    ) -> None:
        """Run a prepared job's windows as its sources make them complete, until ``stop`` is set;
        then drain at a window boundary and rest STOPPED."""
        graph = sched.graph
        try:
            sched.enter_running("continuous run started")
        except BaseException as err:
            sched.fail(err)
            raise
        if on_started is not None:
            on_started()
        wait = min(1.0, graph.clock.size_s)
        while not stop.is_set():
            try:
                first = resume_point(graph, sched.job, sched.last_window)
                last = caught_up(graph)
            except BaseException as err:
                sched.fail(err)
                raise
            if last >= first:
                sched.run_windows(first, last, stop, finish=False)
            else:
                stop.wait(wait)
        sched.stop_drained()


__all__ = [
    "RESET_KEY",
    "RUN_REQUEST_KEY",
    "JobOperations",
    "caught_up",
    "compile_result",
    "resume_point",
    "windows_for",
]
