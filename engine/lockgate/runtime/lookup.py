"""Lookup joins: each round's records enriched with a table read whole in that round
(:class:`~lockgate.api.tables.FileTable` or :class:`~lockgate.api.tables.PostgresTable`),
broadcast to the join. No state: the table is read again every round."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from ..errors import CompileError
from .empty import empty_frame
from .interval_join import output_names
from .sources import source_schema


def table_schema(cfg: dict[str, Any]) -> StructType:
    """The Spark schema of a lookup table (no Spark job)."""
    if cfg["kind"] == "postgres":
        from .postgres import table_schema as pg_schema

        schema = pg_schema(cfg["url"], cfg["table"], role="lookup")
        if cfg.get("columns"):
            schema = pa.schema([schema.field(c) for c in cfg["columns"]])
        return from_arrow_schema(schema)
    try:
        return source_schema({**cfg, "event_time": None})
    except CompileError as err:
        raise CompileError(str(err).replace("file source", "lookup table")) from None


def read_table(spark: SparkSession, cfg: dict[str, Any], schema: StructType) -> DataFrame:
    """The whole table, as it is now."""
    if cfg["kind"] == "postgres":
        from .postgres import read_table as pg_read

        table = pg_read(cfg["url"], cfg["table"], cfg.get("columns"))
        return spark.createDataFrame(table) if table.num_rows else empty_frame(spark, schema)
    reader = spark.read.format(cfg["format"]).options(**cfg.get("options", {}))
    return reader.schema(schema).load(cfg["path"])


def lookup_join(spark: SparkSession, cfg: dict[str, Any], df: DataFrame, analysis: bool) -> DataFrame:
    """``df`` joined with the table on the key columns: the stream's columns, then the
    table's (``_right`` on a name clash); ``how="left"`` keeps records with no match."""
    schema = table_schema(cfg["table"])
    table = empty_frame(spark, schema) if analysis else read_table(spark, cfg["table"], schema)
    lcols, rcols = list(df.columns), list(table.columns)
    names = output_names(lcols, rcols)
    left = df.select(*[F.col(c).alias(f"__l_{c}") for c in lcols])
    right = F.broadcast(table.select(*[F.col(c).alias(f"__r_{c}") for c in rcols]))
    cond = None
    for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
        term = F.col(f"__l_{lk}") == F.col(f"__r_{rk}")
        cond = term if cond is None else cond & term
    return left.join(right, cond, cfg["how"]).select(
        *[F.col(f"__l_{c}").alias(c) for c in lcols], *[F.col(f"__r_{c}").alias(names[c]) for c in rcols]
    )


__all__ = ["lookup_join", "read_table", "table_schema"]
