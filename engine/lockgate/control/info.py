"""What clients are told about jobs: compile results, jobs, checkpoints, runs and events.

Plain dataclasses shared by the embedded client, the controller and the gRPC client; the
job operations (:mod:`lockgate.control.jobs`) build them from catalog records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class CompileResult:
    """A compiled pipeline: its plan version, operators and explain text."""

    pipeline: str
    plan_version: str
    operators: list[str]
    stateful_operators: list[str]
    sinks: list[str]
    cycle_window_s: float
    explain: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JobInfo:
    """A job as the controller knows it."""

    name: str
    state: str
    pipeline_ref: str
    plan_version: str | None
    generation: int
    last_window: int | None
    last_error: str | None
    updated: datetime | None = None
    #: who runs the job, as its runs recorded it (e.g. ``airflow.dag_id`` and ``airflow.task_id``)
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["updated"] = self.updated.isoformat() if self.updated else None
        return d


@dataclass
class CheckpointInfo:
    """A completed window's checkpoint."""

    job: str
    window: int
    window_start: datetime
    window_end: datetime
    plan_version: str | None
    rows_in: int
    rows_out: int
    status: str
    created: datetime
    snapshot_uri: str | None = None
    #: bytes of the snapshot files a restore from this checkpoint reads (its tables' base and deltas)
    snapshot_bytes: int = 0
    #: rows each sink committed for the window, by sink (late-record side sinks apart; lineage's
    #: output statistics)
    sink_rows: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("window_start", "window_end", "created"):
            d[k] = d[k].isoformat()
        return d


@dataclass
class CycleInfo:
    """One attempt at one window (a cycle round), as the window timeline shows it.

    ``state`` is the round's own (RUNNING, STAGED, COMMITTED, FAILED, ABORTED);
    ``checkpoint`` the status of the checkpoint it wrote (COMPLETE, ROLLED_BACK, EXPIRED),
    None when it wrote none. ``timings`` are milliseconds per phase of the round.
    """

    id: int
    job: str
    window: int
    window_start: datetime | None
    window_end: datetime | None
    attempt: int
    generation: int
    plan_version: str | None
    state: str
    rows_in: int
    rows_out: int
    late_rows: int
    timings: dict[str, float]
    error: str | None
    started: datetime
    finished: datetime | None
    checkpoint: str | None = None
    #: records the round dropped as invalid under ``invalid="skip"`` (see Pipeline(invalid=))
    invalid_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("window_start", "window_end", "started", "finished"):
            d[k] = d[k].isoformat() if d[k] else None
        return d


@dataclass
class CyclePage:
    """A page of a job's cycles, newest first: ``next_before`` continues with older ones
    (None on the last page); ``total`` counts every cycle of the job."""

    cycles: list[CycleInfo]
    total: int
    next_before: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"cycles": [c.to_dict() for c in self.cycles], "total": self.total, "next_before": self.next_before}


@dataclass
class SuperstepInfo:
    """One superstep of a graph operator's iteration cycle in one attempt at a window: messages
    sent, vertices changed and active, its milliseconds, why the iteration stopped there (on its
    last superstep), whether its state was checkpointed, and whether an earlier attempt of the
    window had done it (``resumed``: this attempt resumed after it)."""

    job: str
    window: int
    attempt: int
    operator: str
    superstep: int
    messages_sent: int
    vertices_changed: int
    active_vertices: int
    elapsed_ms: float
    halted_by: str | None
    checkpointed: bool
    resumed: bool

    def notes(self) -> list[str]:
        """What a listing says beside the figures: why it halted, that an earlier attempt did
        it, that its state was not checkpointed (``checkpoint_every`` > 1).

        >>> SuperstepInfo("j", 1, 2, "cc", 5, 0, 0, 1, 9.0, "no_messages", True, True).notes()
        ['halted: no messages', 'done by an earlier attempt']
        """
        notes = [f"halted: {self.halted_by.replace('_', ' ')}"] if self.halted_by else []
        if self.resumed:
            notes.append("done by an earlier attempt")
        if not self.checkpointed:
            notes.append("not checkpointed")
        return notes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TransitionInfo:
    """One recorded change of a job's state, with its reason."""

    job: str
    from_state: str | None
    to_state: str
    reason: str
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["at"] = self.at.isoformat()
        return d


@dataclass
class PlanInfo:
    """A stored plan version: the logical plan (PipelineGraph), the physical plan
    (ExecutionGraph) built from it, and its state layout, as plain JSON-able dicts."""

    plan_version: str
    pipeline: str
    logical: dict[str, Any]
    physical: dict[str, Any]
    state_layout: dict[str, Any]
    created: datetime

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["created"] = self.created.isoformat()
        return d


@dataclass
class RunResult:
    """The outcome of running a range of windows."""

    job: str
    first_window: int | None
    last_window: int | None
    windows_run: int
    windows_skipped: int
    rows_in: int
    rows_out: int
    late_rows: int
    elapsed_s: float
    state: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JobEvent:
    """One event of a job: a state transition or a cycle started / done / failed.

    A ``run_planned`` event carries the run's first window (``window``) and how many windows
    it will run (``total_windows``); its ``message`` says the same for people."""

    kind: str
    job: str
    window: int | None = None
    state: str | None = None
    rows_in: int = 0
    rows_out: int = 0
    late_rows: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    message: str = ""
    at: float = 0.0
    #: ``run_planned``: the number of windows the run will run (None on other events)
    total_windows: int | None = None


__all__ = [
    "CheckpointInfo", "CompileResult", "CycleInfo", "CyclePage", "JobEvent", "JobInfo", "PlanInfo", "RunResult",
    "SuperstepInfo",
    "TransitionInfo",
]
