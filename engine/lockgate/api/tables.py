"""Lookup tables: dimension data a stream is enriched with (:meth:`Stream.lookup`), read
whole in every cycle round, so a change to the table shows in the next window.

A table is not a source: it has no event time and is never sliced or checkpointed. A window
replayed after a failure reads the table as it is then (as Flink's lookup joins do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .sources import FILE_FORMATS


@dataclass(frozen=True)
class FileTable:
    """Parquet, CSV or JSON files read whole each round.

    :param path: folder (or URI) holding the files.
    :param format: ``parquet``, ``csv`` or ``json``.
    :param schema: Spark DDL; required for CSV and JSON.
    :param options: reader options passed to Spark.

    >>> FileTable("dims/categories")
    """

    path: str
    format: str = "parquet"
    schema: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    kind = "file"

    def __post_init__(self) -> None:
        if self.format not in FILE_FORMATS:
            raise ValueError(f"FileTable format {self.format!r}: use one of {', '.join(FILE_FORMATS)}")

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "format": self.format, "schema": self.schema,
                "options": dict(self.options)}


@dataclass(frozen=True)
class PostgresTable:
    """A PostgreSQL table read whole each round, Arrow-native through ADBC.

    :param url: ``postgresql://user@host:port/database``.
    :param table: table name (optionally ``schema.table``).
    :param columns: columns to read (all when omitted).

    >>> PostgresTable("postgresql://app@db:5432/shop", "categories")
    """

    url: str
    table: str
    columns: tuple[str, ...] | None = None

    kind = "postgres"

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": self.url, "table": self.table,
                "columns": list(self.columns) if self.columns else None}


LookupTable = FileTable | PostgresTable

__all__ = ["FileTable", "LookupTable", "PostgresTable"]
