"""Arrow-native PostgreSQL helpers against a real PostgreSQL (fresh database per test)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pyarrow as pa
import pytest

from lockgate.errors import LockgateError
from lockgate.runtime import postgres as pg

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def table() -> str:
    """A table name of this test's own (the database is shared by the test session)."""
    return f"events_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def own_db(pg_url):
    """A database of this test's own, for tests that change database-wide settings."""
    name = f"lockgate_tz_{uuid.uuid4().hex[:10]}"
    admin = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sql(url: str, *statements: str, params: list | None = None) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for s in statements:
            conn.execute(s, params)


def _events(url: str, table: str, column_type: str = "TIMESTAMPTZ") -> None:
    _sql(url, f'CREATE TABLE {table} (id BIGINT, name TEXT, ts {column_type}, "Amount $" DOUBLE PRECISION)')
    rows = [
        (4, "end", T0 + timedelta(minutes=1)),  # exactly the end bound: excluded
        (2, "mid", T0 + timedelta(seconds=30)),
        (1, "start", T0),  # exactly the start bound: included
        (0, "before", T0 - timedelta(microseconds=1)),
        (3, "last", T0 + timedelta(minutes=1) - timedelta(microseconds=1)),
    ]
    with psycopg.connect(url, autocommit=True) as conn:
        for i, name, ts in rows:
            value = ts if column_type == "TIMESTAMPTZ" else ts.replace(tzinfo=None)
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", (i, name, value, i * 1.5))


def test_normalize_url():
    assert pg.normalize_url("postgresql://u@h:5432/d") == "postgresql://u@h:5432/d"
    assert (
        pg.normalize_url("postgresql+psycopg://u:p@h/d?sslmode=disable")
        == "postgresql://u:p@h/d?sslmode=disable"
    )
    assert pg.normalize_url("postgres://u@h/d") == "postgresql://u@h/d"
    with pytest.raises(LockgateError, match="unsupported scheme"):
        pg.normalize_url("mysql://u@h/d")
    with pytest.raises(LockgateError, match="expected postgresql://"):
        pg.normalize_url("just-a-name")


def test_connect_accepts_sqlalchemy_url_and_runs_in_utc(pg_url):
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    conn = pg.connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT current_setting('TimeZone')")
        assert cur.fetchone()[0] == "UTC"
    finally:
        conn.close()


def test_read_slice_start_inclusive_end_exclusive_ordered(pg_url, table):
    _events(pg_url, table)
    t = pg.read_slice(pg_url, table, "ts", T0, T0 + timedelta(minutes=1))
    assert t.column("name").to_pylist() == ["start", "mid", "last"]
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert t.column("ts").to_pylist()[0] == T0
    assert t.column("Amount $").to_pylist() == [1.5, 3.0, 4.5]


def test_read_slice_columns_and_empty_slice(pg_url, table):
    _events(pg_url, table)
    t = pg.read_slice(pg_url, table, "ts", T0, T0 + timedelta(seconds=30), columns=["id", "Amount $"])
    assert t.column_names == ["id", "Amount $"]
    assert t.column("id").to_pylist() == [1]
    empty = pg.read_slice(pg_url, table, "ts", T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert empty.num_rows == 0
    assert empty.column_names == ["id", "name", "ts", "Amount $"]


def test_read_slice_time_zones_of_bounds(pg_url, table):
    _events(pg_url, table)
    plus2 = timezone(timedelta(hours=2))
    # the same instants written in +02:00, and as naive UTC
    aware = pg.read_slice(
        pg_url, table, "ts", T0.astimezone(plus2), (T0 + timedelta(seconds=30)).astimezone(plus2)
    )
    naive = pg.read_slice(pg_url, table, "ts", T0.replace(tzinfo=None), T0.replace(tzinfo=None, second=30))
    assert aware.column("name").to_pylist() == ["start"]
    assert naive.column("name").to_pylist() == ["start"]
    # 10:00 in +02:00 is 08:00 UTC: nothing there
    early = pg.read_slice(pg_url, table, "ts", T0.replace(tzinfo=plus2), T0.replace(tzinfo=plus2, minute=1))
    assert early.num_rows == 0


def test_read_slice_ignores_database_time_zone(own_db):
    """A database whose default TimeZone is not UTC reads the same slices."""
    db = own_db.rsplit("/", 1)[1]
    _sql(own_db, f"ALTER DATABASE \"{db}\" SET TimeZone = 'America/New_York'")
    with psycopg.connect(own_db) as conn:  # the setting is in force for new sessions
        assert conn.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "America/New_York"
    _events(own_db, "tz_events")
    _events(own_db, "naive_events", column_type="TIMESTAMP")
    for table in ("tz_events", "naive_events"):
        t = pg.read_slice(own_db, table, "ts", T0, T0 + timedelta(minutes=1))
        assert t.column("name").to_pylist() == ["start", "mid", "last"], table
    naive = pg.read_slice(own_db, "naive_events", "ts", T0, T0 + timedelta(seconds=1))
    assert naive.schema.field("ts").type == pa.timestamp("us")
    assert naive.column("ts").to_pylist() == [T0.replace(tzinfo=None)]
    assert pg.max_event_time(own_db, "naive_events", "ts") == T0 + timedelta(minutes=1)


def test_quoted_identifiers_and_schema_qualified_table(pg_url):
    schema = f"Sales {uuid.uuid4().hex[:6]}"
    _sql(
        pg_url,
        f'CREATE SCHEMA "{schema}"',
        f'CREATE TABLE "{schema}"."Orders ""2026""" ("Event Time" TIMESTAMPTZ, "select" INT)',
        f'INSERT INTO "{schema}"."Orders ""2026""" VALUES (\'2026-01-01T10:00:00Z\', 7)',
    )
    t = pg.read_slice(pg_url, f'{schema}.Orders "2026"', "Event Time", T0, T0 + timedelta(seconds=1))
    assert t.column("select").to_pylist() == [7]
    assert pg.table_schema(pg_url, f'{schema}.Orders "2026"').names == ["Event Time", "select"]


def test_injection_is_only_a_missing_name(pg_url, table):
    _events(pg_url, table)
    with pytest.raises(Exception, match="does not exist"):
        pg.read_slice(pg_url, f"{table}; DROP TABLE {table}; --", "ts", T0, T0 + timedelta(minutes=1))
    with pytest.raises(Exception, match="does not exist"):
        pg.read_slice(pg_url, table, 'ts" IS NOT NULL OR "ts', T0, T0 + timedelta(minutes=1))
    assert pg.read_slice(pg_url, table, "ts", T0, T0 + timedelta(minutes=1)).num_rows == 3


def test_table_schema(pg_url, table):
    _events(pg_url, table)
    schema = pg.table_schema(pg_url, table)
    assert schema.names == ["id", "name", "ts", "Amount $"]
    assert schema.field("id").type == pa.int64()
    assert schema.field("name").type == pa.string()
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("Amount $").type == pa.float64()
    with pytest.raises(LockgateError, match="does not exist"):
        pg.table_schema(pg_url, f"{table}_nope")


def test_max_event_time(pg_url, table):
    e, n = f"{table}_e", f"{table}_n"
    _sql(pg_url, f"CREATE TABLE {e} (ts TIMESTAMPTZ)", f"CREATE TABLE {n} (ts TIMESTAMP)")
    assert pg.max_event_time(pg_url, e, "ts") is None
    _sql(pg_url, f"INSERT INTO {e} VALUES ('2026-01-01T12:00:00+02:00'), ('2026-01-01T09:00:00Z')")
    _sql(pg_url, f"INSERT INTO {n} VALUES ('2026-01-01T10:00:00'), ('2026-01-01T09:00:00')")
    assert pg.max_event_time(pg_url, e, "ts") == datetime(2026, 1, 1, 10, tzinfo=UTC)
    got = pg.max_event_time(pg_url, n, "ts")
    assert got == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert got.tzinfo is not None
