"""The catalog's tables (SQLAlchemy Core, the same on SQLite and PostgreSQL) and their creation.

``lg_schema`` holds the schema version; :func:`create_schema` creates missing tables and
refuses a catalog written by a newer Lockgate.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ...errors import CatalogError
from .records import CheckpointStatus

SCHEMA_VERSION = 1
"""The catalog schema this code writes; a catalog with a newer one is refused."""


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

supersteps_table = sa.Table(
    "lg_supersteps",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.String(255), nullable=False),
    sa.Column("window", sa.BigInteger, nullable=False, quote=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("cycle_id", sa.Integer, nullable=False),
    sa.Column("operator", sa.String(255), nullable=False),
    sa.Column("superstep", sa.Integer, nullable=False),
    sa.Column("messages_sent", sa.BigInteger, nullable=False, default=0),
    sa.Column("vertices_changed", sa.BigInteger, nullable=False, default=0),
    sa.Column("active_vertices", sa.BigInteger, nullable=False, default=0),
    sa.Column("elapsed_ms", sa.Float, nullable=False, default=0.0),
    sa.Column("halted_by", sa.String(32), nullable=True),
    sa.Column("checkpointed", sa.Boolean, nullable=False, default=True),
    sa.Column("resumed", sa.Boolean, nullable=False, default=False),
    sa.Index("ix_lg_supersteps_job_window", "job", "window"),
)
"""The supersteps of graph operators' iteration cycles, per cycle attempt (``resumed``: done by an
earlier attempt of the window, which this one resumed from)."""

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


def create_schema(conn: Connection, url: str) -> None:
    """Create the missing tables and record the schema version, in the caller's write
    transaction; CatalogError when the catalog at ``url`` has a newer schema."""
    if conn.dialect.name == "postgresql":
        # Two processes opening a fresh catalog must not race on CREATE TABLE.
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('lockgate_catalog_schema'))"))
    metadata.create_all(conn, checkfirst=True)
    version = conn.execute(sa.select(sa.func.max(schema_table.c.version))).scalar()
    if version is None:
        conn.execute(sa.insert(schema_table).values(version=SCHEMA_VERSION))
    elif version > SCHEMA_VERSION:
        raise CatalogError(
            f"the catalog at '{url}' has schema version {version}, newer than this "
            f"Lockgate understands ({SCHEMA_VERSION}); upgrade lockgate"
        )
