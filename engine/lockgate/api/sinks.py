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
    """

    path: str
    format: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)

    kind = "file"

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "format": self.format, "options": dict(self.options)}


@dataclass(frozen=True)
class PostgresSink:
    """Rows appended to a PostgreSQL table; the rows and the window's commit marker are
    written in one transaction, so a window is either wholly in the table or not at all.

    :param url: ``postgresql://user@host:port/database``.
    :param table: target table; created from the stream's schema if missing.
    :param window_column: column holding the window id of each row (used to retract
        windows on a deliberate restore to an earlier window).
    """

    url: str
    table: str
    window_column: str = "lg_window"

    kind = "postgres"

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": self.url, "table": self.table, "window_column": self.window_column}


@dataclass(frozen=True)
class CollectSink:
    """Results kept by Lockgate for tests and notebooks: ``client.read_sink(job, name)``."""

    name: str

    kind = "collect"

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name}


Sink = FileSink | PostgresSink | CollectSink
