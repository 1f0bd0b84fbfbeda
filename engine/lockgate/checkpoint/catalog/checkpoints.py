"""Checkpoints: a window is complete once its checkpoint row is committed, in the same
transaction that marks its cycle COMMITTED; rollback and expiry change their status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ...errors import CheckpointExistsError, CheckpointNotFoundError, CycleStateError, InvalidArgumentError
from .base import CatalogBase
from .connection import fetch_all, fetch_one
from .cycles import cycle_row, expect_cycle_state
from .jobs import check_generation, lock_job, require_job
from .records import CheckpointRecord, CheckpointStatus, CycleState, checkpoint_record
from .schema import checkpoints_table, cycles_table, utcnow
from .windows import complete_row, complete_windows, windows_text


def _exists(job: str, window: int) -> CheckpointExistsError:
    return CheckpointExistsError(
        f"job '{job}': window {window} already has a complete checkpoint; it was committed by "
        "another attempt. Go on with the next window"
    )


class CheckpointsMixin(CatalogBase):
    """Completing windows, reading checkpoints, rolling back and expiring them."""

    def complete_window(
        self,
        job: str,
        generation: int,
        cycle_id: int,
        *,
        window: int,
        plan_version: str | None,
        positions: Mapping[str, Any],
        snapshot_uri: str | None,
        snapshot_manifest: Mapping[str, Any] | None,
        sink_commits: Any,
        rows_in: int,
        rows_out: int,
        timings: Mapping[str, float] | None = None,
    ) -> CheckpointRecord:
        """Make ``window`` complete: in ONE fenced transaction, insert its COMPLETE checkpoint
        and mark the (STAGED) cycle COMMITTED with ``timings`` merged in.

        Raises FencedError (superseded generation), CycleStateError (cycle not STAGED or
        not of this job and window) or CheckpointExistsError (window complete already);
        nothing is written then.
        """
        try:
            with self._write() as conn:
                check_generation(conn, job, generation, self.url)
                cycle = cycle_row(conn, cycle_id)
                if cycle["job"] != job or cycle["window"] != window:
                    raise CycleStateError(
                        f"cycle {cycle_id} is window {cycle['window']} of job '{cycle['job']}', "
                        f"not window {window} of job '{job}'"
                    )
                expect_cycle_state(cycle, "commit", CycleState.STAGED)
                if complete_row(conn, job, window) is not None:
                    raise _exists(job, window)
                now = utcnow()
                result = conn.execute(
                    sa.insert(checkpoints_table).values(
                        job=job,
                        window=window,
                        plan_version=plan_version,
                        cycle_id=cycle_id,
                        positions=dict(positions),
                        snapshot_uri=snapshot_uri,
                        snapshot_manifest=dict(snapshot_manifest or {}),
                        sink_commits=sink_commits,
                        rows_in=rows_in,
                        rows_out=rows_out,
                        status=CheckpointStatus.COMPLETE.value,
                        created=now,
                    )
                )
                conn.execute(
                    sa.update(cycles_table)
                    .where(cycles_table.c.id == cycle_id)
                    .values(
                        state=CycleState.COMMITTED.value,
                        timings={**(cycle["timings"] or {}), **(timings or {})},
                        finished=now,
                    )
                )
                new_id = result.inserted_primary_key[0]
                return checkpoint_record(
                    fetch_all(conn, sa.select(checkpoints_table).where(checkpoints_table.c.id == new_id))[0]
                )
        except IntegrityError as exc:  # a concurrent writer won the race (unique index)
            raise _exists(job, window) from exc

    def last_checkpoint(self, job: str) -> CheckpointRecord | None:
        """The job's COMPLETE checkpoint of the highest window, or None."""
        with self._read() as conn:
            require_job(conn, job, self.url)
            row = fetch_one(
                conn,
                sa.select(checkpoints_table)
                .where(
                    checkpoints_table.c.job == job,
                    checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
                )
                .order_by(checkpoints_table.c.window.desc())
                .limit(1),
            )
            return checkpoint_record(row) if row is not None else None

    def get_checkpoint(self, job: str, window: int) -> CheckpointRecord:
        """The COMPLETE checkpoint of ``window``; CheckpointNotFoundError naming the windows
        that have one (and saying so when this window's checkpoint expired or was rolled back)."""
        with self._read() as conn:
            require_job(conn, job, self.url)
            row = complete_row(conn, job, window)
            if row is not None:
                return checkpoint_record(row)
            inactive = (
                conn.execute(
                    sa.select(checkpoints_table.c.status)
                    .where(checkpoints_table.c.job == job, checkpoints_table.c.window == window)
                    .order_by(checkpoints_table.c.id.desc())
                )
                .scalars()
                .first()
            )
            why = f" (its checkpoint is {inactive})" if inactive else ""
            raise CheckpointNotFoundError(
                f"job '{job}' has no complete checkpoint for window {window}{why}; "
                f"{windows_text(complete_windows(conn, job))}"
            )

    def list_checkpoints(self, job: str, include_inactive: bool = False) -> list[CheckpointRecord]:
        """The job's COMPLETE checkpoints (all statuses with ``include_inactive``), by window."""
        with self._read() as conn:
            require_job(conn, job, self.url)
            query = sa.select(checkpoints_table).where(checkpoints_table.c.job == job)
            if not include_inactive:
                query = query.where(checkpoints_table.c.status == CheckpointStatus.COMPLETE.value)
            rows = fetch_all(conn, query.order_by(checkpoints_table.c.window, checkpoints_table.c.id))
            return [checkpoint_record(r) for r in rows]

    def rollback_to(self, job: str, window: int, generation: int) -> list[int]:
        """Mark the job's COMPLETE checkpoints after ``window`` ROLLED_BACK; return their windows.

        Fenced. ``window`` must have a COMPLETE checkpoint (CheckpointNotFoundError). Cycles
        are not touched: call :meth:`abort_open_cycles` with ``staged_after=window``.
        """
        with self._write() as conn:
            check_generation(conn, job, generation, self.url)
            if complete_row(conn, job, window) is None:
                raise CheckpointNotFoundError(
                    f"job '{job}' cannot roll back to window {window}: it has no complete checkpoint; "
                    f"{windows_text(complete_windows(conn, job))}"
                )
            later = [w for w in complete_windows(conn, job) if w > window]
            if later:
                conn.execute(
                    sa.update(checkpoints_table)
                    .where(
                        checkpoints_table.c.job == job,
                        checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
                        checkpoints_table.c.window > window,
                    )
                    .values(status=CheckpointStatus.ROLLED_BACK.value)
                )
            return later

    def expire_checkpoints(self, job: str, keep: int) -> list[CheckpointRecord]:
        """Mark all but the newest ``keep`` (>= 1) COMPLETE checkpoints EXPIRED and return
        them, by window; the caller deletes their snapshots. The latest never expires."""
        if keep < 1:
            raise InvalidArgumentError(
                f"keep must be at least 1 (the latest checkpoint always stays), not {keep}"
            )
        with self._write() as conn:
            lock_job(conn, job, self.url)
            windows = complete_windows(conn, job)
            old = windows[:-keep]
            if not old:
                return []
            where = sa.and_(
                checkpoints_table.c.job == job,
                checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
                checkpoints_table.c.window.in_(old),
            )
            ids = list(conn.execute(sa.select(checkpoints_table.c.id).where(where)).scalars())
            conn.execute(
                sa.update(checkpoints_table)
                .where(checkpoints_table.c.id.in_(ids))
                .values(status=CheckpointStatus.EXPIRED.value)
            )
            rows = fetch_all(
                conn,
                sa.select(checkpoints_table)
                .where(checkpoints_table.c.id.in_(ids))
                .order_by(checkpoints_table.c.window),
            )
            return [checkpoint_record(r) for r in rows]
