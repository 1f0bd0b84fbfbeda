"""Reading a source's slice of one cycle window as a Spark DataFrame.

Files are listed once per round; Parquet files whose footer statistics show no record in
the window are skipped without being opened by Spark (listing and footer ranges are in
:mod:`lockgate.runtime.availability`, which the controller uses without Spark). The Nexmark generator and
PostgreSQL produce Arrow tables on the driver, handed to Spark without a row-wise copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from ..clock import from_micros
from ..errors import CompileError
from ..filesystems import resolve
from ..nexmark import SCHEMAS, generate
from .availability import file_ranges, list_files, nexmark_config, slice_column

__all__ = ["SourceSlice", "read_slice", "source_schema"]


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
        first, last = conf.events_between(from_micros(start_us), from_micros(end_us))
        table = generate(conf, cfg["stream"], first, last)
        return SourceSlice(_from_arrow(spark, table, schema), {"next_event": last}, table)
    if kind == "postgres":
        from .postgres import read_slice as pg_read

        table = pg_read(
            cfg["url"], cfg["table"], slice_column(cfg), from_micros(start_us), from_micros(end_us), cfg.get("columns")
        )
        return SourceSlice(_from_arrow(spark, table, schema), {"until_us": end_us}, table)
    if kind == "file":
        col = slice_column(cfg)
        chosen = []
        for info, rng in file_ranges(cfg):
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
