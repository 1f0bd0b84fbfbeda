"""Checkpoints: the SQL catalog (jobs, plans, cycles, checkpoints) and the snapshot store."""

from .catalog import (
    Catalog,
    CheckpointRecord,
    CheckpointStatus,
    CycleRecord,
    CycleState,
    JobRecord,
    PlanRecord,
    TransitionRecord,
)
from .snapshots import SnapshotStore, parse_snapshot_uri

__all__ = [
    "Catalog",
    "CheckpointRecord",
    "CheckpointStatus",
    "CycleRecord",
    "CycleState",
    "JobRecord",
    "PlanRecord",
    "SnapshotStore",
    "TransitionRecord",
    "parse_snapshot_uri",
]
