"""``lockgate cycles JOB``: the window timeline, each cycle with its iteration cycles' supersteps."""

from __future__ import annotations

import argparse
from typing import Any

from ..control.info import CycleInfo, SuperstepInfo


def add_cycles_parser(sub: Any) -> None:
    """The ``cycles`` subcommand's arguments."""
    c = sub.add_parser("cycles", help="list a job's cycles (attempts at windows), with the supersteps of graph operators")
    c.add_argument("job")
    c.add_argument("--window", type=int, help="only this window (its attempts and their supersteps)")
    c.add_argument("--limit", type=int, default=20, help="newest cycles printed (default 20)")


def cycles_report(args: argparse.Namespace, client: Any) -> tuple[Any, str]:
    """The data (``--json``) and the text of ``lockgate cycles``."""
    page = client.list_cycles(args.job, limit=1000 if args.window is not None else args.limit)
    cycles = [c for c in page.cycles if args.window is None or c.window == args.window][: args.limit]
    steps = client.list_supersteps(args.job, args.window)
    by_attempt: dict[tuple[int, int], list[SuperstepInfo]] = {}
    for s in steps:
        by_attempt.setdefault((s.window, s.attempt), []).append(s)
    data = [{**c.to_dict(), "supersteps": [s.to_dict() for s in by_attempt.get((c.window, c.attempt), [])]}
            for c in cycles]
    if not cycles:
        return data, f"job {args.job} has no cycle{' at window ' + str(args.window) if args.window is not None else ''} yet"
    lines = [f"{'WINDOW':<12}{'ATTEMPT':<9}{'STATE':<11}{'ROWS IN':>9}{'ROWS OUT':>10}{'LATE':>8}{'INVALID':>9}"
             f"{'MS':>10}  STARTED"]
    for c in cycles:
        lines.append(_cycle_line(c))
        for s in by_attempt.get((c.window, c.attempt), []):
            lines.append(_superstep_line(s))
    return data, "\n".join(lines)


def _cycle_line(c: CycleInfo) -> str:
    total = sum(v for k, v in c.timings.items() if k in ("read", "plan", "write", "commit", "checkpoint"))
    return (f"{c.window:<12}{c.attempt:<9}{c.state:<11}{c.rows_in:>9,}{c.rows_out:>10,}{c.late_rows:>8,}"
            f"{c.invalid_rows:>9,}{total:>10,.0f}  "
            f"{c.started.strftime('%Y-%m-%d %H:%M:%S')}")


def _superstep_line(s: SuperstepInfo) -> str:
    notes = s.notes()
    return (f"    {s.operator} superstep {s.superstep:>3}: {s.messages_sent:>9,} messages  "
            f"{s.vertices_changed:>9,} changed  {s.active_vertices:>9,} active  {s.elapsed_ms:>9,.0f} ms"
            + (f"  ({'; '.join(notes)})" if notes else ""))


__all__ = ["add_cycles_parser", "cycles_report"]
