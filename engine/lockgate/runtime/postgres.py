"""Arrow-native PostgreSQL helpers (ADBC), shared by the Postgres source and sink.

No Spark here: the controller, which has no SparkSession, commits Postgres sinks with
these helpers. Every connection runs with the session time zone set to UTC, so a
``TIMESTAMP`` (without time zone) is read and compared as UTC wall-clock time and a
``TIMESTAMPTZ`` as an instant; naive ``datetime`` arguments are taken as UTC.

Connections come from :func:`connect` in DB-API mode (autocommit off): ADBC's
PostgreSQL driver opens a transaction at once and after every ``commit()`` or
``rollback()``, and bulk ingestion (``COPY``) runs inside it; closing a connection
without ``commit()`` rolls the transaction back.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pyarrow as pa

from lockgate.errors import LockgateError, SourceRefusedError, SourceUnavailableError
from lockgate.runtime.libpq_output import quiet_libpq

_SCHEMES = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "postgresql+psycopg2": "postgresql",
    "postgresql+psycopg3": "postgresql",
    "postgresql+adbc": "postgresql",
    "postgres+psycopg": "postgresql",
}

UTC_OPTION = "-c TimeZone=UTC"

#: statement options for DML/DDL: ADBC wraps plain queries in ``COPY (...) TO STDOUT``
#: by default, which PostgreSQL refuses for some statements.
NO_COPY = {"adbc.postgresql.use_copy": "false"}


def normalize_url(url: str) -> str:
    """A libpq URI from a ``postgresql://``, ``postgres://`` or SQLAlchemy-style
    ``postgresql+psycopg://`` URL (the driver part is dropped)."""
    if not isinstance(url, str) or "://" not in url:
        raise LockgateError(
            f"PostgreSQL URL {url!r}: expected postgresql://user@host:port/database "
            "(postgresql+psycopg:// is accepted too)"
        )
    scheme, rest = url.split("://", 1)
    norm = _SCHEMES.get(scheme.lower())
    if norm is None:
        raise LockgateError(
            f"PostgreSQL URL {url!r}: unsupported scheme {scheme!r}; use postgresql:// "
            "or postgresql+psycopg://"
        )
    return f"{norm}://{rest}"


def _with_utc(url: str) -> str:
    """``url`` with ``options=-c TimeZone=UTC`` added to its query (kept if present)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    opts = [v for k, v in query if k == "options"]
    if any("timezone" in v.lower() for v in opts):
        return url
    rest = [(k, v) for k, v in query if k != "options"]
    merged = " ".join([*opts, UTC_OPTION])
    return urlunsplit(parts._replace(query=urlencode([*rest, ("options", merged)], quote_via=quote)))


def connect(url: str, *, autocommit: bool = False) -> Any:
    """An ADBC DB-API connection (``adbc_driver_postgresql.dbapi``), session time zone UTC.

    With ``autocommit=False`` (the default) every statement runs in the connection's
    open transaction until ``commit()``; closing without commit rolls back.
    """
    import adbc_driver_postgresql.dbapi as pgdbapi

    with quiet_libpq():
        return pgdbapi.connect(_with_utc(normalize_url(url)), autocommit=autocommit)


# -- identifiers ---------------------------------------------------------------------
def quote_ident(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (embedded quotes doubled)."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise LockgateError(f"invalid SQL identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def split_table(table: str) -> tuple[str | None, str]:
    """``(schema, name)`` of ``table`` or ``schema.table``."""
    if not isinstance(table, str) or not table.strip():
        raise LockgateError(f"invalid table name {table!r}")
    if "." in table:
        schema, name = table.split(".", 1)
        if not schema or not name:
            raise LockgateError(f"invalid table name {table!r}: use table or schema.table")
        return schema, name
    return None, table


def quote_table(table: str) -> str:
    """``table`` or ``schema.table`` quoted for SQL."""
    schema, name = split_table(table)
    return quote_ident(name) if schema is None else f"{quote_ident(schema)}.{quote_ident(name)}"


def table_exists(cursor: Any, table: str) -> bool:
    """Whether ``table`` (or ``schema.table``) exists, seen through ``cursor``."""
    cursor.execute("SELECT to_regclass($1) IS NOT NULL", (quote_table(table),))
    return bool(cursor.fetchone()[0])


# -- time ----------------------------------------------------------------------------
def utc_naive(t: datetime) -> datetime:
    """``t`` as naive UTC wall-clock time (a naive ``t`` is taken as UTC already)."""
    if not isinstance(t, datetime):
        raise TypeError(f"expected a datetime, got {type(t).__name__}")
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _time_params(*times: datetime) -> pa.RecordBatch:
    arrays = [pa.array([utc_naive(t)], pa.timestamp("us")) for t in times]
    return pa.record_batch(arrays, names=[f"p{i}" for i in range(len(times))])


# -- reading -------------------------------------------------------------------------
@contextlib.contextmanager
def _reading(url: str, table: str, doing: str, role: str = "source") -> Iterator[None]:
    """Driver errors of a source read as one clear Lockgate error naming the database."""
    try:
        yield
    except LockgateError:
        raise
    except Exception as exc:
        kind = failure_kind(exc)
        if kind is None:
            raise
        where = f"PostgreSQL {role} table {table!r} at {endpoint(url)}"
        reason = failure_reason(exc)
        if kind == "unavailable":
            raise SourceUnavailableError(
                f"{where} is unavailable ({reason}, while {doing}). The database is down or unreachable: "
                "nothing of the window was read or committed; start it (or check the URL and the "
                "network), then run the job again (a controller retries by itself)"
            ) from exc
        if kind == "refused":
            raise SourceRefusedError(
                f"{where} refused the read ({reason}, while {doing}). Fix the source's URL, credentials, "
                "permissions or table, then run the job again"
            ) from exc
        raise SourceUnavailableError(f"{where} failed ({reason}, while {doing}); run the job again") from exc


def table_schema(url: str, table: str, role: str = "source") -> pa.Schema:
    """The Arrow schema of ``table`` as ADBC reads it (``TIMESTAMPTZ`` ->
    ``timestamp[us, tz=UTC]``, ``NUMERIC`` -> string)."""
    with _reading(url, table, "reading its schema", role):
        return _table_schema(url, table)


def read_table(url: str, table: str, columns: list[str] | None = None) -> pa.Table:
    """Every row of a lookup ``table`` (``columns`` only, when given)."""
    cols = "*" if not columns else ", ".join(quote_ident(c) for c in columns)
    with _reading(url, table, "reading the lookup table", "lookup"):
        conn = connect(url)
        try:
            cur = conn.cursor()
            cur.execute(f"SELECT {cols} FROM {quote_table(table)}")
            return cur.fetch_arrow_table()
        finally:
            conn.close()


def _table_schema(url: str, table: str) -> pa.Schema:
    conn = connect(url)
    try:
        cur = conn.cursor()
        if not table_exists(cur, table):
            raise LockgateError(f"PostgreSQL table {table!r} does not exist in {safe_url(url)}")
        cur.execute(f"SELECT * FROM {quote_table(table)} LIMIT 0")
        return cur.fetch_arrow_table().schema
    finally:
        conn.close()


def read_slice(
    url: str,
    table: str,
    event_time: str,
    start: datetime,
    end: datetime,
    columns: list[str] | tuple[str, ...] | None = None,
) -> pa.Table:
    """Rows of ``table`` with ``start <= event_time < end``, ordered by ``event_time``.

    ``start``/``end`` may be aware (any zone) or naive (UTC). Identifiers are quoted and
    the bounds are bind parameters.
    """
    cols = "*" if not columns else ", ".join(quote_ident(c) for c in columns)
    et = quote_ident(event_time)
    sql = f"SELECT {cols} FROM {quote_table(table)} WHERE {et} >= $1 AND {et} < $2 ORDER BY {et}"
    with _reading(url, table, "reading a window's rows"):
        conn = connect(url)
        try:
            cur = conn.cursor()
            cur.execute(sql, parameters=_time_params(start, end))
            return cur.fetch_arrow_table()
        finally:
            conn.close()


def max_event_time(url: str, table: str, event_time: str) -> datetime | None:
    """The largest ``event_time`` in ``table`` as an aware UTC datetime (``None`` if empty)."""
    with _reading(url, table, "looking up its latest event time"):
        conn = connect(url)
        try:
            cur = conn.cursor()
            cur.execute(f"SELECT max({quote_ident(event_time)}) AS m FROM {quote_table(table)}")
            col = cur.fetch_arrow_table().column(0)
            value = col[0].as_py() if len(col) else None
        finally:
            conn.close()
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise LockgateError(
            f"PostgreSQL table {table!r}: event-time column {event_time!r} is not a timestamp "
            f"(got {type(value).__name__})"
        )
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


# -- failures ------------------------------------------------------------------------
#: SQLSTATE classes and codes of failures that pass: connection lost, server shutting down
#: or out of resources (disk full, too many clients), I/O errors, serialization conflicts
_PASSING_CLASSES = ("08", "53", "57", "58")
_PASSING_STATES = ("40001", "40P01", "55P03")
#: classes of failures that retrying cannot fix: data that does not fit, integrity, wrong
#: credentials, no such database or schema, no permission, bad SQL, read-only transaction
_REFUSED_CLASSES = ("0A", "22", "23", "25", "28", "2B", "3D", "3F", "42", "44")
#: libpq's connection failures (no SQLSTATE) that no retry fixes
_REFUSED_TEXT = (
    "password authentication failed", "authentication failed", "does not exist", "no pg_hba.conf entry",
    "permission denied", "does not support SSL", "invalid", "certificate",
)


def endpoint(url: str) -> str:
    """``host:port`` of a PostgreSQL URL, for messages (the default port 5432 when none is given)."""
    try:
        parts = urlsplit(normalize_url(url))
        host = parts.hostname or dict(parse_qsl(parts.query)).get("host") or "localhost"
        return f"{host}:{parts.port or 5432}"
    except (ValueError, LockgateError):
        return safe_url(url)


def failure_reason(exc: BaseException) -> str:
    """The gist of a driver error on one line: ``connection refused``, ``relation "t" does
    not exist``... (no status prefix, no query, no hint lines)."""
    text = str(exc).strip()
    text = re.sub(r"^[A-Z_]+: ", "", text)
    text = text.replace("[libpq] ", "")
    first = text.splitlines()[0] if text else type(exc).__name__
    if " failed: " in first:  # 'connection to server at "h", port p failed: Connection refused'
        first = first.rsplit(" failed: ", 1)[1]
    first = re.sub(r"^Failed to [^:]+: ", "", first)
    first = re.sub(r"^(FATAL|ERROR|PANIC):\s+", "", first)
    first = re.sub(r"\.?\s*SQLSTATE: \w+$", "", first).strip()
    if first[:1].isupper() and first[1:2].islower():
        first = first[0].lower() + first[1:]
    return first or type(exc).__name__


def failure_kind(exc: BaseException) -> str | None:
    """``"unavailable"`` (the database is down, unreachable or out of resources: retrying can
    help), ``"refused"`` (retrying cannot help) or ``"other"`` for an error of the PostgreSQL
    driver; ``None`` for any other exception."""
    try:
        import adbc_driver_manager
    except ImportError:  # pragma: no cover - the driver is a dependency
        return None
    if not isinstance(exc, adbc_driver_manager.Error):
        return None
    state = getattr(exc, "sqlstate", None) or ""
    if state:
        if state[:2] in _PASSING_CLASSES or state in _PASSING_STATES:
            return "unavailable"
        if state[:2] in _REFUSED_CLASSES:
            return "refused"
        return "other"
    if getattr(exc, "status_code", None) == adbc_driver_manager.AdbcStatusCode.IO:
        reason = failure_reason(exc)
        return "refused" if any(t.lower() in reason.lower() for t in _REFUSED_TEXT) else "unavailable"
    return "other"


def safe_url(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password:
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port else ""
            user = parts.username or ""
            return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        pass
    return url
