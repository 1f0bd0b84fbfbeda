"""Mergeable aggregates on Spark: partial, merge and final expressions.

A windowed or running aggregate keeps *partials* in its state; each cycle aggregates the
new records to partials, merges them with the partials carried in the snapshot, and
finalises the windows that closed. Every kind here merges exactly: counts and sums add,
min/max compare, avg carries (sum, count), approx_distinct carries a HyperLogLog sketch,
collect carries the list.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, ByteType, IntegerType, LongType, ShortType, StringType, StructType

#: input types a HyperLogLog sketch takes as they are; others are cast first
_HLL_NATIVE = (IntegerType, LongType, StringType, BinaryType)


def _parts(name: str, kind: str) -> list[str]:
    if kind == "avg":
        return [f"__{name}_sum", f"__{name}_n"]
    return [f"__{name}"]


def partial_columns(aggs: dict[str, dict[str, Any]]) -> list[str]:
    """Names of the partial columns kept in state, in order."""
    return [p for name, a in aggs.items() for p in _parts(name, a["kind"])]


def _sketchable(c: Column, column: str, schema: StructType | None) -> Column:
    """``c`` in a type ``hll_sketch_agg`` takes: INT, BIGINT, STRING or BINARY as they are,
    small integers widened, anything else (double, decimal, timestamp, date, ...) as its
    string form, which is one-to-one for those types."""
    if schema is None or column not in schema.fieldNames():
        return c
    t = schema[column].dataType
    if isinstance(t, _HLL_NATIVE):
        return c
    if isinstance(t, ByteType | ShortType):
        return c.cast("bigint")
    return c.cast("string")


def partial_exprs(aggs: dict[str, dict[str, Any]], schema: StructType | None = None) -> list[Column]:
    """Aggregate expressions over raw records (of ``schema``, when given), producing partials."""
    out: list[Column] = []
    for name, a in aggs.items():
        kind, col = a["kind"], a["column"]
        c = F.col(col) if col else None
        if kind == "count":
            out.append((F.count(c) if c is not None else F.count(F.lit(1))).alias(f"__{name}"))
        elif kind == "sum":
            out.append(F.sum(c).alias(f"__{name}"))
        elif kind == "min":
            out.append(F.min(c).alias(f"__{name}"))
        elif kind == "max":
            out.append(F.max(c).alias(f"__{name}"))
        elif kind == "avg":
            out.append(F.sum(c.cast("double")).alias(f"__{name}_sum"))
            out.append(F.count(c).alias(f"__{name}_n"))
        elif kind == "approx_distinct":
            out.append(F.hll_sketch_agg(_sketchable(c, col, schema)).alias(f"__{name}"))
        elif kind == "collect":
            out.append(F.collect_list(c).alias(f"__{name}"))
        elif kind == "count_distinct":
            out.append(F.collect_set(c).alias(f"__{name}"))
        elif kind == "top_k":
            entry = F.struct(*[F.col(x) for x in [*a["by"], *a["columns"]]])
            out.append(_first_k(F.collect_list(entry), a).alias(f"__{name}"))
        else:  # pragma: no cover - guarded by the API
            raise ValueError(f"unknown aggregate kind {kind!r}")
    return out


def _first_k(rows: Column, a: dict[str, Any]) -> Column:
    """The ``k`` first structs of ``rows``: ordered by their fields (the ``by`` columns first)."""
    return F.slice(F.sort_array(rows, asc=bool(a["ascending"])), 1, int(a["k"]))


def merge_exprs(aggs: dict[str, dict[str, Any]]) -> list[Column]:
    """Aggregate expressions over partial rows, producing merged partials."""
    out: list[Column] = []
    for name, a in aggs.items():
        kind = a["kind"]
        for p in _parts(name, kind):
            c = F.col(p)
            if kind in ("count", "sum", "avg"):
                out.append(F.sum(c).alias(p))
            elif kind == "min":
                out.append(F.min(c).alias(p))
            elif kind == "max":
                out.append(F.max(c).alias(p))
            elif kind == "approx_distinct":
                out.append(F.hll_union_agg(c, True).alias(p))
            elif kind == "collect":
                out.append(F.flatten(F.collect_list(c)).alias(p))
            elif kind == "count_distinct":
                out.append(F.array_distinct(F.flatten(F.collect_list(c))).alias(p))
            elif kind == "top_k":
                out.append(_first_k(F.flatten(F.collect_list(c)), a).alias(p))
    return out


def conform(df: DataFrame, like: StructType) -> DataFrame:
    """``df`` with the columns and types of ``like``: merged partials keep the layout of the
    partials they merged (``sum`` over a DECIMAL(p, s) widens the precision by 10 at every
    merge, which would change the state's schema from one snapshot to the next)."""
    have = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    if [(f.name, f.dataType.simpleString()) for f in like.fields] == list(have.items()):
        return df  # already the layout (the common case): no projection to analyse
    return df.select(
        *[
            F.col(f.name) if have[f.name] == f.dataType.simpleString() else F.col(f.name).cast(f.dataType).alias(f.name)
            for f in like.fields
        ]
    )


def final_exprs(aggs: dict[str, dict[str, Any]]) -> list[Column]:
    """Expressions over merged partials giving the user's result columns."""
    out: list[Column] = []
    for name, a in aggs.items():
        kind = a["kind"]
        if kind == "avg":
            out.append((F.col(f"__{name}_sum") / F.col(f"__{name}_n")).alias(name))
        elif kind == "approx_distinct":
            out.append(F.hll_sketch_estimate(F.col(f"__{name}")).alias(name))
        elif kind == "collect":
            out.append(F.array_sort(F.col(f"__{name}")).alias(name))
        elif kind == "count_distinct":
            out.append(F.coalesce(F.size(F.col(f"__{name}")), F.lit(0)).cast("bigint").alias(name))
        elif kind == "count":
            out.append(F.coalesce(F.col(f"__{name}"), F.lit(0)).cast("bigint").alias(name))
        else:
            out.append(F.col(f"__{name}").alias(name))
    return out
