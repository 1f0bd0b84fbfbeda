"""Which windows of a job are complete: a window is complete while it has a COMPLETE
checkpoint row (at most one, by the partial unique index in :mod:`.schema`)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from .connection import fetch_one
from .records import CheckpointStatus
from .schema import checkpoints_table


def complete_row(conn: Connection, job: str, window: int) -> RowMapping | None:
    """The COMPLETE checkpoint row of the job's ``window``, or None."""
    return fetch_one(
        conn,
        sa.select(checkpoints_table).where(
            checkpoints_table.c.job == job,
            checkpoints_table.c.window == window,
            checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
        ),
    )


def complete_windows(conn: Connection, job: str) -> list[int]:
    """The job's complete windows, ascending."""
    return list(
        conn.execute(
            sa.select(checkpoints_table.c.window)
            .where(
                checkpoints_table.c.job == job,
                checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
            )
            .order_by(checkpoints_table.c.window)
        ).scalars()
    )


def windows_text(windows: list[int]) -> str:
    """The complete windows for an error message (the last 20 at most)."""
    if not windows:
        return "it has no complete checkpoints"
    shown = ", ".join(str(w) for w in windows[-20:])
    return f"its complete checkpoints are windows {'..., ' if len(windows) > 20 else ''}{shown}"
