"""Sinks: where results go, committed exactly once per cycle window.

Every sink is two-phase. During a cycle the worker stages the window's output (Parquet
under the job's staging area); after every stateful operator has snapshotted, the
controller commits each sink, idempotently per (job, sink, window), and only then writes
the window's checkpoint row. A restore replays a commit that was cut short, so a window's
output lands once whatever moment the run was killed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FileSink:
    """Parquet, CSV or JSON files, one folder per window: ``<path>/lg_window=<W>/``.

    The folder appears by one atomic rename when the window commits; Spark and pyarrow
    read ``path`` as a partitioned data set with an ``lg_window`` column.

    With ``key`` (an updating stream's key, Parquet only) the window folders are the stream's
    changelog (``op`` included) and ``<path>/_current/current.parquet`` is the compacted
    current table: the last row of each key, deleted keys left out, replaced (one atomic
    rename) as each window commits and rebuilt from the changelog on a restore. Rewriting it
    costs what the table holds: a table of millions of keys belongs in ``PostgresSink(key=...)``.
    """

    path: str
    format: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)
    key: tuple[str, ...] | None = None

    kind = "file"

    def __post_init__(self) -> None:
        if self.key is not None:
            if isinstance(self.key, str) or not self.key or not all(isinstance(k, str) and k for k in self.key):
                raise ValueError(f"FileSink(key=...) takes a list of column names, got {self.key!r}")
            if self.format.lower() != "parquet":
                raise ValueError(f"FileSink(key=...) keeps its current view in Parquet: format={self.format!r} "
                                 "cannot take a key (drop key=, or write Parquet)")
            object.__setattr__(self, "key", tuple(self.key))

    def to_config(self) -> dict[str, Any]:
        config = {"kind": self.kind, "path": self.path, "format": self.format, "options": dict(self.options)}
        if self.key is not None:  # left out without a key: plans written before keys keep their version
            config["key"] = list(self.key)
        return config


@dataclass(frozen=True)
class PostgresSink:
    """Rows appended to a PostgreSQL table, or upserted by ``key``; the rows and the window's
    commit marker are written in one transaction, so a window is either wholly in the table
    or not at all.

    With ``key`` the table holds the current row of each key (its primary key): a window's rows
    replace the rows of their keys (``INSERT ... ON CONFLICT (key) DO UPDATE``) and a row whose
    ``op`` column is ``-D`` deletes its key, which is how an updating stream (a running
    aggregate's output) is kept as a table. The rows each window replaced are kept in
    ``lockgate_sink_history`` (for ``history_windows`` windows), so a restore to an earlier
    window puts them back.

    :param url: ``postgresql://user@host:port/database``.
    :param table: target table; created from the stream's schema if missing (with ``key`` as
        its primary key).
    :param window_column: column holding the window id of each row (used to retract
        windows on a deliberate restore to an earlier window; with ``key``: the window that
        last wrote the row).
    :param key: the columns that name one row: upsert by them instead of appending.
    :param history_windows: with ``key``, how many windows back a restore can go.

    Example::

        totals = bids.key_by("auction").aggregate(bids=lg.count(), top=lg.max("price"))
        totals.sink(lg.PostgresSink(url, "auction_totals", key=["auction"]))
    """

    url: str
    table: str
    window_column: str = "lg_window"
    key: tuple[str, ...] | None = None
    history_windows: int = 1000

    kind = "postgres"

    def __post_init__(self) -> None:
        if self.key is not None:
            if isinstance(self.key, str) or not self.key or not all(isinstance(k, str) and k for k in self.key):
                raise ValueError(f"PostgresSink(key=...) takes a list of column names, got {self.key!r}")
            object.__setattr__(self, "key", tuple(self.key))
        if not isinstance(self.history_windows, int) or self.history_windows < 1:
            raise ValueError(f"PostgresSink(history_windows=...) must be a positive number, got {self.history_windows!r}")

    def to_config(self) -> dict[str, Any]:
        config = {"kind": self.kind, "url": self.url, "table": self.table, "window_column": self.window_column}
        if self.key is not None:  # left out when appending: plans written before keys keep their version
            config.update(key=list(self.key), history_windows=self.history_windows)
        return config

def _key_tuple(sink: str, key: Any) -> tuple[str, ...] | None:
    """``key`` as a tuple of column names (``None`` stays ``None``); a bad one is a ``ValueError``."""
    if key is None:
        return None
    if isinstance(key, str) or not key or not all(isinstance(k, str) and k for k in key):
        raise ValueError(f"{sink}(key=...) takes a list of column names, got {key!r}")
    return tuple(key)


@dataclass(frozen=True)
class DeltaSink:
    """A Delta Lake table (delta-rs, no Spark on the committing side): one Delta commit per
    window, made idempotent by Delta's own writer id: the commit carries the transaction
    ``(app id, version) = ("lockgate/<job>/<sink>", window)``, so a replay after a crash finds
    the table's transaction version for that app id at or past the window and writes nothing.

    Without ``key`` the window's rows are appended with the window id in ``window_column``;
    with ``key`` the table holds the current row of each key (an updating stream): a Delta
    ``MERGE`` replaces the rows of the window's keys and deletes those whose ``op`` is ``-D``.
    A restore to window ``W`` is a Delta ``RESTORE`` to the version that committed ``W`` (the
    transaction version set back to ``W`` in the same commit), so keep the versions you may
    restore to: do not ``VACUUM`` with a retention shorter than that.

    :param path: the table's location (a local path or an object-store URI delta-rs knows);
        created from the stream's schema if missing. A table takes one job: ``{job}`` in the
        path is the name of the job writing it, for a table per job (``/lake/bids/{job}``).
    :param key: the columns that name one row: merge by them instead of appending.
    :param window_column: column holding the window that wrote each row.
    :param storage_options: passed to delta-rs (object-store credentials, ...).

    Example::

        totals.sink(lg.DeltaSink("/lake/auction_totals", key=["auction"]))
    """

    path: str
    key: tuple[str, ...] | None = None
    window_column: str = "lg_window"
    storage_options: dict[str, str] = field(default_factory=dict)

    kind = "delta"

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _key_tuple("DeltaSink", self.key))
        if not isinstance(self.window_column, str) or not self.window_column:
            raise ValueError(f"DeltaSink(window_column=...) takes a column name, got {self.window_column!r}")

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "path": self.path, "window_column": self.window_column}
        if self.key is not None:
            config["key"] = list(self.key)
        if self.storage_options:
            config["storage_options"] = dict(self.storage_options)
        return config


@dataclass(frozen=True)
class IcebergSink:
    """An Apache Iceberg table in a SQL catalog (pyiceberg, no Spark on the committing side):
    one catalog commit per window, whose snapshot(s) carry ``lockgate.job``, ``lockgate.sink``
    and ``lockgate.window`` in their summary, so a replay after a crash finds the window in
    the current snapshot's ancestry and writes nothing.

    Without ``key`` the window's rows are appended with the window id in ``window_column``;
    with ``key`` the table holds the current row of each key: one transaction deletes the
    rows of the window's keys and appends the rows that are not ``op = '-D'``. A restore to
    window ``W`` makes the snapshot that committed ``W`` the current one again, so do not
    expire the snapshots you may restore to.

    :param table: ``namespace.table`` (``default.<table>`` when no namespace is given);
        created from the stream's schema if missing. A table takes one job: ``{job}`` in the
        name is the name of the job writing it (``feeds.bids_{job}``).
    :param catalog_url: the SQL catalog's SQLAlchemy URL (``postgresql+psycopg://...``,
        ``sqlite:///...``); by default a SQLite file under LOCKGATE_HOME.
    :param warehouse: where new tables' files go; by default ``<LOCKGATE_HOME>/iceberg/warehouse``.
    :param key: the columns that name one row: replace rows by them instead of appending.
    :param window_column: column holding the window that wrote each row.
    :param catalog_name: the catalog's name in the SQL catalog's tables (a reader names the
        same catalog to see the table).

    Example::

        kept.sink(lg.IcebergSink("sales.orders", catalog_url="postgresql+psycopg://lake@db/lake",
                                 warehouse="s3://lake/warehouse"))
    """

    table: str
    catalog_url: str | None = None
    warehouse: str | None = None
    key: tuple[str, ...] | None = None
    window_column: str = "lg_window"
    catalog_name: str = "lockgate"

    kind = "iceberg"

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _key_tuple("IcebergSink", self.key))
        parts = self.table.split(".") if isinstance(self.table, str) else []
        if not parts or not all(parts):
            raise ValueError(f"IcebergSink(table=...) takes 'namespace.table' or 'table', got {self.table!r}")
        if not isinstance(self.window_column, str) or not self.window_column:
            raise ValueError(f"IcebergSink(window_column=...) takes a column name, got {self.window_column!r}")

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "table": self.table, "window_column": self.window_column,
                                  "catalog_name": self.catalog_name}
        if self.catalog_url is not None:
            config["catalog_url"] = self.catalog_url
        if self.warehouse is not None:
            config["warehouse"] = self.warehouse
        if self.key is not None:
            config["key"] = list(self.key)
        return config


@dataclass(frozen=True)
class CollectSink:
    """Results kept by Lockgate for tests and notebooks: ``client.read_sink(job, name)``."""

    name: str

    kind = "collect"

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name}


Sink = FileSink | PostgresSink | DeltaSink | IcebergSink | CollectSink
