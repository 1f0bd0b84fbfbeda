"""Cycles: attempts at running one window, RUNNING -> STAGED -> COMMITTED (or FAILED /
ABORTED). The commit itself is :meth:`~.checkpoints.CheckpointsMixin.complete_window`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ...errors import CheckpointExistsError, CycleNotFoundError, CycleStateError
from .base import CatalogBase
from .connection import fetch_all, fetch_one
from .jobs import check_generation, lock_job, require_job
from .records import CheckpointStatus, CycleRecord, CycleState, cycle_record
from .schema import checkpoints_table, cycles_table, utcnow


def cycle_row(conn: Connection, cycle_id: int) -> RowMapping:
    """The cycle's row; CycleNotFoundError when there is none."""
    row = fetch_one(conn, sa.select(cycles_table).where(cycles_table.c.id == cycle_id))
    if row is None:
        raise CycleNotFoundError(f"cycle {cycle_id} not found in the catalog")
    return row


def expect_cycle_state(row: RowMapping, action: str, *states: CycleState) -> None:
    """CycleStateError unless the cycle ``row`` is in one of ``states`` (``action`` says what was refused)."""
    if row["state"] not in {s.value for s in states}:
        wanted = " or ".join(s.value for s in states)
        raise CycleStateError(
            f"job '{row['job']}': cannot {action} cycle {row['id']} (window {row['window']}, attempt "
            f"{row['attempt']}): it is {row['state']}, not {wanted}"
        )


@dataclass(frozen=True)
class StagedCycle:
    """What :meth:`CyclesMixin.stage_cycles` records for one cycle: its manifest, counts and timings."""

    cycle_id: int
    manifest: Mapping[str, Any]
    rows_in: int
    rows_out: int
    late_rows: int = 0
    timings: Mapping[str, float] | None = None


def _complete_already(job: str, window: int) -> CheckpointExistsError:
    return CheckpointExistsError(
        f"job '{job}': window {window} is complete already; run the next window, or roll "
        f"back with `lockgate restore {job} --window W` (W < {window}) to run it again"
    )


def _new_cycle(
    job: str, window: int, attempt: int, generation: int, plan_version: str | None, started: Any
) -> dict[str, Any]:
    """The values of a new RUNNING cycle row."""
    return dict(job=job, window=window, attempt=attempt, generation=generation, plan_version=plan_version,
                state=CycleState.RUNNING.value, manifest=None, rows_in=0, rows_out=0, late_rows=0, timings={},
                error=None, started=started, finished=None)


def _merge_timings(conn: Connection, cycle_id: int, timings: Mapping[str, float]) -> None:
    """Merge ``timings`` (phase -> ms) into the cycle's, in ``conn``'s transaction."""
    row = cycle_row(conn, cycle_id)
    conn.execute(
        sa.update(cycles_table).where(cycles_table.c.id == cycle_id)
        .values(timings={**(row["timings"] or {}), **timings})
    )


def _stage(conn: Connection, row: RowMapping, c: StagedCycle) -> CycleRecord:
    """RUNNING -> STAGED for the cycle ``row`` in ``conn``'s transaction."""
    expect_cycle_state(row, "stage", CycleState.RUNNING)
    conn.execute(
        sa.update(cycles_table)
        .where(cycles_table.c.id == c.cycle_id)
        .values(
            state=CycleState.STAGED.value,
            manifest=dict(c.manifest),
            rows_in=c.rows_in,
            rows_out=c.rows_out,
            late_rows=c.late_rows,
            timings={**(row["timings"] or {}), **(c.timings or {})},
        )
    )
    return cycle_record(cycle_row(conn, c.cycle_id))


class CyclesMixin(CatalogBase):
    """Cycle attempts: begin, stage, fail, abort, and their timings."""

    def begin_cycle(self, job: str, window: int, generation: int, plan_version: str | None) -> CycleRecord:
        """Record a new RUNNING attempt at ``window`` (attempt = 1 + earlier attempts).

        Fenced. CheckpointExistsError when the window is complete already.
        """
        return self.begin_cycles(job, [window], generation, plan_version)[0]

    def begin_cycles(
        self, job: str, windows: list[int], generation: int, plan_version: str | None
    ) -> list[CycleRecord]:
        """:meth:`begin_cycle` for each of ``windows`` (a catch-up group), in one transaction:
        all of them begin, or none does."""
        with self._write() as conn:  # four statements for the whole group, not four a window
            check_generation(conn, job, generation, self.url)
            lo, hi = min(windows), max(windows)
            complete = set(conn.execute(
                sa.select(checkpoints_table.c.window).where(
                    checkpoints_table.c.job == job, checkpoints_table.c.window.between(lo, hi),
                    checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
                )
            ).scalars())
            for w in windows:
                if w in complete:
                    raise _complete_already(job, w)
            attempts = dict(conn.execute(
                sa.select(cycles_table.c.window, sa.func.max(cycles_table.c.attempt))
                .where(cycles_table.c.job == job, cycles_table.c.window.between(lo, hi))
                .group_by(cycles_table.c.window)
            ).all())
            now = utcnow()
            conn.execute(sa.insert(cycles_table), [
                _new_cycle(job, w, (attempts.get(w) or 0) + 1, generation, plan_version, now) for w in windows
            ])
            rows = fetch_all(conn, sa.select(cycles_table).where(
                cycles_table.c.job == job, cycles_table.c.window.between(lo, hi),
            ).order_by(cycles_table.c.attempt))
            by_window = {r["window"]: r for r in rows}  # each window's last attempt: the one just begun
            return [cycle_record(by_window[w]) for w in windows]

    def stage_cycle(
        self,
        cycle_id: int,
        generation: int,
        manifest: Mapping[str, Any],
        rows_in: int,
        rows_out: int,
        late_rows: int = 0,
        timings: Mapping[str, float] | None = None,
    ) -> CycleRecord:
        """RUNNING -> STAGED: the worker staged the window's output (``manifest`` lists it).

        Fenced; ``timings`` (phase -> ms) are merged into the cycle's timings.
        """
        return self.stage_cycles(generation, [StagedCycle(cycle_id, manifest, rows_in, rows_out, late_rows, timings)])[0]

    def stage_cycles(self, generation: int, cycles: list[StagedCycle]) -> list[CycleRecord]:
        """:meth:`stage_cycle` for each of ``cycles`` (a catch-up group), in one transaction:
        all of them are staged, or none is."""
        with self._write() as conn:
            checked: set[str] = set()
            out = []
            for c in cycles:
                row = cycle_row(conn, c.cycle_id)
                if row["job"] not in checked:
                    check_generation(conn, row["job"], generation, self.url)
                    checked.add(row["job"])
                out.append(_stage(conn, row, c))
            return out

    def fail_cycle(self, cycle_id: int, error: str) -> CycleRecord:
        """RUNNING or STAGED -> FAILED with ``error``. A cycle already FAILED or ABORTED is
        returned unchanged; a COMMITTED one is refused with CycleStateError."""
        with self._write() as conn:
            row = cycle_row(conn, cycle_id)
            if row["state"] in (CycleState.FAILED.value, CycleState.ABORTED.value):
                return cycle_record(row)
            expect_cycle_state(row, "fail", CycleState.RUNNING, CycleState.STAGED)
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id == cycle_id)
                .values(state=CycleState.FAILED.value, error=error, finished=utcnow())
            )
            return cycle_record(cycle_row(conn, cycle_id))

    def abort_open_cycles(
        self, job: str, staged_after: int | None = None, reason: str = "aborted on restore"
    ) -> list[CycleRecord]:
        """Mark the job's RUNNING cycles ABORTED and return them (the caller deletes their
        staged files). With ``staged_after=C``, STAGED cycles of windows after C are
        aborted too (restore from checkpoint C discards their staged output)."""
        open_cycles = cycles_table.c.state == CycleState.RUNNING.value
        if staged_after is not None:
            open_cycles = sa.or_(
                open_cycles,
                sa.and_(
                    cycles_table.c.state == CycleState.STAGED.value, cycles_table.c.window > staged_after
                ),
            )
        with self._write() as conn:
            lock_job(conn, job, self.url)
            where = sa.and_(cycles_table.c.job == job, open_cycles)
            ids = list(conn.execute(sa.select(cycles_table.c.id).where(where)).scalars())
            if not ids:
                return []
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id.in_(ids))
                .values(state=CycleState.ABORTED.value, error=reason, finished=utcnow())
            )
            rows = fetch_all(
                conn, sa.select(cycles_table).where(cycles_table.c.id.in_(ids)).order_by(cycles_table.c.id)
            )
            return [cycle_record(r) for r in rows]

    def staged_cycles(self, job: str) -> list[CycleRecord]:
        """The job's STAGED cycles (staged, not yet committed), by window then attempt."""
        with self._read() as conn:
            require_job(conn, job, self.url)
            rows = fetch_all(
                conn,
                sa.select(cycles_table)
                .where(cycles_table.c.job == job, cycles_table.c.state == CycleState.STAGED.value)
                .order_by(cycles_table.c.window, cycles_table.c.attempt),
            )
            return [cycle_record(r) for r in rows]

    def list_cycles(self, job: str, limit: int = 100) -> list[CycleRecord]:
        """The job's newest ``limit`` cycles, newest first."""
        with self._read() as conn:
            require_job(conn, job, self.url)
            rows = fetch_all(
                conn,
                sa.select(cycles_table)
                .where(cycles_table.c.job == job)
                .order_by(cycles_table.c.id.desc())
                .limit(limit),
            )
            return [cycle_record(r) for r in rows]

    def cycle_page(
        self, job: str, limit: int = 100, before: int | None = None
    ) -> tuple[list[tuple[CycleRecord, str | None]], int]:
        """A page of the job's cycles, newest first, each with the status of the checkpoint it
        wrote (None: none), and the job's number of cycles. ``before``: only cycles with a
        smaller id (the last id of the previous page). One indexed query per call, whatever
        the job's length."""
        cp = checkpoints_table
        with self._read() as conn:
            require_job(conn, job, self.url)
            status = (
                sa.select(cp.c.status)
                # job and window first: the (job, window) index finds the row
                .where(cp.c.job == cycles_table.c.job, cp.c.window == cycles_table.c.window,
                       cp.c.cycle_id == cycles_table.c.id)
                .order_by(cp.c.id.desc())
                .limit(1)
                .scalar_subquery()
            )
            query = sa.select(cycles_table, status.label("checkpoint_status")).where(cycles_table.c.job == job)
            if before is not None:
                query = query.where(cycles_table.c.id < before)
            rows = fetch_all(conn, query.order_by(cycles_table.c.id.desc()).limit(limit))
            total = conn.execute(
                sa.select(sa.func.count()).select_from(cycles_table).where(cycles_table.c.job == job)
            ).scalar_one()
            return [(cycle_record(r), r["checkpoint_status"]) for r in rows], int(total)

    def get_cycle(self, cycle_id: int) -> CycleRecord:
        """One cycle by id; CycleNotFoundError when there is none."""
        with self._read() as conn:
            return cycle_record(cycle_row(conn, cycle_id))

    def update_cycles_timings(self, timings: Mapping[int, Mapping[str, float]]) -> None:
        """:meth:`update_cycle_timings` for several cycles (id -> timings) in one transaction."""
        with self._write() as conn:
            for cycle_id, more in timings.items():
                _merge_timings(conn, cycle_id, more)

    def update_cycle_timings(self, cycle_id: int, timings: Mapping[str, float]) -> CycleRecord:
        """Merge ``timings`` (phase -> ms) into the cycle's timings."""
        with self._write() as conn:
            _merge_timings(conn, cycle_id, timings)
            return cycle_record(cycle_row(conn, cycle_id))
