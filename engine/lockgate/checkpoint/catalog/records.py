"""What the catalog returns: the cycle and checkpoint states, one frozen record per row kind,
and the functions that build a record from a database row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import RowMapping

from ...states import JobState


class CycleState(StrEnum):
    """The state of one cycle attempt (one window, one try)."""

    RUNNING = "RUNNING"
    STAGED = "STAGED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


class CheckpointStatus(StrEnum):
    """COMPLETE checkpoints restore; EXPIRED ones lost their snapshot; ROLLED_BACK ones were undone."""

    COMPLETE = "COMPLETE"
    EXPIRED = "EXPIRED"
    ROLLED_BACK = "ROLLED_BACK"


@dataclass(frozen=True)
class JobRecord:
    """A job: its pipeline, current plan, state and runner generation (fencing token)."""

    name: str
    pipeline_ref: str
    plan_version: str | None
    state: JobState
    generation: int
    last_error: str | None
    options: dict[str, Any]
    created: datetime
    updated: datetime


@dataclass(frozen=True)
class PlanRecord:
    """A compiled plan, named by its version (the hash of its JSON)."""

    plan_version: str
    pipeline_name: str
    plan_json: str
    state_layout: dict[str, Any]
    created: datetime


@dataclass(frozen=True)
class TransitionRecord:
    """One recorded job state change (``from_state`` is None for the job's creation)."""

    id: int
    job: str
    from_state: JobState | None
    to_state: JobState
    reason: str
    at: datetime


@dataclass(frozen=True)
class CycleRecord:
    """One attempt at running one window of a job."""

    id: int
    job: str
    window: int
    attempt: int
    generation: int
    plan_version: str | None
    state: CycleState
    manifest: dict[str, Any]
    rows_in: int
    rows_out: int
    late_rows: int
    timings: dict[str, float]
    error: str | None
    started: datetime
    finished: datetime | None

    @property
    def invalid_rows(self) -> int:
        """Records the round dropped as invalid (kept in its staged manifest)."""
        return int(self.manifest.get("invalid_rows") or 0)


@dataclass(frozen=True)
class SuperstepRecord:
    """One superstep of a graph operator's iteration cycle, in one cycle attempt."""

    job: str
    window: int
    attempt: int
    cycle_id: int
    operator: str
    superstep: int
    messages_sent: int
    vertices_changed: int
    active_vertices: int
    elapsed_ms: float
    halted_by: str | None
    checkpointed: bool
    resumed: bool


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint of one window: where the sources stand, the state snapshot, the sink commits."""

    id: int
    job: str
    window: int
    plan_version: str | None
    cycle_id: int | None
    positions: dict[str, Any]
    snapshot_uri: str | None
    snapshot_manifest: dict[str, Any]
    sink_commits: Any
    rows_in: int
    rows_out: int
    status: CheckpointStatus
    created: datetime


def job_record(m: RowMapping) -> JobRecord:
    """The JobRecord of an ``lg_jobs`` row."""
    return JobRecord(
        name=m["name"],
        pipeline_ref=m["pipeline_ref"],
        plan_version=m["plan_version"],
        state=JobState(m["state"]),
        generation=m["generation"],
        last_error=m["last_error"],
        options=m["options"] or {},
        created=m["created"],
        updated=m["updated"],
    )


def plan_record(m: RowMapping) -> PlanRecord:
    """The PlanRecord of an ``lg_plans`` row."""
    return PlanRecord(
        plan_version=m["plan_version"],
        pipeline_name=m["pipeline_name"],
        plan_json=m["plan_json"],
        state_layout=m["state_layout"] or {},
        created=m["created"],
    )


def transition_record(m: RowMapping) -> TransitionRecord:
    """The TransitionRecord of an ``lg_transitions`` row."""
    return TransitionRecord(
        id=m["id"],
        job=m["job"],
        from_state=JobState(m["from_state"]) if m["from_state"] else None,
        to_state=JobState(m["to_state"]),
        reason=m["reason"],
        at=m["at"],
    )


def cycle_record(m: RowMapping) -> CycleRecord:
    """The CycleRecord of an ``lg_cycles`` row."""
    return CycleRecord(
        id=m["id"],
        job=m["job"],
        window=m["window"],
        attempt=m["attempt"],
        generation=m["generation"],
        plan_version=m["plan_version"],
        state=CycleState(m["state"]),
        manifest=m["manifest"] or {},
        rows_in=m["rows_in"],
        rows_out=m["rows_out"],
        late_rows=m["late_rows"],
        timings=m["timings"] or {},
        error=m["error"],
        started=m["started"],
        finished=m["finished"],
    )


def checkpoint_record(m: RowMapping) -> CheckpointRecord:
    """The CheckpointRecord of an ``lg_checkpoints`` row."""
    return CheckpointRecord(
        id=m["id"],
        job=m["job"],
        window=m["window"],
        plan_version=m["plan_version"],
        cycle_id=m["cycle_id"],
        positions=m["positions"] or {},
        snapshot_uri=m["snapshot_uri"],
        snapshot_manifest=m["snapshot_manifest"] or {},
        sink_commits=m["sink_commits"],
        rows_in=m["rows_in"],
        rows_out=m["rows_out"],
        status=CheckpointStatus(m["status"]),
        created=m["created"],
    )


def superstep_record(m: RowMapping) -> SuperstepRecord:
    return SuperstepRecord(
        job=m["job"], window=int(m["window"]), attempt=int(m["attempt"]), cycle_id=int(m["cycle_id"]),
        operator=m["operator"], superstep=int(m["superstep"]), messages_sent=int(m["messages_sent"]),
        vertices_changed=int(m["vertices_changed"]), active_vertices=int(m["active_vertices"]),
        elapsed_ms=float(m["elapsed_ms"]), halted_by=m["halted_by"], checkpointed=bool(m["checkpointed"]),
        resumed=bool(m["resumed"]),
    )
