"""Supersteps: the rounds of graph operators' iteration cycles, recorded per cycle attempt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from .base import CatalogBase
from .connection import fetch_all
from .cycles import cycle_row
from .records import SuperstepRecord, superstep_record
from .schema import supersteps_table


class SuperstepsMixin(CatalogBase):
    """What each superstep of a window's iteration cycles did (messages, changes, timings)."""

    def record_supersteps(self, cycle_id: int, supersteps: list[Mapping[str, Any]]) -> None:
        """Record the supersteps cycle ``cycle_id`` ran (as its result reported them)."""
        if not supersteps:
            return
        with self._write() as conn:
            row = cycle_row(conn, cycle_id)
            conn.execute(sa.insert(supersteps_table), [
                {
                    "job": row["job"], "window": row["window"], "attempt": row["attempt"], "cycle_id": cycle_id,
                    "operator": s["operator"], "superstep": int(s["superstep"]),
                    "messages_sent": int(s.get("messages_sent", 0)),
                    "vertices_changed": int(s.get("vertices_changed", 0)),
                    "active_vertices": int(s.get("active_vertices", 0)),
                    "elapsed_ms": float(s.get("elapsed_ms", 0.0)), "halted_by": s.get("halted_by"),
                    "checkpointed": bool(s.get("checkpointed", True)), "resumed": bool(s.get("resumed", False)),
                }
                for s in supersteps
            ])

    def list_supersteps(
        self, job: str, window: int | None = None, windows: tuple[int, int] | None = None
    ) -> list[SuperstepRecord]:
        """The job's supersteps (of one ``window``, or of ``windows`` first..last), by window,
        attempt, operator and superstep."""
        t = supersteps_table
        query = sa.select(t).where(t.c.job == job)
        if window is not None:
            query = query.where(t.c.window == window)
        if windows is not None:
            query = query.where(t.c.window >= windows[0], t.c.window <= windows[1])
        query = query.order_by(t.c.window, t.c.attempt, t.c.id)
        with self._read() as conn:
            return [superstep_record(m) for m in fetch_all(conn, query)]
