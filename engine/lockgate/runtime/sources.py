"""Reading a source's slice of one cycle window as a Spark DataFrame.

Files are listed once per round; Parquet files whose footer statistics show no record in
the window are skipped without being opened by Spark. The Nexmark generator and
PostgreSQL produce Arrow tables on the driver, handed to Spark without a row-wise copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from ..errors import CompileError
from ..nexmark import SCHEMAS, NexmarkConfig, generate

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros_to_dt(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC) if us % 1_000_000 else datetime.fromtimestamp(
        us // 1_000_000, tz=UTC
    )


def _dt_micros(t: datetime) -> int:
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def slice_column(cfg: dict[str, Any]) -> str:
    """The column that assigns a record to a cycle window."""
    return cfg.get("arrival") or cfg["event_time"]


def slices_by_arrival(cfg: dict[str, Any]) -> bool:
    """True when event time may lag behind the slice position (late records possible)."""
    return bool(cfg.get("arrival")) or (cfg["kind"] == "nexmark" and cfg.get("out_of_order", 0) > 0)


def nexmark_config(cfg: dict[str, Any]) -> NexmarkConfig:
    start = datetime.fromisoformat(cfg["start"])
    return NexmarkConfig(
        events_per_second=cfg["events_per_second"],
        seed=cfg["seed"],
        start=start if start.tzinfo else start.replace(tzinfo=UTC),
        max_events=cfg.get("max_events"),
        out_of_order_s=cfg.get("out_of_order", 0.0),
    )


# -- files -----------------------------------------------------------------------------
def _fs(path: str) -> tuple[pafs.FileSystem, str]:
    if "://" in path and not path.startswith("file://"):
        return pafs.FileSystem.from_uri(path)
    local = path[len("file://") :] if path.startswith("file://") else path
    return pafs.LocalFileSystem(), os.path.abspath(local)


def list_files(path: str) -> list[pafs.FileInfo]:
    fs, root = _fs(path)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return []
    if info.type == pafs.FileType.File:
        return [info]
    files = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(
        (f for f in files if f.type == pafs.FileType.File and not any(p.startswith(("_", ".")) for p in f.path[len(root) :].split("/") if p)),
        key=lambda f: f.path,
    )


_STATS: dict[tuple[str, int, int, str], tuple[int, int] | None] = {}


def _parquet_range(fs: pafs.FileSystem, info: pafs.FileInfo, column: str) -> tuple[int, int] | None:
    """(min, max) of ``column`` in µs from the footer, cached by path, size and mtime."""
    key = (info.path, info.size or 0, info.mtime_ns or 0, column)
    if key not in _STATS:
        rng: tuple[int, int] | None = None
        try:
            with fs.open_input_file(info.path) as f:
                meta = pq.ParquetFile(f).metadata
            idx = meta.schema.to_arrow_schema().get_field_index(column)
            lo = hi = None
            for rg in range(meta.num_row_groups):
                st = meta.row_group(rg).column(idx).statistics
                if st is None or not st.has_min_max:
                    lo = None
                    break
                mn, mx = _dt_micros(st.min), _dt_micros(st.max)
                lo = mn if lo is None else min(lo, mn)
                hi = mx if hi is None else max(hi, mx)
            if lo is not None and hi is not None:
                rng = (lo, hi)
        except Exception:  # unreadable footer: let Spark read it and report
            rng = None
        _STATS[key] = rng
    return _STATS[key]


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
    fs, _ = _fs(cfg["path"])
    with fs.open_input_file(files[0].path) as f:
        return from_arrow_schema(pq.read_schema(f))


# -- public ----------------------------------------------------------------------------
def source_schema(cfg: dict[str, Any]) -> StructType:
    """The Spark schema of a source's records (no Spark job)."""
    kind = cfg["kind"]
    if kind == "nexmark":
        if cfg["stream"] not in SCHEMAS:
            raise CompileError(f"Nexmark stream {cfg['stream']!r} unknown: use 'person', 'auction' or 'bid'")
        return from_arrow_schema(SCHEMAS[cfg["stream"]])
    if kind == "file":
        return _file_schema(cfg)
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
    ``empty`` when nothing can be in the slice."""

    df: DataFrame
    position: dict[str, Any]
    table: pa.Table | None = None
    empty: bool = False


def read_slice(
    spark: SparkSession, cfg: dict[str, Any], schema: StructType, start_us: int, end_us: int
) -> SourceSlice:
    """The records of ``[start_us, end_us)`` and the source position after them."""
    kind = cfg["kind"]
    if kind == "nexmark":
        conf = nexmark_config(cfg)
        first, last = conf.events_between(micros_to_dt(start_us), micros_to_dt(end_us))
        table = generate(conf, cfg["stream"], first, last)
        return SourceSlice(_from_arrow(spark, table, schema), {"next_event": last}, table)
    if kind == "postgres":
        from .postgres import read_slice as pg_read

        table = pg_read(
            cfg["url"], cfg["table"], slice_column(cfg), micros_to_dt(start_us), micros_to_dt(end_us), cfg.get("columns")
        )
        return SourceSlice(_from_arrow(spark, table, schema), {"until_us": end_us}, table)
    if kind == "file":
        col = slice_column(cfg)
        fs, _ = _fs(cfg["path"])
        chosen = []
        for info in list_files(cfg["path"]):
            rng = _parquet_range(fs, info, col) if cfg["format"] == "parquet" else None
            if rng is None or (rng[1] >= start_us and rng[0] < end_us):
                chosen.append(info.path if "://" not in cfg["path"] else f"{cfg['path'].split('://')[0]}://{info.path}")
        if not chosen:
            return SourceSlice(spark.createDataFrame([], schema), {"until_us": end_us, "files": 0}, empty=True)
        reader = spark.read.format(cfg["format"]).schema(schema).options(**cfg.get("options", {}))
        if cfg["format"] == "csv":
            reader = reader.option("header", cfg.get("options", {}).get("header", "true"))
        df = reader.load(chosen)
        lo, hi = F.timestamp_micros(F.lit(start_us)), F.timestamp_micros(F.lit(end_us))
        return SourceSlice(df.filter((F.col(col) >= lo) & (F.col(col) < hi)), {"until_us": end_us, "files": len(chosen)})
    raise CompileError(f"unknown source kind {kind!r}")


def _from_arrow(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    if table.num_rows == 0:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(table)


def available_until(cfg: dict[str, Any]) -> int | None:
    """Exclusive upper bound (µs) of the slice positions present in the source now;
    ``None`` when the source is unbounded in time (then wall-clock time is the bound)."""
    kind = cfg["kind"]
    if kind == "nexmark":
        if cfg.get("max_events") is None:
            return None
        conf = nexmark_config(cfg)
        import numpy as np

        return int(conf.event_time_us(np.array([cfg["max_events"] - 1]))[0]) + 1
    if kind == "postgres":
        from .postgres import max_event_time

        t = max_event_time(cfg["url"], cfg["table"], slice_column(cfg))
        return None if t is None else _dt_micros(t) + 1
    if kind == "file":
        col = slice_column(cfg)
        fs, _ = _fs(cfg["path"])
        hi = None
        for info in list_files(cfg["path"]):
            rng = _parquet_range(fs, info, col) if cfg["format"] == "parquet" else None
            if rng is None:
                return None
            hi = rng[1] if hi is None else max(hi, rng[1])
        return None if hi is None else hi + 1
    return None


def available_from(cfg: dict[str, Any]) -> int | None:
    """Earliest slice position (µs) present in the source, when the source can tell."""
    kind = cfg["kind"]
    if kind == "nexmark":
        return nexmark_config(cfg).start_us
    if kind == "file":
        col = slice_column(cfg)
        fs, _ = _fs(cfg["path"])
        lo = None
        for info in list_files(cfg["path"]):
            rng = _parquet_range(fs, info, col) if cfg["format"] == "parquet" else None
            if rng is None:
                return None
            lo = rng[0] if lo is None else min(lo, rng[0])
        return lo
    return None
