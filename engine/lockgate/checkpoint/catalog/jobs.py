"""Jobs: their rows, their state transitions, and their generations (the fencing token).

A runner :meth:`~JobsMixin.acquire`\\ s a job and gets a new generation; every fenced write
takes that generation and goes through :func:`check_generation`, which refuses it with
:class:`~lockgate.errors.FencedError` once a newer runner has acquired the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from ...errors import FencedError, InvalidArgumentError, JobNotFoundError
from ...names import check_labels, check_visible
from ...states import JobState, check_transition, parse_state
from .base import CatalogBase
from .connection import fetch_all, fetch_one
from .records import JobRecord, TransitionRecord, job_record, transition_record
from .schema import checkpoints_table, cycles_table, jobs_table, supersteps_table, transitions_table, utcnow

LABELS_KEY = "labels"
"""The job option holding its labels (who runs it: e.g. the Airflow DAG and task)."""


def job_not_found(conn: Connection, name: str, url: str) -> JobNotFoundError:
    """JobNotFoundError for ``name``, naming the jobs the catalog at ``url`` does hold."""
    names = list(conn.execute(sa.select(jobs_table.c.name).order_by(jobs_table.c.name)).scalars())
    if not names:
        return JobNotFoundError(f"job '{name}' not found: the catalog at '{url}' has no jobs yet")
    shown = ", ".join(names[:20]) + (f" (and {len(names) - 20} more)" if len(names) > 20 else "")
    return JobNotFoundError(f"job '{name}' not found; known jobs: {shown}")


def require_job(conn: Connection, name: str, url: str) -> RowMapping:
    """The job's row; JobNotFoundError when there is none."""
    row = fetch_one(conn, sa.select(jobs_table).where(jobs_table.c.name == name))
    if row is None:
        raise job_not_found(conn, name, url)
    return row


def lock_job(conn: Connection, name: str, url: str) -> RowMapping:
    """The job's row, locked for the rest of the transaction (PostgreSQL row lock;
    SQLite write transactions hold the database lock already)."""
    row = fetch_one(conn, sa.select(jobs_table).where(jobs_table.c.name == name).with_for_update())
    if row is None:
        raise job_not_found(conn, name, url)
    return row


def check_generation(conn: Connection, name: str, generation: int, url: str) -> RowMapping:
    """Lock the job's row and raise FencedError unless ``generation`` is its current one."""
    row = lock_job(conn, name, url)
    if row["generation"] != generation:
        raise FencedError(
            f"job '{name}': generation {generation} is fenced, the job's current generation is "
            f"{row['generation']} (another runner took the job over); this runner must stop "
            "without writing"
        )
    return row


class JobsMixin(CatalogBase):
    """Job rows, state transitions and generations."""

    def ensure_job(self, name: str, pipeline_ref: str, options: Mapping[str, Any] | None = None) -> JobRecord:
        """Create the job in CREATED, or return the existing one with ``pipeline_ref`` (and
        ``options``, when given) updated."""
        if not name or not name.strip():
            raise InvalidArgumentError("a job name must not be empty")
        check_visible("the job name", name)
        try:
            return self._ensure_job(name, pipeline_ref, options)
        except IntegrityError:
            # Another process created the job between our read and insert (PostgreSQL).
            return self._ensure_job(name, pipeline_ref, options)

    def _ensure_job(self, name: str, pipeline_ref: str, options: Mapping[str, Any] | None) -> JobRecord:
        with self._write() as conn:
            row = fetch_one(conn, sa.select(jobs_table).where(jobs_table.c.name == name).with_for_update())
            now = utcnow()
            if row is None:
                conn.execute(
                    sa.insert(jobs_table).values(
                        name=name,
                        pipeline_ref=pipeline_ref,
                        plan_version=None,
                        state=JobState.CREATED.value,
                        generation=0,
                        last_error=None,
                        options=dict(options or {}),
                        created=now,
                        updated=now,
                    )
                )
                conn.execute(
                    sa.insert(transitions_table).values(
                        job=name,
                        from_state=None,
                        to_state=JobState.CREATED.value,
                        reason="job created",
                        at=now,
                    )
                )
            else:
                values: dict[str, Any] = {}
                if row["pipeline_ref"] != pipeline_ref:
                    values["pipeline_ref"] = pipeline_ref
                if options is not None and dict(options) != (row["options"] or {}):
                    values["options"] = dict(options)
                if values:
                    conn.execute(
                        sa.update(jobs_table).where(jobs_table.c.name == name).values(updated=now, **values)
                    )
            return job_record(require_job(conn, name, self.url))

    def set_job_labels(self, name: str, labels: Mapping[str, str]) -> JobRecord:
        """Merge ``labels`` into the job's labels (``options["labels"]``), in one transaction
        with the row locked, so no concurrent change of its other options is lost."""
        labels = check_labels(labels)
        with self._write() as conn:
            row = lock_job(conn, name, self.url)
            options = dict(row["options"] or {})
            merged = {**(options.get(LABELS_KEY) or {}), **labels}
            if merged != options.get(LABELS_KEY):
                options[LABELS_KEY] = merged
                conn.execute(
                    sa.update(jobs_table).where(jobs_table.c.name == name).values(options=options, updated=utcnow())
                )
            return job_record(require_job(conn, name, self.url))

    def get_job(self, name: str) -> JobRecord:
        """The job; JobNotFoundError (naming the known jobs) when there is none."""
        with self._read() as conn:
            return job_record(require_job(conn, name, self.url))

    def list_jobs(self) -> list[JobRecord]:
        """All jobs, by name."""
        with self._read() as conn:
            rows = fetch_all(conn, sa.select(jobs_table).order_by(jobs_table.c.name))
            return [job_record(r) for r in rows]

    def delete_job(self, name: str) -> list[str]:
        """Delete the job with its transitions, cycles (and supersteps) and checkpoints (plans stay).

        Returns the snapshot URIs its checkpoints referred to, for the caller to delete.
        """
        with self._write() as conn:
            lock_job(conn, name, self.url)
            uris = conn.execute(
                sa.select(checkpoints_table.c.snapshot_uri)
                .where(checkpoints_table.c.job == name, checkpoints_table.c.snapshot_uri.is_not(None))
                .order_by(checkpoints_table.c.window, checkpoints_table.c.id)
            ).scalars()
            result = list(dict.fromkeys(uris))
            for table in (checkpoints_table, supersteps_table, cycles_table, transitions_table, jobs_table):
                key = table.c.name if table is jobs_table else table.c.job
                conn.execute(sa.delete(table).where(key == name))
            return result

    def transition(
        self,
        name: str,
        to_state: JobState | str,
        reason: str = "",
        expected_generation: int | None = None,
    ) -> JobRecord:
        """Move the job to ``to_state`` and record the move, in one transaction.

        Refused with JobStateError when the state machine does not allow the move, and
        with FencedError when ``expected_generation`` is given and is not the job's
        current generation. Moving to FAILED stores ``reason`` as the job's last_error;
        moving to FINISHED or STOPPED clears it (the job rests healthy: the old error stays
        in the transitions).
        """
        new = parse_state(to_state)
        with self._write() as conn:
            row = (
                lock_job(conn, name, self.url)
                if expected_generation is None
                else check_generation(conn, name, expected_generation, self.url)
            )
            old = JobState(row["state"])
            check_transition(old, new, job=name)
            now = utcnow()
            values: dict[str, Any] = {"state": new.value, "updated": now}
            if new is JobState.FAILED:
                values["last_error"] = reason
            elif new in (JobState.FINISHED, JobState.STOPPED):
                values["last_error"] = None
            conn.execute(sa.update(jobs_table).where(jobs_table.c.name == name).values(**values))
            conn.execute(
                sa.insert(transitions_table).values(
                    job=name, from_state=old.value, to_state=new.value, reason=reason or "", at=now
                )
            )
            return job_record(require_job(conn, name, self.url))

    def note_error(self, name: str, error: str) -> JobRecord:
        """Record ``error`` as the job's last_error without moving it: for a run refused
        before it took the job over (a damaged snapshot, a state layout that does not fit),
        so that ``lockgate jobs`` shows why the job did not run."""
        with self._write() as conn:
            lock_job(conn, name, self.url)
            conn.execute(
                sa.update(jobs_table).where(jobs_table.c.name == name).values(last_error=error, updated=utcnow())
            )
            return job_record(require_job(conn, name, self.url))

    def transitions(self, name: str) -> list[TransitionRecord]:
        """The job's recorded state changes, oldest first."""
        with self._read() as conn:
            require_job(conn, name, self.url)
            rows = fetch_all(
                conn,
                sa.select(transitions_table)
                .where(transitions_table.c.job == name)
                .order_by(transitions_table.c.id),
            )
            return [transition_record(r) for r in rows]

    def acquire(self, name: str) -> int:
        """Increment and return the job's generation: the caller becomes the job's runner,
        and every fenced write of an older generation is refused from now on."""
        with self._write() as conn:
            row = lock_job(conn, name, self.url)
            generation = row["generation"] + 1
            conn.execute(
                sa.update(jobs_table)
                .where(jobs_table.c.name == name)
                .values(generation=generation, updated=utcnow())
            )
            return generation
