"""Connecting to the catalog: URL normalisation, the SQLAlchemy engine and its SQLite
settings (WAL mode, write lock taken up front, busy timeout), and row fetching helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping
from sqlalchemy.pool import StaticPool

from ...errors import InvalidArgumentError

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite catalog write waits for another process's write lock, unless the URL
says otherwise with ``?timeout=SECONDS``."""


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


def _query(url: sa.URL, key: str) -> str | None:
    value = url.query.get(key)
    return value[-1] if isinstance(value, tuple) else value


def is_memory(url: sa.URL) -> bool:
    """Whether a SQLite URL names an in-memory database."""
    database = url.database
    return (
        not database
        or database == ":memory:"
        or database.startswith("file::memory:")
        or _query(url, "mode") == "memory"
    )


def sqlite_file(url: sa.URL) -> Path | None:
    """The file a SQLite URL names (also for ``file:PATH?...&uri=true`` URLs); None in memory."""
    if is_memory(url):
        return None
    database = str(url.database)
    if _query(url, "uri") in ("true", "True", "1") and database.startswith("file:"):
        database = database.removeprefix("file:")
        if database.startswith("//"):  # file://localhost/abs/path or file:///abs/path
            database = "/" + database[2:].partition("/")[2]
    return Path(database).resolve()


def busy_timeout_s(url: sa.URL) -> float:
    """The SQLite busy timeout in seconds: the URL's ``timeout`` parameter, else the default."""
    value = _query(url, "timeout")
    if value is None:
        return SQLITE_BUSY_TIMEOUT_MS / 1000
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise InvalidArgumentError(
            f"catalog URL parameter timeout={value!r}: use a number of seconds >= 0 (default "
            f"{SQLITE_BUSY_TIMEOUT_MS // 1000})"
        )
    return seconds


def make_engine(url: sa.URL) -> Engine:
    """The engine of a PostgreSQL or SQLite catalog; a SQLite file's folder is created first
    (OSError when it cannot be)."""
    if url.get_backend_name() == "postgresql":
        return sa.create_engine(url, pool_pre_ping=True)
    path = sqlite_file(url)
    if path is None:
        engine = sa.create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url, connect_args={"timeout": busy_timeout_s(url), "check_same_thread": False}
        )
    busy_ms = int(busy_timeout_s(url) * 1000)

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's own is deferred
        # and skips DDL), and let writers wait for each other instead of failing.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if path is not None:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front, so read-then-write transactions of two
        # processes serialise instead of deadlocking; readers use WAL snapshots.
        read_only = conn.get_execution_options().get("lockgate_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def fetch_one(conn: Connection, query: sa.Executable) -> RowMapping | None:
    """The first row of ``query``, or None."""
    return conn.execute(query).mappings().first()


def fetch_all(conn: Connection, query: sa.Executable) -> list[RowMapping]:
    """Every row of ``query``."""
    return list(conn.execute(query).mappings())
