"""The SQL catalog: jobs, plans, job state transitions, cycles and checkpoints.

SQLAlchemy Core over SQLite (a file, the default; WAL mode and a busy timeout so several
processes can share it) or PostgreSQL (``postgresql+psycopg://``). Every method runs in
its own transaction. Writes made on behalf of a runner are *fenced*: they take the
runner's generation (from :meth:`Catalog.acquire`) and are refused with
:class:`~lockgate.errors.FencedError` once a newer runner has acquired the job.

A window is complete only when its checkpoint row is committed
(:meth:`Catalog.complete_window`); that one transaction also marks the cycle COMMITTED.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import StaticPool

from ..control.states import JobState, check_transition, parse_state
from ..errors import (
    CatalogError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    CycleNotFoundError,
    CycleStateError,
    FencedError,
    InvalidArgumentError,
    JobNotFoundError,
    PlanNotFoundError,
)

SCHEMA_VERSION = 1
"""The catalog schema this code writes; a catalog with a newer one is refused."""

SQLITE_BUSY_TIMEOUT_MS = 30_000


class CycleState(StrEnum):
    """The state of one cycle attempt (one window, one try)."""

    RUNNING = "RUNNING"
    STAGED = "STAGED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


class CheckpointStatus(StrEnum):
    """COMPLETE checkpoints restore; EXPIRED ones lost their snapshot; ROLLED_BACK ones were undone."""

    COMPLETE = "COMPLETE"
    EXPIRED = "EXPIRED"
    ROLLED_BACK = "ROLLED_BACK"


def utcnow() -> datetime:
    """The current time, UTC, tz-aware."""
    return datetime.now(UTC)


class UTCDateTime(sa.types.TypeDecorator):
    """A timestamp that is always UTC and tz-aware in Python, on SQLite and PostgreSQL alike."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        # SQLite has no time zone type: store naive UTC text.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_JSON = sa.JSON(none_as_null=True)
metadata = sa.MetaData()

schema_table = sa.Table("lg_schema", metadata, sa.Column("version", sa.Integer, primary_key=True))

jobs_table = sa.Table(
    "lg_jobs",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("pipeline_ref", sa.Text, nullable=False),
    sa.Column("plan_version", sa.String(128), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("options", _JSON, nullable=True),
    sa.Column("created", UTCDateTime, nullable=False),
    sa.Column("updated", UTCDateTime, nullable=False),
)

plans_table = sa.Table(
    "lg_plans",
    metadata,
    sa.Column("plan_version", sa.String(128), primary_key=True),
    sa.Column("pipeline_name", sa.String(255), nullable=False),
    sa.Column("plan_json", sa.Text, nullable=False),
    sa.Column("state_layout", _JSON, nullable=True),
    sa.Column("created", UTCDateTime, nullable=False),
)

transitions_table = sa.Table(
    "lg_transitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(255), nullable=False, index=True),
    sa.Column("from_state", sa.String(32), nullable=True),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("at", UTCDateTime, nullable=False),
)

cycles_table = sa.Table(
    "lg_cycles",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(255), nullable=False),
    sa.Column("window", sa.BigInteger, nullable=False, quote=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("plan_version", sa.String(128), nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("manifest", _JSON, nullable=True),
    sa.Column("rows_in", sa.BigInteger, nullable=False, default=0),
    sa.Column("rows_out", sa.BigInteger, nullable=False, default=0),
    sa.Column("late_rows", sa.BigInteger, nullable=False, default=0),
    sa.Column("timings", _JSON, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("started", UTCDateTime, nullable=False),
    sa.Column("finished", UTCDateTime, nullable=True),
    sa.Index("ix_lg_cycles_job_window", "job", "window"),
)

checkpoints_table = sa.Table(
    "lg_checkpoints",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(255), nullable=False),
    sa.Column("window", sa.BigInteger, nullable=False, quote=True),
    sa.Column("plan_version", sa.String(128), nullable=True),
    sa.Column("cycle_id", sa.Integer, nullable=True),
    sa.Column("positions", _JSON, nullable=True),
    sa.Column("snapshot_uri", sa.Text, nullable=True),
    sa.Column("snapshot_manifest", _JSON, nullable=True),
    sa.Column("sink_commits", _JSON, nullable=True),
    sa.Column("rows_in", sa.BigInteger, nullable=False, default=0),
    sa.Column("rows_out", sa.BigInteger, nullable=False, default=0),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created", UTCDateTime, nullable=False),
    sa.Index("ix_lg_checkpoints_job_window", "job", "window"),
)
# At most one COMPLETE checkpoint per (job, window); EXPIRED and ROLLED_BACK rows stay as
# history, so a rolled-back window can be completed again. Partial unique indexes work on
# SQLite and PostgreSQL alike.
_complete_only = checkpoints_table.c.status == CheckpointStatus.COMPLETE.value
sa.Index(
    "ux_lg_checkpoints_complete",
    checkpoints_table.c.job,
    checkpoints_table.c.window,
    unique=True,
    sqlite_where=_complete_only,
    postgresql_where=_complete_only,
)


@dataclass(frozen=True)
class JobRecord:
    """A job: its pipeline, current plan, state and runner generation (fencing token)."""

    name: str
    pipeline_ref: str
    plan_version: str | None
    state: JobState
    generation: int
    last_error: str | None
    options: dict[str, Any]
    created: datetime
    updated: datetime


@dataclass(frozen=True)
class PlanRecord:
    """A compiled plan, named by its version (the hash of its JSON)."""

    plan_version: str
    pipeline_name: str
    plan_json: str
    state_layout: dict[str, Any]
    created: datetime


@dataclass(frozen=True)
class TransitionRecord:
    """One recorded job state change (``from_state`` is None for the job's creation)."""

    id: int
    job: str
    from_state: JobState | None
    to_state: JobState
    reason: str
    at: datetime


@dataclass(frozen=True)
class CycleRecord:
    """One attempt at running one window of a job."""

    id: int
    job: str
    window: int
    attempt: int
    generation: int
    plan_version: str | None
    state: CycleState
    manifest: dict[str, Any]
    rows_in: int
    rows_out: int
    late_rows: int
    timings: dict[str, float]
    error: str | None
    started: datetime
    finished: datetime | None


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint of one window: where the sources stand, the state snapshot, the sink commits."""

    id: int
    job: str
    window: int
    plan_version: str | None
    cycle_id: int | None
    positions: dict[str, Any]
    snapshot_uri: str | None
    snapshot_manifest: dict[str, Any]
    sink_commits: Any
    rows_in: int
    rows_out: int
    status: CheckpointStatus
    created: datetime


def _job(m: RowMapping) -> JobRecord:
    return JobRecord(
        name=m["name"],
        pipeline_ref=m["pipeline_ref"],
        plan_version=m["plan_version"],
        state=JobState(m["state"]),
        generation=m["generation"],
        last_error=m["last_error"],
        options=m["options"] or {},
        created=m["created"],
        updated=m["updated"],
    )


def _plan(m: RowMapping) -> PlanRecord:
    return PlanRecord(
        plan_version=m["plan_version"],
        pipeline_name=m["pipeline_name"],
        plan_json=m["plan_json"],
        state_layout=m["state_layout"] or {},
        created=m["created"],
    )


def _transition(m: RowMapping) -> TransitionRecord:
    return TransitionRecord(
        id=m["id"],
        job=m["job"],
        from_state=JobState(m["from_state"]) if m["from_state"] else None,
        to_state=JobState(m["to_state"]),
        reason=m["reason"],
        at=m["at"],
    )


def _cycle(m: RowMapping) -> CycleRecord:
    return CycleRecord(
        id=m["id"],
        job=m["job"],
        window=m["window"],
        attempt=m["attempt"],
        generation=m["generation"],
        plan_version=m["plan_version"],
        state=CycleState(m["state"]),
        manifest=m["manifest"] or {},
        rows_in=m["rows_in"],
        rows_out=m["rows_out"],
        late_rows=m["late_rows"],
        timings=m["timings"] or {},
        error=m["error"],
        started=m["started"],
        finished=m["finished"],
    )


def _checkpoint(m: RowMapping) -> CheckpointRecord:
    return CheckpointRecord(
        id=m["id"],
        job=m["job"],
        window=m["window"],
        plan_version=m["plan_version"],
        cycle_id=m["cycle_id"],
        positions=m["positions"] or {},
        snapshot_uri=m["snapshot_uri"],
        snapshot_manifest=m["snapshot_manifest"] or {},
        sink_commits=m["sink_commits"],
        rows_in=m["rows_in"],
        rows_out=m["rows_out"],
        status=CheckpointStatus(m["status"]),
        created=m["created"],
    )


def _first(conn: Connection, query: sa.Executable) -> RowMapping | None:
    return conn.execute(query).mappings().first()


def _rows(conn: Connection, query: sa.Executable) -> list[RowMapping]:
    return list(conn.execute(query).mappings())


def normalize_url(url: str | Path) -> str:
    """Turn a catalog location into a SQLAlchemy URL.

    A plain path becomes a SQLite file URL; ``postgresql://`` and ``postgres://`` get the
    psycopg 3 driver; other URLs are returned unchanged.
    """
    text = str(url)
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    scheme, rest = text.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return text


def _windows_text(windows: list[int]) -> str:
    if not windows:
        return "it has no complete checkpoints"
    shown = ", ".join(str(w) for w in windows[-20:])
    return f"its complete checkpoints are windows {'..., ' if len(windows) > 20 else ''}{shown}"


class Catalog:
    """The SQL catalog of jobs, plans, transitions, cycles and checkpoints.

    ``url`` is a SQLAlchemy URL (``sqlite:////abs/path/catalog.db``,
    ``postgresql+psycopg://user@host:port/db``; ``postgresql://`` is rewritten to psycopg)
    or a plain file path (a SQLite file). Tables are created when missing.
    """

    def __init__(self, url: str | Path):
        self._url = sa.make_url(normalize_url(url))
        backend = self._url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise CatalogError(
                f"unsupported catalog URL '{self.url}': use a SQLite file "
                "(sqlite:////abs/path/catalog.db) or PostgreSQL (postgresql+psycopg://user@host/db)"
            )
        self._engine = self._make_engine()
        self._create_schema()

    @property
    def url(self) -> str:
        """The catalog URL, with any password hidden."""
        return self._url.render_as_string(hide_password=True)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and tools; the methods below are the API)."""
        return self._engine

    def close(self) -> None:
        """Release the catalog's database connections."""
        self._engine.dispose()

    # -- connections and transactions ------------------------------------------------

    def _make_engine(self) -> Engine:
        if self._url.get_backend_name() == "postgresql":
            return sa.create_engine(self._url, pool_pre_ping=True)
        database = self._url.database
        memory = not database or database == ":memory:" or database.startswith("file::memory:")
        if memory:
            engine = sa.create_engine(
                self._url, poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        else:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(
                self._url,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            )

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own is deferred
            # and skips DDL), and let writers wait for each other instead of failing.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front, so read-then-write transactions of two
            # processes serialise instead of deadlocking; readers use WAL snapshots.
            read_only = conn.get_execution_options().get("lockgate_read_only", False)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            conn.execution_options(lockgate_read_only=True)
            with conn.begin():
                yield conn

    def _create_schema(self) -> None:
        with self._write() as conn:
            if conn.dialect.name == "postgresql":
                # Two processes opening a fresh catalog must not race on CREATE TABLE.
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('lockgate_catalog_schema'))"))
            metadata.create_all(conn, checkfirst=True)
            version = conn.execute(sa.select(sa.func.max(schema_table.c.version))).scalar()
            if version is None:
                conn.execute(sa.insert(schema_table).values(version=SCHEMA_VERSION))
            elif version > SCHEMA_VERSION:
                raise CatalogError(
                    f"the catalog at '{self.url}' has schema version {version}, newer than this "
                    f"Lockgate understands ({SCHEMA_VERSION}); upgrade lockgate"
                )

    # -- jobs --------------------------------------------------------------------------

    def _job_not_found(self, conn: Connection, name: str) -> JobNotFoundError:
        names = list(conn.execute(sa.select(jobs_table.c.name).order_by(jobs_table.c.name)).scalars())
        if not names:
            return JobNotFoundError(f"job '{name}' not found: the catalog at '{self.url}' has no jobs yet")
        shown = ", ".join(names[:20]) + (f" (and {len(names) - 20} more)" if len(names) > 20 else "")
        return JobNotFoundError(f"job '{name}' not found; known jobs: {shown}")

    def _lock_job(self, conn: Connection, name: str) -> RowMapping:
        """The job's row, locked for the rest of the transaction (PostgreSQL row lock;
        SQLite write transactions hold the database lock already)."""
        query = sa.select(jobs_table).where(jobs_table.c.name == name).with_for_update()
        row = _first(conn, query)
        if row is None:
            raise self._job_not_found(conn, name)
        return row

    def _require_job(self, conn: Connection, name: str) -> RowMapping:
        row = _first(conn, sa.select(jobs_table).where(jobs_table.c.name == name))
        if row is None:
            raise self._job_not_found(conn, name)
        return row

    def _check_generation(self, conn: Connection, name: str, generation: int) -> RowMapping:
        """Lock the job's row and raise FencedError unless ``generation`` is its current one."""
        row = self._lock_job(conn, name)
        if row["generation"] != generation:
            raise FencedError(
                f"job '{name}': generation {generation} is fenced, the job's current generation is "
                f"{row['generation']} (another runner took the job over); this runner must stop "
                "without writing"
            )
        return row

    def ensure_job(self, name: str, pipeline_ref: str, options: Mapping[str, Any] | None = None) -> JobRecord:
        """Create the job in CREATED, or return the existing one with ``pipeline_ref`` (and
        ``options``, when given) updated."""
        if not name or not name.strip():
            raise InvalidArgumentError("a job name must not be empty")
        try:
            return self._ensure_job(name, pipeline_ref, options)
        except IntegrityError:
            # Another process created the job between our read and insert (PostgreSQL).
            return self._ensure_job(name, pipeline_ref, options)

    def _ensure_job(self, name: str, pipeline_ref: str, options: Mapping[str, Any] | None) -> JobRecord:
        with self._write() as conn:
            row = _first(conn, sa.select(jobs_table).where(jobs_table.c.name == name).with_for_update())
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
            return _job(self._require_job(conn, name))

    def get_job(self, name: str) -> JobRecord:
        """The job; JobNotFoundError (naming the known jobs) when there is none."""
        with self._read() as conn:
            return _job(self._require_job(conn, name))

    def list_jobs(self) -> list[JobRecord]:
        """All jobs, by name."""
        with self._read() as conn:
            rows = _rows(conn, sa.select(jobs_table).order_by(jobs_table.c.name))
            return [_job(r) for r in rows]

    def delete_job(self, name: str) -> list[str]:
        """Delete the job with its transitions, cycles and checkpoints (plans stay).

        Returns the snapshot URIs its checkpoints referred to, for the caller to delete.
        """
        with self._write() as conn:
            self._lock_job(conn, name)
            uris = conn.execute(
                sa.select(checkpoints_table.c.snapshot_uri)
                .where(checkpoints_table.c.job == name, checkpoints_table.c.snapshot_uri.is_not(None))
                .order_by(checkpoints_table.c.window, checkpoints_table.c.id)
            ).scalars()
            result = list(dict.fromkeys(uris))
            for table in (checkpoints_table, cycles_table, transitions_table, jobs_table):
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
        current generation. Moving to FAILED stores ``reason`` as the job's last_error.
        """
        new = parse_state(to_state)
        with self._write() as conn:
            row = (
                self._lock_job(conn, name)
                if expected_generation is None
                else self._check_generation(conn, name, expected_generation)
            )
            old = JobState(row["state"])
            check_transition(old, new, job=name)
            now = utcnow()
            values: dict[str, Any] = {"state": new.value, "updated": now}
            if new is JobState.FAILED:
                values["last_error"] = reason
            conn.execute(sa.update(jobs_table).where(jobs_table.c.name == name).values(**values))
            conn.execute(
                sa.insert(transitions_table).values(
                    job=name, from_state=old.value, to_state=new.value, reason=reason or "", at=now
                )
            )
            return _job(self._require_job(conn, name))

    def transitions(self, name: str) -> list[TransitionRecord]:
        """The job's recorded state changes, oldest first."""
        with self._read() as conn:
            self._require_job(conn, name)
            rows = _rows(
                conn,
                sa.select(transitions_table)
                .where(transitions_table.c.job == name)
                .order_by(transitions_table.c.id),
            )
            return [_transition(r) for r in rows]

    def acquire(self, name: str) -> int:
        """Increment and return the job's generation: the caller becomes the job's runner,
        and every fenced write of an older generation is refused from now on."""
        with self._write() as conn:
            row = self._lock_job(conn, name)
            generation = row["generation"] + 1
            conn.execute(
                sa.update(jobs_table)
                .where(jobs_table.c.name == name)
                .values(generation=generation, updated=utcnow())
            )
            return generation

    # -- plans -------------------------------------------------------------------------

    def save_plan(
        self, plan_version: str, pipeline_name: str, plan_json: str, state_layout: Mapping[str, Any]
    ) -> PlanRecord:
        """Store a plan under its version (idempotent); CatalogError if the version is
        already stored with a different plan JSON."""
        try:
            row = self._save_plan(plan_version, pipeline_name, plan_json, state_layout)
        except IntegrityError:  # another process stored it between our read and insert
            row = self._save_plan(plan_version, pipeline_name, plan_json, state_layout)
        if row["plan_json"] != plan_json:
            raise CatalogError(
                f"plan version '{plan_version}' is already stored with a different plan JSON; a plan "
                "version must be the hash of its plan"
            )
        return _plan(row)

    def _save_plan(
        self, plan_version: str, pipeline_name: str, plan_json: str, state_layout: Mapping[str, Any]
    ) -> RowMapping:
        where = plans_table.c.plan_version == plan_version
        with self._write() as conn:
            row = _first(conn, sa.select(plans_table).where(where))
            if row is not None:
                return row
            conn.execute(
                sa.insert(plans_table).values(
                    plan_version=plan_version,
                    pipeline_name=pipeline_name,
                    plan_json=plan_json,
                    state_layout=dict(state_layout),
                    created=utcnow(),
                )
            )
            return _rows(conn, sa.select(plans_table).where(where))[0]

    def get_plan(self, plan_version: str) -> PlanRecord:
        """The plan stored under ``plan_version``; PlanNotFoundError when there is none."""
        with self._read() as conn:
            row = _first(conn, sa.select(plans_table).where(plans_table.c.plan_version == plan_version))
            if row is None:
                raise PlanNotFoundError(
                    f"plan version '{plan_version}' not found in the catalog; compile the pipeline first"
                )
            return _plan(row)

    def set_job_plan(self, name: str, plan_version: str) -> JobRecord:
        """Make ``plan_version`` (already saved) the job's current plan."""
        with self._write() as conn:
            self._lock_job(conn, name)
            exists = conn.execute(
                sa.select(plans_table.c.plan_version).where(plans_table.c.plan_version == plan_version)
            ).first()
            if exists is None:
                raise PlanNotFoundError(
                    f"job '{name}': plan version '{plan_version}' not found in the catalog; save it first"
                )
            conn.execute(
                sa.update(jobs_table)
                .where(jobs_table.c.name == name)
                .values(plan_version=plan_version, updated=utcnow())
            )
            return _job(self._require_job(conn, name))

    # -- cycles ------------------------------------------------------------------------

    def _cycle_row(self, conn: Connection, cycle_id: int) -> RowMapping:
        row = _first(conn, sa.select(cycles_table).where(cycles_table.c.id == cycle_id))
        if row is None:
            raise CycleNotFoundError(f"cycle {cycle_id} not found in the catalog")
        return row

    def _complete_row(self, conn: Connection, job: str, window: int) -> RowMapping | None:
        return _first(
            conn,
            sa.select(checkpoints_table).where(
                checkpoints_table.c.job == job,
                checkpoints_table.c.window == window,
                checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
            ),
        )

    def begin_cycle(self, job: str, window: int, generation: int, plan_version: str | None) -> CycleRecord:
        """Record a new RUNNING attempt at ``window`` (attempt = 1 + earlier attempts).

        Fenced. CheckpointExistsError when the window is complete already.
        """
        with self._write() as conn:
            self._check_generation(conn, job, generation)
            if self._complete_row(conn, job, window) is not None:
                raise CheckpointExistsError(
                    f"job '{job}': window {window} is complete already; run the next window, or roll "
                    f"back with `lockgate restore {job} --window W` (W < {window}) to run it again"
                )
            previous = conn.execute(
                sa.select(sa.func.max(cycles_table.c.attempt)).where(
                    cycles_table.c.job == job, cycles_table.c.window == window
                )
            ).scalar()
            result = conn.execute(
                sa.insert(cycles_table).values(
                    job=job,
                    window=window,
                    attempt=(previous or 0) + 1,
                    generation=generation,
                    plan_version=plan_version,
                    state=CycleState.RUNNING.value,
                    manifest=None,
                    rows_in=0,
                    rows_out=0,
                    late_rows=0,
                    timings={},
                    error=None,
                    started=utcnow(),
                    finished=None,
                )
            )
            return _cycle(self._cycle_row(conn, result.inserted_primary_key[0]))

    def _expect_cycle_state(self, row: RowMapping, action: str, *states: CycleState) -> None:
        if row["state"] not in {s.value for s in states}:
            wanted = " or ".join(s.value for s in states)
            raise CycleStateError(
                f"job '{row['job']}': cannot {action} cycle {row['id']} (window {row['window']}, attempt "
                f"{row['attempt']}): it is {row['state']}, not {wanted}"
            )

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
        with self._write() as conn:
            job = self._cycle_row(conn, cycle_id)["job"]
            self._check_generation(conn, job, generation)
            row = self._cycle_row(conn, cycle_id)
            self._expect_cycle_state(row, "stage", CycleState.RUNNING)
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id == cycle_id)
                .values(
                    state=CycleState.STAGED.value,
                    manifest=dict(manifest),
                    rows_in=rows_in,
                    rows_out=rows_out,
                    late_rows=late_rows,
                    timings={**(row["timings"] or {}), **(timings or {})},
                )
            )
            return _cycle(self._cycle_row(conn, cycle_id))

    def fail_cycle(self, cycle_id: int, error: str) -> CycleRecord:
        """RUNNING or STAGED -> FAILED with ``error``. A cycle already FAILED or ABORTED is
        returned unchanged; a COMMITTED one is refused with CycleStateError."""
        with self._write() as conn:
            row = self._cycle_row(conn, cycle_id)
            if row["state"] in (CycleState.FAILED.value, CycleState.ABORTED.value):
                return _cycle(row)
            self._expect_cycle_state(row, "fail", CycleState.RUNNING, CycleState.STAGED)
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id == cycle_id)
                .values(state=CycleState.FAILED.value, error=error, finished=utcnow())
            )
            return _cycle(self._cycle_row(conn, cycle_id))

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
            self._lock_job(conn, job)
            where = sa.and_(cycles_table.c.job == job, open_cycles)
            ids = list(conn.execute(sa.select(cycles_table.c.id).where(where)).scalars())
            if not ids:
                return []
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id.in_(ids))
                .values(state=CycleState.ABORTED.value, error=reason, finished=utcnow())
            )
            rows = _rows(
                conn, sa.select(cycles_table).where(cycles_table.c.id.in_(ids)).order_by(cycles_table.c.id)
            )
            return [_cycle(r) for r in rows]

    def staged_cycles(self, job: str) -> list[CycleRecord]:
        """The job's STAGED cycles (staged, not yet committed), by window then attempt."""
        with self._read() as conn:
            self._require_job(conn, job)
            rows = _rows(
                conn,
                sa.select(cycles_table)
                .where(cycles_table.c.job == job, cycles_table.c.state == CycleState.STAGED.value)
                .order_by(cycles_table.c.window, cycles_table.c.attempt),
            )
            return [_cycle(r) for r in rows]

    def list_cycles(self, job: str, limit: int = 100) -> list[CycleRecord]:
        """The job's newest ``limit`` cycles, newest first."""
        with self._read() as conn:
            self._require_job(conn, job)
            rows = _rows(
                conn,
                sa.select(cycles_table)
                .where(cycles_table.c.job == job)
                .order_by(cycles_table.c.id.desc())
                .limit(limit),
            )
            return [_cycle(r) for r in rows]

    def get_cycle(self, cycle_id: int) -> CycleRecord:
        """One cycle by id; CycleNotFoundError when there is none."""
        with self._read() as conn:
            return _cycle(self._cycle_row(conn, cycle_id))

    def update_cycle_timings(self, cycle_id: int, timings: Mapping[str, float]) -> CycleRecord:
        """Merge ``timings`` (phase -> ms) into the cycle's timings."""
        with self._write() as conn:
            row = self._cycle_row(conn, cycle_id)
            conn.execute(
                sa.update(cycles_table)
                .where(cycles_table.c.id == cycle_id)
                .values(timings={**(row["timings"] or {}), **timings})
            )
            return _cycle(self._cycle_row(conn, cycle_id))

    # -- checkpoints -------------------------------------------------------------------

    def _complete_windows(self, conn: Connection, job: str) -> list[int]:
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
                self._check_generation(conn, job, generation)
                cycle = self._cycle_row(conn, cycle_id)
                if cycle["job"] != job or cycle["window"] != window:
                    raise CycleStateError(
                        f"cycle {cycle_id} is window {cycle['window']} of job '{cycle['job']}', "
                        f"not window {window} of job '{job}'"
                    )
                self._expect_cycle_state(cycle, "commit", CycleState.STAGED)
                if self._complete_row(conn, job, window) is not None:
                    raise self._exists(job, window)
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
                return _checkpoint(
                    _rows(conn, sa.select(checkpoints_table).where(checkpoints_table.c.id == new_id))[0]
                )
        except IntegrityError as exc:  # a concurrent writer won the race (unique index)
            raise self._exists(job, window) from exc

    @staticmethod
    def _exists(job: str, window: int) -> CheckpointExistsError:
        return CheckpointExistsError(
            f"job '{job}': window {window} already has a complete checkpoint; it was committed by "
            "another attempt. Go on with the next window"
        )

    def last_checkpoint(self, job: str) -> CheckpointRecord | None:
        """The job's COMPLETE checkpoint of the highest window, or None."""
        with self._read() as conn:
            self._require_job(conn, job)
            row = _first(
                conn,
                sa.select(checkpoints_table)
                .where(
                    checkpoints_table.c.job == job,
                    checkpoints_table.c.status == CheckpointStatus.COMPLETE.value,
                )
                .order_by(checkpoints_table.c.window.desc())
                .limit(1),
            )
            return _checkpoint(row) if row is not None else None

    def get_checkpoint(self, job: str, window: int) -> CheckpointRecord:
        """The COMPLETE checkpoint of ``window``; CheckpointNotFoundError naming the windows
        that have one (and saying so when this window's checkpoint expired or was rolled back)."""
        with self._read() as conn:
            self._require_job(conn, job)
            row = self._complete_row(conn, job, window)
            if row is not None:
                return _checkpoint(row)
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
                f"{_windows_text(self._complete_windows(conn, job))}"
            )

    def list_checkpoints(self, job: str, include_inactive: bool = False) -> list[CheckpointRecord]:
        """The job's COMPLETE checkpoints (all statuses with ``include_inactive``), by window."""
        with self._read() as conn:
            self._require_job(conn, job)
            query = sa.select(checkpoints_table).where(checkpoints_table.c.job == job)
            if not include_inactive:
                query = query.where(checkpoints_table.c.status == CheckpointStatus.COMPLETE.value)
            rows = _rows(conn, query.order_by(checkpoints_table.c.window, checkpoints_table.c.id))
            return [_checkpoint(r) for r in rows]

    def rollback_to(self, job: str, window: int, generation: int) -> list[int]:
        """Mark the job's COMPLETE checkpoints after ``window`` ROLLED_BACK; return their windows.

        Fenced. ``window`` must have a COMPLETE checkpoint (CheckpointNotFoundError). Cycles
        are not touched: call :meth:`abort_open_cycles` with ``staged_after=window``.
        """
        with self._write() as conn:
            self._check_generation(conn, job, generation)
            if self._complete_row(conn, job, window) is None:
                raise CheckpointNotFoundError(
                    f"job '{job}' cannot roll back to window {window}: it has no complete checkpoint; "
                    f"{_windows_text(self._complete_windows(conn, job))}"
                )
            later = [w for w in self._complete_windows(conn, job) if w > window]
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
            self._lock_job(conn, job)
            windows = self._complete_windows(conn, job)
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
            rows = _rows(
                conn,
                sa.select(checkpoints_table)
                .where(checkpoints_table.c.id.in_(ids))
                .order_by(checkpoints_table.c.window),
            )
            return [_checkpoint(r) for r in rows]
