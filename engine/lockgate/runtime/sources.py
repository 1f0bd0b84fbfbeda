"""Reading a source's slice of one cycle window as a Spark DataFrame.

Files are listed once per round; Parquet files whose footer statistics show no record in
the window are skipped without being opened by Spark (listing and footer ranges are in
:mod:`lockgate.runtime.availability`, which the controller uses without Spark). The Nexmark generator and
PostgreSQL produce Arrow tables on the driver, handed to Spark without a row-wise copy; so does
a NATS JetStream stream, read by sequence range (:mod:`lockgate.runtime.nats`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType, TimestampType

from ..clock import from_micros
from ..errors import CompileError
from ..filesystems import resolve
from ..nexmark import SCHEMAS, generate, stream_event_numbers
from .availability import (
    file_ranges,
    list_files,
    nexmark_config,
    parquet_integer_ranges,
    parquet_rows,
    slice_column,
    slices_by_arrival,
)
from .empty import empty_frame
from .file_reads import FileReads
from .invalid import flagged, reader_options, reader_schema
from .state import key_ranges

__all__ = ["SourceSlice", "SourceSpan", "read_slice", "read_span", "source_schema"]


def _file_schema(cfg: dict[str, Any]) -> StructType:
    if cfg.get("schema"):
        return StructType.fromDDL(cfg["schema"])
    if cfg["format"] != "parquet":
        raise CompileError(
            f"a {cfg['format']} file source needs schema= (Spark DDL, e.g. \"id BIGINT, ts TIMESTAMP\")"
        )
    files = list_files(cfg["path"])
    if not files:
        raise CompileError(
            f"file source {cfg['path']!r} holds no Parquet files to read a schema from: pass schema= "
            "(Spark DDL) or add files"
        )
    fs, _ = resolve(cfg["path"])
    with fs.open_input_file(files[0].path) as f:
        return from_arrow_schema(pq.read_schema(f))


#: the type of a Nexmark source's arrival column (its date_time's)
ARRIVAL_TYPE = SCHEMAS["bid"].field("date_time").type


def _nexmark_table(conf: Any, cfg: dict[str, Any], first: int, last: int) -> pa.Table:
    """Events ``[first, last)`` of a Nexmark source, with its arrival column when it has one."""
    table = generate(conf, cfg["stream"], first, last)
    if cfg.get("arrival"):
        nominal = conf.event_time_us(stream_event_numbers(conf, cfg["stream"], first, last))
        table = table.append_column(pa.field(cfg["arrival"], ARRIVAL_TYPE), pa.array(nominal, ARRIVAL_TYPE))
    return table


# -- public ----------------------------------------------------------------------------
def source_schema(cfg: dict[str, Any]) -> StructType:
    """The Spark schema of a source's records (no Spark job)."""
    kind = cfg["kind"]
    if kind == "nexmark":
        if cfg["stream"] not in SCHEMAS:
            raise CompileError(f"Nexmark stream {cfg['stream']!r} unknown: use 'person', 'auction' or 'bid'")
        schema = SCHEMAS[cfg["stream"]]
        if cfg.get("arrival"):
            if cfg["arrival"] in schema.names:
                raise CompileError(f"NexmarkSource(arrival={cfg['arrival']!r}): the {cfg['stream']} stream has a "
                                   "column of that name; call the arrival column something else")
            schema = schema.append(pa.field(cfg["arrival"], ARRIVAL_TYPE))
        return from_arrow_schema(schema)
    if kind == "file":
        return _file_schema(cfg)
    if kind == "nats":
        schema = StructType.fromDDL(cfg["schema"])
        if cfg.get("arrival"):
            if cfg["arrival"] in schema.names:
                raise CompileError(f"NatsSource(arrival={cfg['arrival']!r}): the schema has a field of that name; "
                                   "call the arrival column something else")
            schema = StructType([*schema.fields, StructField(cfg["arrival"], TimestampType(), True)])
        return schema
    if kind == "postgres":
        from .postgres import table_schema

        schema = table_schema(cfg["url"], cfg["table"])
        if cfg.get("columns"):
            schema = pa.schema([schema.field(c) for c in cfg["columns"]])
        return from_arrow_schema(schema)
    raise CompileError(f"unknown source kind {kind!r}")


@dataclass
class SourceSlice:
    """One cycle window's records of a source. ``table`` is set when the records were
    produced on the driver (generator, database), so they can be counted without Spark;
    ``empty`` when nothing can be in the slice. A file source's ``df`` carries the
    :data:`~lockgate.runtime.invalid.FLAG` column (see :mod:`lockgate.runtime.invalid`)."""

    df: DataFrame
    position: dict[str, Any]
    table: pa.Table | None = None
    empty: bool = False
    #: the files as read, before slicing (a file source: what names its invalid records)
    raw: DataFrame | None = None
    #: invalid records dropped on the driver (a NATS source under ``invalid="skip"``)
    invalid: int = 0
    #: the slice's rows as the files' footers count them (None: unknown, count them in Spark)
    rows: int | None = None
    #: the (min, max) of its integer columns, known on the driver (:mod:`lockgate.runtime.state.key_ranges`)
    key_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def no_records(self) -> bool:
        """Whether the slice is known on the driver to hold no records (no file in the window, or
        rows made on the driver and none made): its frame is an empty LocalRelation."""
        return self.empty or (self.table is not None and self.table.num_rows == 0)


def read_slice(
    spark: SparkSession, cfg: dict[str, Any], schema: StructType, start_us: int, end_us: int,
    after: dict[str, Any] | None = None,
) -> SourceSlice:
    """The records of ``[start_us, end_us)`` and the source position after them. ``after`` is the
    source's position after the window before (a message log's window starts right after it)."""
    kind = cfg["kind"]
    if kind == "nats":
        from .nats import next_after, read_range
        from .nats_records import to_table

        log = read_range(cfg, start_us, end_us, next_after(after))
        table, invalid = to_table(cfg, schema, log)
        position = {"until_us": end_us, "offset_ranges": log.ranges}
        return SourceSlice(_from_arrow(spark, table, schema), position, table, invalid=invalid,
                           key_ranges=_table_ranges(table, schema))
    if kind == "nexmark":
        conf = nexmark_config(cfg)
        first, last = conf.events_between(from_micros(start_us), from_micros(end_us))
        table = _nexmark_table(conf, cfg, first, last)
        return SourceSlice(_from_arrow(spark, table, schema), {"next_event": last}, table,
                           key_ranges=_table_ranges(table, schema))
    if kind == "postgres":
        from .postgres import read_slice as pg_read

        table = pg_read(
            cfg["url"], cfg["table"], slice_column(cfg), from_micros(start_us), from_micros(end_us), cfg.get("columns")
        )
        return SourceSlice(_from_arrow(spark, table, schema), {"until_us": end_us}, table,
                           key_ranges=_table_ranges(table, schema))
    if kind == "file":
        col = slice_column(cfg)
        chosen = []
        inside = True  # every chosen file's footer puts all its records in the slice, none timeless
        rows = 0
        integer_ranges = []
        for info, rng in file_ranges(cfg):
            if rng is None or (rng[1] >= start_us and rng[0] < end_us):
                chosen.append(info.path if "://" not in cfg["path"] else f"{cfg['path'].split('://')[0]}://{info.path}")
                integer_ranges.append(parquet_integer_ranges(info) if cfg["format"] == "parquet" else None)
                counted = parquet_rows(info, col)
                inside = inside and rng is not None and start_us <= rng[0] and rng[1] < end_us and counted is not None
                rows += counted or 0
        if not chosen:
            return SourceSlice(empty_frame(spark, schema), {"until_us": end_us, "files": 0}, empty=True)
        raw = FileReads.of(spark).load(cfg["format"], reader_schema(cfg, schema), reader_options(cfg), chosen)
        ranged = key_ranges.of_schema(key_ranges.union(integer_ranges), schema)
        if inside:
            # The files hold exactly the slice: no filter, and so no bounds as literals in Spark's
            # generated code, which each new window's bounds would compile (and warm up) again:
            # a 64-window catch-up group of bench.backfill W1 aggregated in 1.25 s instead of 2.0 s
            return SourceSlice(raw, {"until_us": end_us, "files": len(chosen)}, raw=raw, rows=rows, key_ranges=ranged)
        lo, hi = F.timestamp_micros(F.lit(start_us)), F.timestamp_micros(F.lit(end_us))
        # records with no time are in no window: kept, flagged invalid, so that they are counted
        in_window = ((F.col(col) >= lo) & (F.col(col) < hi)) | F.col(col).isNull()
        df = flagged(cfg, raw, col).filter(in_window)
        return SourceSlice(df, {"until_us": end_us, "files": len(chosen)}, raw=raw, key_ranges=ranged)
    raise CompileError(f"unknown source kind {kind!r}")


class SourceSpan:
    """The records of several consecutive cycle windows of one source, read once (a
    catch-up group): :meth:`slice` gives one window's records as :func:`read_slice` would.

    A file source is listed and scanned once for the whole span and its records cached for
    the group (each window's slice is a filter on them); a source produced on the driver
    (the generator, PostgreSQL, NATS) is sliced per window, which costs no Spark job. A message
    log's windows are sliced in order, each starting after the one before (``after``: the
    position before the span's first window).
    """

    def __init__(self, spark: SparkSession, cfg: dict[str, Any], schema: StructType, start_us: int, end_us: int,
                 after: dict[str, Any] | None = None):
        self.spark = spark
        self.after = after
        self.cfg = cfg
        self.schema = schema
        self.start_us, self.end_us = start_us, end_us
        self.df: DataFrame | None = None
        #: (min, max) slice-column range of each chosen file (None: unknown)
        self._ranges: list[tuple[int, int] | None] = []
        self._files: list[tuple[Any, tuple[int, int] | None]] = []
        #: the files as read (a file source: what names its invalid records)
        self.raw: DataFrame | None = None
        if cfg["kind"] == "file":
            piece = read_slice(spark, cfg, schema, start_us, end_us)
            self.empty = piece.empty
            self.df = None if piece.empty else piece.df
            self.raw = piece.raw
            self._files = [(info, rng) for info, rng in file_ranges(cfg)
                           if rng is None or (rng[1] >= start_us and rng[0] < end_us)]
            self._ranges = [rng for _info, rng in self._files]

    def footer_counts(self, window_of: Callable[[int], int]) -> dict[int, int] | None:
        """Records per cycle window from the Parquet footers alone, when every file of the span
        lies inside one window of it and no record can be late (None: count them by a scan)."""
        if self.cfg["kind"] != "file" or self.cfg["format"] != "parquet" or slices_by_arrival(self.cfg):
            return None
        col = slice_column(self.cfg)
        counts: dict[int, int] = {}
        for info, rng in self._files:
            rows = parquet_rows(info, col) if rng is not None else None
            if rng is None or rows is None or rng[0] < self.start_us or rng[1] >= self.end_us:
                return None
            w = window_of(rng[0])
            if window_of(rng[1]) != w:
                return None
            counts[w] = counts.get(w, 0) + rows
        return counts

    @property
    def on_driver(self) -> bool:
        """True when windows are produced on the driver (counted without Spark)."""
        return self.cfg["kind"] != "file"

    def whole(self) -> DataFrame:
        """Every record of the span as one DataFrame (produced once for a source on the driver)."""
        if self.df is None and self.on_driver:
            self.df = read_slice(self.spark, self.cfg, self.schema, self.start_us, self.end_us, self.after).df
        return self.df if self.df is not None else empty_frame(self.spark, self.schema)

    def position(self, start_us: int, end_us: int) -> dict[str, Any]:
        """Where the source stands after ``[start_us, end_us)``, without reading it."""
        kind = self.cfg["kind"]
        if kind == "nexmark":
            _first, last = nexmark_config(self.cfg).events_between(from_micros(start_us), from_micros(end_us))
            return {"next_event": last}
        if kind == "file":
            files = sum(1 for rng in self._ranges if rng is None or (rng[1] >= start_us and rng[0] < end_us))
            return {"until_us": end_us, "files": files}
        return {"until_us": end_us}

    def slice(self, start_us: int, end_us: int) -> SourceSlice:
        """The records of ``[start_us, end_us)`` (within the span) and the position after them."""
        if self.on_driver:
            piece = read_slice(self.spark, self.cfg, self.schema, start_us, end_us, self.after)
            if self.cfg["kind"] == "nats":
                self.after = piece.position  # the next window starts after this one
            return piece
        files = sum(1 for rng in self._ranges if rng is None or (rng[1] >= start_us and rng[0] < end_us))
        position = {"until_us": end_us, "files": files}
        if self.df is None or files == 0:
            return SourceSlice(empty_frame(self.spark, self.schema), position, empty=True)
        col = slice_column(self.cfg)
        lo, hi = F.timestamp_micros(F.lit(start_us)), F.timestamp_micros(F.lit(end_us))
        cond = (F.col(col) >= lo) & (F.col(col) < hi)
        if start_us == self.start_us:  # records with no time are counted (invalid) in the span's first window
            cond = cond | F.col(col).isNull()
        return SourceSlice(self.df.filter(cond), position, raw=self.raw)


def read_span(
    spark: SparkSession, cfg: dict[str, Any], schema: StructType, start_us: int, end_us: int,
    after: dict[str, Any] | None = None,
) -> SourceSpan:
    """The records of ``[start_us, end_us)``, to be sliced window by window (see :class:`SourceSpan`)."""
    return SourceSpan(spark, cfg, schema, start_us, end_us, after)


def _table_ranges(table: pa.Table, schema: StructType) -> dict[str, tuple[int, int]]:
    """The integer columns' ranges of a slice made on the driver."""
    return key_ranges.of_schema(key_ranges.of_table(table), schema) if table.num_rows else {}


def _from_arrow(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    if table.num_rows == 0:
        return empty_frame(spark, schema)
    return spark.createDataFrame(table)
