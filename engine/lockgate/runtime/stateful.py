"""Keyed, stateful operators: windowed aggregate, session windows, running aggregate,
deduplicate and windowed join.

Each operator merges the state carried in the last snapshot with the current cycle's
records, emits what the watermark has closed, and hands the rest to the context as the
state of the next snapshot. All of it is plain Spark DataFrame work (shuffles, window
functions), so Spark does the distribution.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType

from . import aggregates as agg
from .context import CycleContext
from .windowing import WE, WS, assign, to_timestamp, window_time


def _union_state(state: DataFrame | None, new: DataFrame) -> DataFrame:
    return new if state is None else state.unionByName(new)


def window_aggregate(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str, ts_is_end: bool
) -> DataFrame:
    """Tumbling, sliding or session windows per key; emits closed windows."""
    spec = cfg["window"]
    ts = window_time(spec, ts_col, ts_is_end)
    keys: list[str] = cfg["keys"]
    if spec["type"] == "session":
        return _session_aggregate(ctx, op, cfg, df, ts)
    aggs = cfg["aggs"]
    new = assign(df, spec, ts).groupBy(*keys, WS, WE).agg(*agg.partial_exprs(aggs, df.schema))
    state = ctx.state(op)
    merged = new
    if state is not None:
        merged = agg.conform(
            state.unionByName(new).groupBy(*keys, WS, WE).agg(*agg.merge_exprs(aggs)), new.schema
        )
    merged = ctx.cache(merged)
    wm = F.lit(ctx.watermark_us)
    ctx.set_state(op, merged.filter(F.col(WE) > wm))
    closed = merged.filter(F.col(WE) <= wm)
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *keys,
        *agg.final_exprs(aggs),
    )


def _session_aggregate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts: Column) -> DataFrame:
    keys: list[str] = cfg["keys"]
    aggs = cfg["aggs"]
    gap = cfg["window"]["gap_us"]
    # every distinct (key, instant) is a one-instant session [t, t + gap)
    points = (
        df.withColumn(WS, ts)
        .groupBy(*keys, WS)
        .agg(*agg.partial_exprs(aggs, df.schema))
        .withColumn(WE, F.col(WS) + F.lit(gap))
        .select(*keys, WS, WE, *agg.partial_columns(aggs))
    )
    spans = _union_state(ctx.state(op), points)
    order = Window.partitionBy(*keys).orderBy(WS, WE)
    prev_end = F.max(WE).over(order.rowsBetween(Window.unboundedPreceding, -1))
    starts_new = F.when(prev_end.isNull() | (F.col(WS) >= prev_end), 1).otherwise(0)
    session_id = F.sum("__new").over(order.rowsBetween(Window.unboundedPreceding, 0))
    merged = (
        spans.withColumn("__new", starts_new)
        .withColumn("__sid", session_id)
        .groupBy(*keys, "__sid")
        .agg(F.min(WS).alias(WS), F.max(WE).alias(WE), *agg.merge_exprs(aggs))
        .drop("__sid")
    )
    merged = agg.conform(merged, points.schema)
    merged = ctx.cache(merged)
    wm = F.lit(ctx.watermark_us)
    ctx.set_state(op, merged.filter(F.col(WE) > wm))
    return merged.filter(F.col(WE) <= wm).select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *keys,
        *agg.final_exprs(aggs),
    )


def running_aggregate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame) -> DataFrame:
    """Totals per key over every window so far; emits the keys touched in this cycle."""
    keys: list[str] = cfg["keys"]
    aggs = cfg["aggs"]
    # touched: the key had records this cycle (with no keys, the one global group, which
    # Spark's global aggregate returns even when the cycle has no records)
    touched = (F.count(F.lit(1)) > 0).cast("int").alias("__touched")
    new = df.groupBy(*keys).agg(*agg.partial_exprs(aggs, df.schema), touched)
    state = ctx.state(op)
    if state is None:
        merged = new
    else:
        merged = agg.conform(
            state.withColumn("__touched", F.lit(0))
            .unionByName(new)
            .groupBy(*keys)
            .agg(*agg.merge_exprs(aggs), F.max("__touched").alias("__touched")),
            new.schema,
        )
    merged = ctx.cache(merged)
    ctx.set_state(op, merged.drop("__touched"))
    return merged.filter(F.col("__touched") == 1).select(
        *keys, *agg.final_exprs(aggs), F.timestamp_micros(F.lit(ctx.end_us)).alias("as_of")
    )


def _sortable(df: DataFrame) -> list[str]:
    return [
        f.name
        for f in df.schema.fields
        if not isinstance(f.dataType, ArrayType | MapType | StructType) and not f.name.startswith("__")
    ]


def deduplicate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str | None) -> DataFrame:
    """Drop records whose key was seen before; the earliest by event time in a cycle wins."""
    keys: list[str] = cfg["keys"]
    order_cols = ([ts_col] if ts_col else []) + [c for c in _sortable(df) if c != ts_col]
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(*order_cols))
    first = df.withColumn("__rn", rank).filter(F.col("__rn") == 1).drop("__rn")
    state = ctx.state(op)
    if state is not None:
        cond = None
        for k in keys:
            c = first[k].eqNullSafe(state[k])
            cond = c if cond is None else cond & c
        first = first.join(state, cond, "left_anti")
    first = ctx.cache(first)
    seen_at = F.unix_micros(F.col(ts_col)) if ts_col else F.lit(ctx.end_us)
    seen = first.select(*keys, seen_at.alias("__ts"))
    new_state = seen if state is None else state.unionByName(seen)
    if cfg.get("within_us"):
        new_state = new_state.filter(F.col("__ts") >= F.lit(ctx.watermark_us - cfg["within_us"]))
    ctx.set_state(op, new_state)
    return first


def join(
    ctx: CycleContext,
    op: str,
    cfg: dict[str, Any],
    left: DataFrame,
    right: DataFrame,
    left_ts: tuple[str, bool],
    right_ts: tuple[str, bool],
) -> DataFrame:
    """Windowed inner join: both sides buffered per tumbling window until it closes."""
    spec = cfg["window"]
    wm = F.lit(ctx.watermark_us)
    sides = []
    for table, df, (ts_col, is_end) in (("left", left, left_ts), ("right", right, right_ts)):
        assigned = assign(df, spec, window_time(spec, ts_col, is_end))
        buffered = ctx.cache(_union_state(ctx.state(op, table), assigned))
        ctx.set_state(op, buffered.filter(F.col(WE) > wm), table)
        sides.append(buffered.filter(F.col(WE) <= wm))
    lbuf, rbuf = sides
    # output: window_start, window_end, the left columns, then the right ones; a left
    # column named like the join's window columns (the left input is itself windowed)
    # gets "_left", a right column named like any of those gets "_right"
    window_cols = {"window_start", "window_end"}
    left_names = {c: (f"{c}_left" if c in window_cols else c) for c in left.columns}
    taken = set(left_names.values()) | window_cols
    right_names = {c: (f"{c}_right" if c in taken else c) for c in right.columns}
    lsel = lbuf.select(*[F.col(c).alias(f"__l_{c}") for c in left.columns], F.col(WS).alias("__lws"), WE)
    rsel = rbuf.select(*[F.col(c).alias(f"__r_{c}") for c in right.columns], F.col(WS).alias("__rws"))
    cond = F.col("__lws") == F.col("__rws")
    for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
        cond = cond & (F.col(f"__l_{lk}") == F.col(f"__r_{rk}"))
    joined = lsel.join(rsel, cond, "inner")
    return joined.select(
        to_timestamp("__lws").alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *[F.col(f"__l_{c}").alias(left_names[c]) for c in left.columns],
        *[F.col(f"__r_{c}").alias(right_names[c]) for c in right.columns],
    )
