"""Mergeable aggregates on Spark: partial, merge and final expressions.

A windowed or running aggregate keeps *partials* in its state; each cycle aggregates the
new records to partials, merges them with the partials carried in the snapshot, and
finalises the windows that closed. Every kind here merges exactly: counts and sums add,
min/max compare, avg carries (sum, count), approx_distinct carries a HyperLogLog sketch,
collect carries the list.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F


def _parts(name: str, kind: str) -> list[str]:
    if kind == "avg":
        return [f"__{name}_sum", f"__{name}_n"]
    return [f"__{name}"]


def partial_columns(aggs: dict[str, dict[str, Any]]) -> list[str]:
    """Names of the partial columns kept in state, in order."""
    return [p for name, a in aggs.items() for p in _parts(name, a["kind"])]


def partial_exprs(aggs: dict[str, dict[str, Any]]) -> list[Column]:
    """Aggregate expressions over raw records, producing partials."""
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
            out.append(F.hll_sketch_agg(c).alias(f"__{name}"))
        elif kind == "collect":
            out.append(F.collect_list(c).alias(f"__{name}"))
        else:  # pragma: no cover - guarded by the API
            raise ValueError(f"unknown aggregate kind {kind!r}")
    return out


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
    return out


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
        elif kind == "count":
            out.append(F.coalesce(F.col(f"__{name}"), F.lit(0)).cast("bigint").alias(name))
        else:
            out.append(F.col(f"__{name}").alias(name))
    return out
