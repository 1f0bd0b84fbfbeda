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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("window_start", "window_end", "created"):
            d[k] = d[k].isoformat()
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
    """One event of a job: a state transition or a cycle started / done / failed."""

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


__all__ = ["CheckpointInfo", "CompileResult", "JobEvent", "JobInfo", "RunResult"]
