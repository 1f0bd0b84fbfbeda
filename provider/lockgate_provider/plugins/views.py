"""What the plugin's API answers, built from the Lockgate client's public objects.

Plain functions from :class:`lockgate.Client` results to JSON-able dicts: the jobs list
(state, last committed window and its end, lag behind now, rows per second, errors), one
job, and its window timeline. Nothing here knows whether the client is embedded or talks to
a controller.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lockgate import Client, CycleInfo, JobInfo
from lockgate_provider.utils import short_error

RECENT = 20
"""How many of a job's newest cycles its throughput is measured over."""

STACKED_PHASES = ("read", "plan", "snapshot", "stage", "commit", "checkpoint")
"""The phases of a round that follow one another (their timings add up to the round); the
others a round reports (``state_load``, ``snapshot_io``, ``write``) are parts of these."""


def _seconds(c: CycleInfo) -> float:
    return (c.finished - c.started).total_seconds() if c.finished else 0.0


def throughput(cycles: list[CycleInfo]) -> float | None:
    """Rows read per second of the committed rounds among ``cycles`` (None: none yet)."""
    done = [c for c in cycles if c.state == "COMMITTED" and c.finished]
    busy = sum(_seconds(c) for c in done)
    return round(sum(c.rows_in for c in done) / busy, 1) if done and busy > 0 else None


def job_summary(client: Client, job: JobInfo, now: datetime | None = None) -> dict[str, Any]:
    """One row of the jobs list."""
    now = now or datetime.now(UTC)
    recent = client.list_cycles(job.name, limit=RECENT)
    last_end = None
    if job.last_window is not None:
        ends = [c.window_end for c in recent.cycles if c.window == job.last_window and c.window_end]
        if not ends:
            ends = [cp.window_end for cp in client.list_checkpoints(job.name) if cp.window == job.last_window]
        last_end = ends[0] if ends else None
    failed = next((c for c in recent.cycles if c.state == "FAILED"), None)
    return {
        **job.to_dict(),
        "last_window_end": last_end.isoformat() if last_end else None,
        "lag_s": round((now - last_end).total_seconds(), 1) if last_end else None,
        "rows_per_s": throughput(recent.cycles),
        "cycles": recent.total,
        "last_failed_window": failed.window if failed else None,
        "last_failed_error": short_error(failed.error) if failed and failed.error else None,
    }


def cycle_row(c: CycleInfo) -> dict[str, Any]:
    """One round of the timeline, with its phases in stacking order and its duration."""
    row = c.to_dict()
    row["phases"] = [[p, round(c.timings.get(p, 0.0), 1)] for p in STACKED_PHASES if p in c.timings]
    row["duration_ms"] = round(_seconds(c) * 1000, 1)
    row["status"] = timeline_status(c)
    row["error_summary"] = short_error(c.error) if c.error else None
    return row


def timeline_status(c: CycleInfo) -> str:
    """The one word the timeline shows for a round: committed, staged, running, failed,
    aborted, or rolled back (it committed, and a restore undid its checkpoint since)."""
    return "rolled back" if c.checkpoint == "ROLLED_BACK" else c.state.lower()
