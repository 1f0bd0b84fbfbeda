"""Warm state: each state table's base layer kept in Spark's cache from one round to the next.

A round reads the keys it touches from its tables' layers (:mod:`.layers`). The deltas are
small, what the last rounds changed; the base holds every key, and every round scans it to find
the keys its window touched. Held warm, the scan reads Spark's in-memory columns instead of
decoding Parquet, and a lookup into a warm base joins keys by plain equality
(:func:`~.layers._split_semi`): together they took a steady round of a running aggregate over 10
million keys from about 2.0 s to 1.65 s on the 2-core bench machine, where neither alone helped
(``python -m bench.state_growth``).

:class:`WarmBases` keeps, per job and table, the base layer the last rounds read, persisted
(``MEMORY_AND_DISK``: Spark spills what does not fit; nothing fails for want of heap), from the
second round that starts from it: the first reads its files, since filling the cache while it
scans slowed a restored run's first round by a fifth at a million keys (``bench.restore``). It keeps
the base's *file read*, the very read a round's plan makes (:class:`~..file_reads.FileReads`
gives two reads of one folder the same relation), so Spark's cache manager answers every later
read of that folder from memory: a round built step by step or bound from its template alike,
with no change to the plans.

Why this is exact: a layer folder named by a checkpoint's manifest is immutable once the
checkpoint is written, and what is kept is that folder's rows and nothing the run derived. Each
entry carries its *fingerprint* (the manifest's entry for the layer: its files, sizes and rows,
and the files' modification times); a round whose restore point names another base, or the same folder with another fingerprint (a
folder written again after a reset), releases the old entry before anything reads it. So a run
starting from any checkpoint, on a worker that ran the job before or not, reads the rows that
checkpoint names: warm state is never carried across to a checkpoint that does not name it.
The durable copy is unchanged: every round still writes its delta before it commits.

``LOCKGATE_WARM_STATE=0`` turns it off; ``LOCKGATE_WARM_STATE_MIN_ROWS`` (default 0) is the
smallest base kept; ``LOCKGATE_WARM_STATE_MAX_ROWS`` (default 200,000,000) the rows kept in all,
over every job of the session, the least recently used released first.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ...filesystems import resolve
from ..file_reads import FileReads
from ..settings import count_setting, switch

#: default most rows held over every job of a session
DEFAULT_MAX_ROWS = 200_000_000


def enabled() -> bool:
    """Whether runners keep their tables' bases warm (``LOCKGATE_WARM_STATE``, on by default)."""
    return switch("LOCKGATE_WARM_STATE")


def fingerprint(uri: str, layer: Mapping[str, Any]) -> str:
    """What identifies a layer's contents: its manifest entry's files (paths, sizes) and rows, and
    each file's modification time (a folder written again with files of the same names and sizes
    differs there)."""
    fs, folder = resolve(uri)
    paths = [f"{folder}/{f['path']}" for f in layer.get("files", [])]
    stamps = [info.mtime_ns for info in fs.get_file_info(paths)] if paths else []
    return json.dumps({"files": layer.get("files", []), "rows": layer.get("rows"), "mtimes": stamps},
                      sort_keys=True)


@dataclass
class _Held:
    uri: str
    fingerprint: str
    schema: StructType
    rows: int
    #: the persisted read (None: seen by one round, not kept yet)
    frame: DataFrame | None
    used: int


class WarmBases:
    """The bases held warm in one SparkSession, by ``(job, table)`` (one per session: :meth:`of`)."""

    _sessions: weakref.WeakKeyDictionary[Any, WarmBases] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, spark: SparkSession) -> WarmBases:
        """The session's holder (made at its first use)."""
        key = getattr(spark, "_jsparkSession", None) or spark
        try:
            holder = cls._sessions.get(key)
        except TypeError:  # a key that takes no weak reference: a holder per call is still correct
            return cls(spark)
        if holder is None:
            holder = cls._sessions[key] = cls(spark)
        return holder

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.min_rows = count_setting("LOCKGATE_WARM_STATE_MIN_ROWS", 0, "rows", "0 keeps every base")
        self.max_rows = count_setting("LOCKGATE_WARM_STATE_MAX_ROWS", DEFAULT_MAX_ROWS, "rows",
                                      "0 keeps none")
        self._held: dict[tuple[str, str], _Held] = {}
        self._clock = 0

    def hold(self, job: str, table: str, uri: str, layer: Mapping[str, Any], schema: StructType) -> str:
        """Note that a round of ``job`` starts from the base layer ``uri`` (manifest entry
        ``layer``) of its ``table``, and keep it warm from the second round that does. Returns
        ``"kept"`` (warm, read there by an earlier round), ``"held"`` (persisted now: this round's
        scan fills the cache), ``"seen"`` (the first round on this base: read from its files, as a
        restored or adopted run's first round, which building the cache would slow),
        ``"swapped"`` (seen in place of another base of the table, which is released) or ``""``
        (not kept: too small or too large)."""
        self._clock += 1
        key = (job, table)
        mark = fingerprint(uri, layer)
        held = self._held.get(key)
        if held is not None and held.uri == uri and held.fingerprint == mark:
            held.used = self._clock
            if held.frame is not None:
                return "kept"
            rows = held.rows
            if rows < self.min_rows or rows > self.max_rows or self.max_rows == 0:
                return ""
            held.frame = FileReads.of(self.spark).parquet(held.schema, [uri]).persist(StorageLevel.MEMORY_AND_DISK)
            self._evict(keep=key)
            return "held"
        swapped = held is not None and held.frame is not None
        if held is not None:
            self._drop(key)
        for other, h in list(self._held.items()):  # the same folder held with other contents
            if h.uri == uri:
                self._drop(other)
        self._held[key] = _Held(uri, mark, schema, int(layer.get("rows") or 0), None, self._clock)
        return "swapped" if swapped else "seen"

    def held(self, job: str | None = None) -> dict[tuple[str, str], str]:
        """The base folder held per ``(job, table)`` (of ``job`` only, when given)."""
        return {k: h.uri for k, h in self._held.items() if h.frame is not None and (job is None or k[0] == job)}

    def release(self, job: str, tables: set[str] | None = None) -> None:
        """Release ``job``'s bases (those of ``tables`` only, when given)."""
        for key in [k for k in self._held if k[0] == job and (tables is None or k[1] in tables)]:
            self._drop(key)

    def _evict(self, keep: tuple[str, str]) -> None:
        """Release the least recently used bases until the rows held fit ``max_rows``."""
        while sum(h.rows for h in self._held.values() if h.frame is not None) > self.max_rows:
            oldest = min((k for k, h in self._held.items() if k != keep and h.frame is not None),
                         key=lambda k: self._held[k].used, default=None)
            if oldest is None:
                return
            self._drop(oldest)

    def _drop(self, key: tuple[str, str]) -> None:
        held = self._held.pop(key)
        if held.frame is not None:
            held.frame.unpersist(blocking=False)
