"""Keyed, stateful operators: windowed aggregate, session windows, running aggregate,
deduplicate and windowed join.

Each operator reads only the state its window needs from the last checkpoint (the rows of
the keys the window touched, and the windows the watermark closes now: see
:class:`~lockgate.runtime.state.layers.LayeredState`), merges it with the window's records,
emits what the watermark has closed, and hands the context what it changed (a
:class:`~lockgate.runtime.state.layers.StateDelta`): the round writes only that. All of it is
plain Spark DataFrame work (shuffles, window functions), so Spark does the distribution.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType

from . import aggregates as agg
from . import panes
from .context import CycleContext
from .state import key_ranges
from .state.key_bounds import KeyBound, bound_for
from .state.layers import StateDelta, anti_join
from .windowing import WE, WS, assign, to_timestamp, window_time


def _closing(ctx: CycleContext) -> Column:
    """Windows the watermark closes in this round: ends in (previous watermark, watermark]."""
    return (F.col(WE) > F.lit(ctx.prev_watermark_us)) & (F.col(WE) <= F.lit(ctx.watermark_us))


def _closed_gone(ctx: CycleContext) -> tuple[str, int]:
    """The horizon of windowed state: windows ending at or before the watermark are gone."""
    return (WE, ctx.watermark_us + 1)


def _held_for_lookup(ctx: CycleContext, partials: DataFrame) -> DataFrame:
    """A window's ``partials``, held for the round because a state lookup takes its keys from them.

    The lookup broadcasts those keys, and a broadcast is a Spark job of its own that runs before
    the round's: without the hold, the partials (and whatever plan feeds them, e.g. q9's join and
    its own lookups) are computed twice a round. Held, q9's rounds run 5 Spark jobs instead of 6
    (measured with the bench's profile, 2026-11; the run is in git's history of ``bench/results``)."""
    return ctx.cache(partials)


def window_aggregate(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str, ts_is_end: bool
) -> DataFrame:
    """Tumbling, sliding or session windows per key; emits closed windows (sliding ones are
    kept by pane: :func:`_sliding_aggregate`)."""
    spec = cfg["window"]
    ts = window_time(spec, ts_col, ts_is_end)
    keys: list[str] = cfg["keys"]
    if spec["type"] == "session":
        return _session_aggregate(ctx, op, cfg, df, ts)
    if spec["type"] == "sliding":
        return _sliding_aggregate(ctx, op, cfg, df, ts)
    aggs = cfg["aggs"]
    identity = [*keys, WS, WE]
    new = assign(df, spec, ts).groupBy(*keys, WS, WE).agg(*agg.partial_exprs(aggs, df.schema))
    state = ctx.state(op)
    merged = new
    closing_untouched = None
    if state is not None:
        # the touched windows' partial aggregates, merged with this window's records; the
        # partials are held (:func:`_held_for_lookup`)
        new = _held_for_lookup(ctx, new)
        old = state.lookup(tuple(identity), new, identity)
        merged = agg.conform(old.unionByName(new).groupBy(*keys, WS, WE).agg(*agg.merge_exprs(aggs)), new.schema)
        # windows the watermark closes now that this window's records did not touch
        closing_untouched = anti_join(state.select(tuple(identity), _closing(ctx)), new, identity)
    merged = ctx.cache(merged)
    wm = F.lit(ctx.watermark_us)
    ctx.set_state(op, StateDelta(merged.filter(F.col(WE) > wm), tuple(identity), expire_below=_closed_gone(ctx)))
    closed = merged.filter(F.col(WE) <= wm)
    if closing_untouched is not None:
        closed = closed.unionByName(closing_untouched)
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *keys,
        *agg.final_exprs(aggs),
    )


def _sliding_aggregate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts: Column) -> DataFrame:
    """A sliding window's aggregate by pane (:mod:`lockgate.runtime.panes`): the window's
    records merged into their panes' partials, the closing windows built from their panes."""
    delta, closed = panes.aggregate_by_pane(df, ts, cfg, ctx.state(op), ctx.prev_watermark_us, ctx.watermark_us,
                                            ctx.cache)
    ctx.set_state(op, delta)
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *cfg["keys"],
        *agg.final_exprs(cfg["aggs"]),
    )


def _session_aggregate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts: Column) -> DataFrame:
    keys: list[str] = cfg["keys"]
    aggs = cfg["aggs"]
    gap = cfg["window"]["gap_us"]
    identity = (*keys, WS, WE)
    # every distinct (key, instant) is a one-instant session [t, t + gap)
    points = (
        df.withColumn(WS, ts)
        .groupBy(*keys, WS)
        .agg(*agg.partial_exprs(aggs, df.schema))
        .withColumn(WE, F.col(WS) + F.lit(gap))
        .select(*keys, WS, WE, *agg.partial_columns(aggs))
    )
    state = ctx.state(op)
    old = None
    spans = points
    if state is not None:
        # every open session of the touched keys: the window's instants may join or bridge them
        old = ctx.cache(state.lookup(identity, points, keys))
        spans = old.unionByName(points)
    order = Window.partitionBy(*keys).orderBy(WS, WE)
    prev_end = F.max(WE).over(order.rowsBetween(Window.unboundedPreceding, -1))
    # sessions that touch merge (a record exactly ``gap`` after the last one joins its session),
    # as Spark's session_window and Flink's merging windows do
    starts_new = F.when(prev_end.isNull() | (F.col(WS) > prev_end), 1).otherwise(0)
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
    # a session closes once the watermark passes its end: one ending exactly at the watermark
    # stays open, since a record at the watermark is on time and touches it
    wm = F.lit(ctx.watermark_us)
    # the touched keys' old sessions are replaced by the merged ones (a tombstone each; an
    # upsert of the same session in the same delta wins over its tombstone)
    deletes = old.select(*identity) if old is not None else None
    ctx.set_state(op, StateDelta(merged.filter(F.col(WE) >= wm), identity, deletes, (WE, ctx.watermark_us)))
    closed = merged.filter(F.col(WE) < wm)
    if state is not None:
        closing = (F.col(WE) >= F.lit(ctx.prev_watermark_us)) & (F.col(WE) < wm)
        closed = closed.unionByName(anti_join(state.select(identity, closing), points, keys))
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *keys,
        *agg.final_exprs(aggs),
    )


def running_aggregate(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, bounds: list[KeyBound] | None = None,
    ranges: dict[str, tuple[int, int]] | None = None,
) -> DataFrame:
    """Totals per key over every window so far; emits the keys touched in this cycle.

    ``bounds``: what is known of ``df``'s key values before it is computed (:mod:`.key_bounds`);
    the state is then looked up by a bound, not by the partials' keys, so the lookup's broadcast
    does not wait for ``df`` (extra rows it reads are untouched keys, dropped below). ``ranges``:
    the (min, max) of ``df``'s integer columns (:mod:`.key_ranges`); the lookup reads only the
    layers' rows in the keys' ranges."""
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
        bound = bound_for(keys, bounds or [])
        if bound is not None:
            old = state.lookup(tuple(keys), bound.keys(), list(bound.columns), key_ranges.on(ranges, bound.columns))
        elif keys:
            new = _held_for_lookup(ctx, new)
            old = state.lookup(tuple(keys), new, keys, key_ranges.on(ranges, keys))
        else:
            old = state.select(())
        merged = agg.conform(
            old.withColumn("__touched", F.lit(0))
            .unionByName(new)
            .groupBy(*keys)
            .agg(*agg.merge_exprs(aggs), F.max("__touched").alias("__touched")),
            new.schema,
        )
    merged = ctx.cache(merged)
    changed = merged.filter(F.col("__touched") == 1)
    ctx.set_state(op, StateDelta(changed.drop("__touched"), tuple(keys)))
    return changed.select(*keys, *agg.final_exprs(aggs), F.timestamp_micros(F.lit(ctx.end_us)).alias("as_of"))


def _sortable(df: DataFrame) -> list[str]:
    return [
        f.name
        for f in df.schema.fields
        if not isinstance(f.dataType, ArrayType | MapType | StructType) and not f.name.startswith("__")
    ]


def deduplicate(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str | None,
    ranges: dict[str, tuple[int, int]] | None = None,
) -> DataFrame:
    """Drop records whose key was seen before; the earliest by event time in a cycle wins
    (``ranges``: the integer columns' ranges of ``df``, :mod:`.key_ranges`)."""
    keys: list[str] = cfg["keys"]
    order_cols = ([ts_col] if ts_col else []) + [c for c in _sortable(df) if c != ts_col]
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(*order_cols))
    first = df.withColumn("__rn", rank).filter(F.col("__rn") == 1).drop("__rn")
    state = ctx.state(op)
    if state is not None:
        first = anti_join(first, state.lookup(tuple(keys), first, keys, key_ranges.on(ranges, keys)), keys)
    first = ctx.cache(first)
    seen_at = F.unix_micros(F.col(ts_col)) if ts_col else F.lit(ctx.end_us)
    seen = first.select(*keys, seen_at.alias("__ts"))
    within = cfg.get("within_us")
    expire = ("__ts", ctx.watermark_us - within) if within else None
    if expire is not None:
        seen = seen.filter(F.col("__ts") >= F.lit(expire[1]))
    ctx.set_state(op, StateDelta(seen, tuple(keys), expire_below=expire))
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
    """Windowed join: both sides buffered per tumbling window until it closes, then joined
    (inner, or ``cfg["how"]`` left/right/full: a window's unmatched records are final when it
    closes, since every record of the window is in the buffers by then)."""
    spec = cfg["window"]
    wm = F.lit(ctx.watermark_us)
    sides = []
    for table, df, (ts_col, is_end) in (("left", left, left_ts), ("right", right, right_ts)):
        assigned = ctx.cache(assign(df, spec, window_time(spec, ts_col, is_end)))
        # a buffer only grows until its window closes: the round appends its records, and
        # reads back only the buffered rows of the windows that close now
        ctx.set_state(op, StateDelta(assigned.filter(F.col(WE) > wm), None, expire_below=_closed_gone(ctx)), table)
        closing = assigned.filter(F.col(WE) <= wm)
        state = ctx.state(op, table)
        if state is not None:
            closing = state.select(None, _closing(ctx)).unionByName(closing)
        sides.append(closing)
    return join_closed(cfg, sides[0], sides[1], left.columns, right.columns)


def join_closed(
    cfg: dict[str, Any], lbuf: DataFrame, rbuf: DataFrame, left_cols: list[str], right_cols: list[str]
) -> DataFrame:
    """The output of a windowed join over the buffered records of closed windows (each side's
    columns ``*_cols`` plus ``__ws``/``__we``): ``window_start, window_end``, the left
    columns, then the right ones."""
    # a left column named like the join's window columns (the left input is itself windowed)
    # gets "_left", a right column named like any of those gets "_right"
    window_cols = {"window_start", "window_end"}
    left_names = {c: (f"{c}_left" if c in window_cols else c) for c in left_cols}
    taken = set(left_names.values()) | window_cols
    right_names = {c: (f"{c}_right" if c in taken else c) for c in right_cols}
    lsel = lbuf.select(*[F.col(c).alias(f"__l_{c}") for c in left_cols], F.col(WS).alias("__lws"),
                       F.col(WE).alias("__lwe"))
    rsel = rbuf.select(*[F.col(c).alias(f"__r_{c}") for c in right_cols], F.col(WS).alias("__rws"),
                       F.col(WE).alias("__rwe"))
    cond = F.col("__lws") == F.col("__rws")
    for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
        cond = cond & (F.col(f"__l_{lk}") == F.col(f"__r_{rk}"))
    how = cfg.get("how", "inner")
    joined = lsel.join(rsel, cond, {"inner": "inner", "left": "left", "right": "right", "full": "full_outer"}[how])
    # an unmatched record's window is its own side's
    return joined.select(
        to_timestamp(F.coalesce(F.col("__lws"), F.col("__rws"))).alias("window_start"),
        to_timestamp(F.coalesce(F.col("__lwe"), F.col("__rwe"))).alias("window_end"),
        *[F.col(f"__l_{c}").alias(left_names[c]) for c in left_cols],
        *[F.col(f"__r_{c}").alias(right_names[c]) for c in right_cols],
    )
