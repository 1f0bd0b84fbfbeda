"""What the plugin's API answers, built from the Lockgate client's public objects.

Plain functions from :class:`lockgate.Client` results to JSON-able dicts: the jobs list
(state, last committed window and its end, lag behind now, rows per second, errors), one
job, and its window timeline. Nothing here knows whether the client is embedded or talks to
a controller.

A graph operator's rounds also carry their supersteps: the timeline's rows a summary
(:func:`superstep_summary`), the window's detail a row per superstep (:func:`superstep_row`).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from lockgate import Client, CycleInfo, JobInfo, LockgateError, SuperstepInfo
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


def cycle_row(c: CycleInfo, supersteps: list[SuperstepInfo] | None = None) -> dict[str, Any]:
    """One round of the timeline, with its phases in stacking order, its duration and the
    summary of its ``supersteps`` (None: it ran none)."""
    row = c.to_dict()
    row["phases"] = [[p, round(c.timings.get(p, 0.0), 1)] for p in STACKED_PHASES if p in c.timings]
    row["duration_ms"] = round(_seconds(c) * 1000, 1)
    row["status"] = timeline_status(c)
    row["error_summary"] = short_error(c.error) if c.error else None
    row["supersteps"] = superstep_summary(supersteps or [])
    return row


def timeline_status(c: CycleInfo) -> str:
    """The one word the timeline shows for a round: committed, staged, running, failed,
    aborted, or rolled back (it committed, and a restore undid its checkpoint since)."""
    return "rolled back" if c.checkpoint == "ROLLED_BACK" else c.state.lower()


# -- supersteps ---------------------------------------------------------------------------------
SMALL_JOB = 200
"""A job of at most this many rounds has its supersteps read in one call (all windows); a longer
one, per window of the timeline's page (each call one indexed query, whatever the job's length)."""

FETCHERS = 8
"""How many windows' supersteps are read at a time for a timeline page."""


def iterates(client: Client, job: str, plan_versions: Iterable[str | None]) -> bool:
    """Whether any of the job's ``plan_versions`` has an iteration cycle (a graph operator's
    supersteps): only then has a round supersteps to show."""
    for version in {v for v in plan_versions if v}:
        try:
            physical = client.get_plan(job, version).physical
        except LockgateError:  # a plan no longer in the catalog: nothing to show for its rounds
            continue
        if any(c.get("mode") == "iteration" for c in physical.get("cycles", [])):
            return True
    return False


def page_supersteps(client: Client, job: str, cycles: list[CycleInfo], total: int) -> dict[tuple[int, int],
                                                                                           list[SuperstepInfo]]:
    """The supersteps of the rounds in ``cycles`` (a timeline page), by (window, attempt); empty,
    at the cost of a plan look-up, for a job without graph operators."""
    if not cycles or not iterates(client, job, (c.plan_version for c in cycles)):
        return {}
    windows = sorted({c.window for c in cycles})
    if total <= SMALL_JOB:
        wanted = set(windows)
        steps = [s for s in client.list_supersteps(job) if s.window in wanted]
    else:
        with ThreadPoolExecutor(min(FETCHERS, len(windows)), thread_name_prefix="lockgate-supersteps") as pool:
            steps = [s for part in pool.map(lambda w: client.list_supersteps(job, window=w), windows) for s in part]
    out: dict[tuple[int, int], list[SuperstepInfo]] = {}
    for s in steps:
        out.setdefault((s.window, s.attempt), []).append(s)
    return out


def superstep_summary(steps: list[SuperstepInfo]) -> dict[str, Any] | None:
    """What a round's timeline row says of its supersteps: how many (and how many this attempt
    ran, the others resumed from an earlier attempt's checkpoint), messages sent, milliseconds of
    the ones it ran, and why each operator's iteration stopped (None: no supersteps)."""
    if not steps:
        return None
    operators = list(dict.fromkeys(s.operator for s in steps))
    last = {op: max((s for s in steps if s.operator == op), key=lambda s: s.superstep) for op in operators}
    halts = {op: s.halted_by for op, s in last.items()}
    ran = [s for s in steps if not s.resumed]
    if len(operators) == 1:
        halted_by = halts[operators[0]]
    else:
        halted_by = ", ".join(f"{op}: {h}" for op, h in halts.items() if h) or None
    return {
        "count": len(steps),
        "ran": len(ran),
        "resumed": len(steps) - len(ran),
        "operators": operators,
        "messages": sum(s.messages_sent for s in steps),
        "vertices_changed": sum(s.vertices_changed for s in steps),
        "elapsed_ms": round(sum(s.elapsed_ms for s in ran), 1),
        "halted_by": halted_by,
        "halts": halts,
        "not_checkpointed": sum(1 for s in steps if not s.checkpointed),
    }


def superstep_row(s: SuperstepInfo) -> dict[str, Any]:
    """One superstep as the timeline's detail table shows it, with its notes (halted and why,
    done by an earlier attempt, not checkpointed)."""
    return {**s.to_dict(), "elapsed_ms": round(s.elapsed_ms, 1), "notes": s.notes()}
