"""Phase two of the sink protocol: commit staged output, exactly once per window.

One committer per sink kind, all without Spark (the controller runs them):

- **file** (:mod:`.files`): the staged folder is renamed to ``<path>/lg_window=<W>/``; with a
  ``key``, ``<path>/_current/current.parquet`` is the compacted current table;
- **collect** (:mod:`.collect`): the same under ``<home>/collect/<job>/<name>/``;
  :func:`read_collected` reads the committed windows back;
- **postgres** (:mod:`.postgres`): the rows and a commit marker in one transaction; with a
  ``key`` (:mod:`.postgres_upsert`) the rows replace the rows of their keys;
- **delta** (:mod:`.delta`): one Delta commit carrying the transaction ``(app id, window)``;
- **iceberg** (:mod:`.iceberg`): one SQL-catalog commit whose snapshots name the window.

:func:`committer_for` picks the committer of a sink from its ``to_config()`` dict.
"""

from __future__ import annotations

from typing import Any

from lockgate.errors import SinkCommitError

from .base import SinkCommitter
from .collect import CollectCommitter, collect_root, read_collected
from .delta import DeltaCommitter
from .files import FileCommitter, FolderCommitter, KeyedFileCommitter
from .iceberg import IcebergCommitter
from .postgres import MARKER_TABLE, PostgresCommitter
from .postgres_upsert import PostgresUpsertCommitter

_COMMITTERS: dict[str, type[SinkCommitter]] = {
    "file": FileCommitter,
    "collect": CollectCommitter,
    "postgres": PostgresCommitter,
    "delta": DeltaCommitter,
    "iceberg": IcebergCommitter,
}


#: where a sink names its table, ``{job}`` stands for the job writing it (a table per job)
JOB_PLACEHOLDER = "{job}"
_TABLE_FIELDS = ("path", "table")


def for_job(sink: dict[str, Any], job: str) -> dict[str, Any]:
    """``sink`` with ``{job}`` in its table's location replaced by ``job``.

    >>> for_job({"kind": "delta", "path": "/lake/bids/{job}"}, "feed_1")["path"]
    '/lake/bids/feed_1'
    """
    fields = {f: sink[f].replace(JOB_PLACEHOLDER, job) for f in _TABLE_FIELDS
              if isinstance(sink.get(f), str) and JOB_PLACEHOLDER in sink[f]}
    return {**sink, **fields} if fields else sink


def committer_for(sink: dict[str, Any], home: str, job: str | None = None) -> SinkCommitter:
    """The committer of a sink given its ``to_config()`` dict; ``home`` is LOCKGATE_HOME.

    With ``job``, a ``{job}`` in the sink's path or table name is that job's name."""
    if job is not None and isinstance(sink, dict):
        sink = for_job(sink, job)
    kind = sink.get("kind") if isinstance(sink, dict) else None
    cls = _COMMITTERS.get(kind or "")
    if cls is PostgresCommitter and sink.get("key"):
        cls = PostgresUpsertCommitter
    elif cls is FileCommitter and sink.get("key"):
        cls = KeyedFileCommitter
    if cls is None:
        raise SinkCommitError(f"no committer for sink kind {kind!r}; expected one of {sorted(_COMMITTERS)}")
    return cls(sink, home)


__all__ = [
    "MARKER_TABLE",
    "CollectCommitter",
    "DeltaCommitter",
    "FileCommitter",
    "FolderCommitter",
    "IcebergCommitter",
    "KeyedFileCommitter",
    "PostgresCommitter",
    "PostgresUpsertCommitter",
    "SinkCommitter",
    "collect_root",
    "committer_for",
    "read_collected",
]
