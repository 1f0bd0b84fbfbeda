"""Interval join of two streams: pairs with equal keys whose event times lie within bounds,
``right.ts + lower <= left.ts <= right.ts + upper``, emitted in the round the second record
of the pair arrives (no wait for a window to close).

Each side keeps its records in an append-only state table only while a later record of the
other side could still match them. Records that arrive later are not below the watermark
(late ones are dropped where they are read), so a left record is needed while
``left.ts - lower >= watermark`` and a right record while ``right.ts + upper >= watermark``:
the state is bounded by the bounds and the watermark, whatever the key count. A round reads
back only the kept records of the keys its records carry.

An outer join (``how="left"``, ``"right"`` or ``"full"``) also emits each record of its
outer side(s) that never matched, with the other side's columns null, in the round the record
leaves the state: then the watermark has made it final (no later record can match it). The other
side is kept that much longer (until the outer records it could match have left).

A join with a time-to-live (``ttl=``) is the symmetric interval ``[-ttl, +ttl]``: records
more than ``ttl`` apart in event time do not join, which keeps the result the same on every
replay (a state TTL counted in processing time would not).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .context import CycleContext
from .state import key_ranges
from .state.key_bounds import inner_join_bounds
from .state.layers import StateDelta
from .windowing import event_micros

#: a record's event time in microseconds, kept beside its columns in the state
T = "__lg_t"


def output_names(left: list[str], right: list[str]) -> dict[str, str]:
    """The right side's output names: a column named like a left one gets ``_right``."""
    return {c: (f"{c}_right" if c in left else c) for c in right}


def _renamed(df: DataFrame, cols: list[str], names: list[str], in_order: bool) -> DataFrame:
    """``df``'s columns ``cols`` renamed to ``names``; ``in_order``: they are all of ``df``'s
    columns, in that order, so one ``toDF`` renames them (a select of aliased columns costs
    three Py4J calls a column, ``toDF`` one)."""
    if in_order:
        return df.toDF(*names)
    return df.select(*[F.col(c).alias(n) for c, n in zip(cols, names, strict=True)])


def _keys_of(df: DataFrame, cols: list[str], as_: list[str]) -> DataFrame:
    return df.select(*[F.col(c).alias(a) for c, a in zip(cols, as_, strict=True)]).distinct()


def interval_join(
    ctx: CycleContext,
    op: str,
    cfg: dict[str, Any],
    left: DataFrame,
    right: DataFrame,
    left_ts: tuple[str, bool],
    right_ts: tuple[str, bool],
    ranges: tuple[dict[str, tuple[int, int]] | None, dict[str, tuple[int, int]] | None] = (None, None),
) -> DataFrame:
    """The pairs this round completes (each side's new records join the other side's kept
    records and its new ones, new with new once) and, for an outer join, the records that
    leave the state this round without ever having matched, with the other side's columns null.
    ``ranges``: the integer columns' ranges of each side's new records (:mod:`.key_ranges`): a
    side's state is looked up by the other side's new keys within their range."""
    lower, upper = int(cfg["lower_us"]), int(cfg["upper_us"])
    how = cfg.get("how", "inner")
    left_on, right_on = list(cfg["left_on"]), list(cfg["right_on"])
    lcols, rcols = list(left.columns), list(right.columns)
    new_l = ctx.cache(left.withColumn(T, event_micros(*left_ts)))
    new_r = ctx.cache(right.withColumn(T, event_micros(*right_ts)))
    prev, wm = ctx.prev_watermark_us, ctx.watermark_us
    # a record is kept while one of the other side arriving later (event time >= watermark)
    # can match it: left while ts >= wm + lower, right while ts >= wm - upper. An outer side's
    # records are judged unmatched when they leave; the other side is kept as long as it could
    # have matched them (ts >= wm + lower - upper)
    l_keep = lower + (min(0, -upper) if how in ("right", "full") else 0)
    r_keep = -upper + (min(0, lower) if how in ("left", "full") else 0)
    # each side's buffer is looked up by its keys: its layers are sorted by them
    ctx.set_state(op, StateDelta(new_l.filter(F.col(T) >= F.lit(wm + l_keep)), None,
                                 expire_below=(T, wm + l_keep), sort_by=tuple(left_on)), "left")
    ctx.set_state(op, StateDelta(new_r.filter(F.col(T) >= F.lit(wm + r_keep)), None,
                                 expire_below=(T, wm + r_keep), sort_by=tuple(right_on)), "right")
    l_state, r_state = ctx.state(op, "left"), ctx.state(op, "right")
    l_state = None if l_state is None or l_state.empty else l_state
    r_state = None if r_state is None or r_state.empty else r_state
    rnames = output_names(lcols, rcols)
    # the keys of both sides' new records, under the left key's name and the right key's output
    # name (the last bound: both names when they differ); no frame is built until one is used
    bounds = inner_join_bounds(new_l, new_r, left_on, right_on, rnames)
    if how == "inner" and not ctx.analysis:
        # every pair holds a new record, its keys equal: the output's keys are the new records'
        ctx.key_bounds[op] = bounds
        out_ranges = key_ranges.join_output(ranges[0], ranges[1], left_on, right_on, rnames)
        if out_ranges:
            ctx.key_ranges[op] = out_ranges
    # each side's state is looked up by the other side's new keys: within those keys' ranges
    r_ranges = key_ranges.renamed(ranges[0], left_on, right_on)
    l_ranges = key_ranges.renamed(ranges[1], right_on, left_on)

    def cond() -> Column:
        c: Column = (F.col(f"__l_{T}") >= F.col(f"__r_{T}") + F.lit(lower)) & (
            F.col(f"__l_{T}") <= F.col(f"__r_{T}") + F.lit(upper))
        for lk, rk in zip(left_on, right_on, strict=True):
            c = c & (F.col(f"__l_{lk}") == F.col(f"__r_{rk}"))
        return c

    lside, rside = [*lcols, T], [*rcols, T]
    # every frame of a side is its new records (lside: T appended) or rows of its state, whose
    # columns are the state's schema (known here, no Py4J call): in order when that is lside
    l_in_order = l_state is None or l_state.schema.names == lside
    r_in_order = r_state is None or r_state.schema.names == rside

    def sides(lf: DataFrame, rf: DataFrame) -> tuple[DataFrame, DataFrame]:
        return (_renamed(lf, lside, [f"__l_{c}" for c in lside], l_in_order),
                _renamed(rf, rside, [f"__r_{c}" for c in rside], r_in_order))

    def pairs(lf: DataFrame, rf: DataFrame) -> DataFrame:
        ls, rs = sides(lf, rf)
        # an inner join's columns are the left side's, then the right's: drop the two times, rename
        return ls.join(rs, cond(), "inner").drop(f"__l_{T}", f"__r_{T}").toDF(
            *lcols, *[rnames[c] for c in rcols])

    out = pairs(new_l, new_r)
    # both sides' states are looked up by the keys of both sides' new records: a superset of the
    # keys each lookup needs (a state row of a key only its own side's new records carry matches
    # none of the other side's), so both broadcast one plan, which the round runs once; a running
    # aggregate keyed by the join's output keys looks its own state up by the same keys
    # (:mod:`.key_bounds`), so the round's three lookups share one broadcast
    shared = bounds[-1]
    if r_state is not None or l_state is not None:
        keys, keys_on = shared.keys(), list(shared.columns)
        if r_state is not None:
            out = out.unionByName(pairs(new_l, r_state.lookup(None, keys, right_on, r_ranges, keys_on=keys_on)))
        if l_state is not None:
            out = out.unionByName(pairs(l_state.lookup(None, keys, left_on, l_ranges, keys_on=keys_on), new_r))
    if how in ("left", "full"):
        # left records no later right can match any more: kept ones whose time passed, new ones too old
        leaving = new_l.filter(F.col(T) < F.lit(wm + lower))
        if l_state is not None:
            leaving = l_state.select(None, (F.col(T) >= F.lit(prev + lower)) & (F.col(T) < F.lit(wm + lower))
                                     ).unionByName(leaving)
        candidates = new_r
        if r_state is not None:
            candidates = r_state.lookup(None, _keys_of(leaving, left_on, right_on), right_on).unionByName(new_r)
        ls, rs = sides(leaving, candidates)
        lone = ls.join(rs, cond(), "left_anti")
        out = out.unionByName(lone.select(*[F.col(f"__l_{c}").alias(c) for c in lcols],
                                          *[F.lit(None).cast(right.schema[c].dataType).alias(rnames[c]) for c in rcols]))
    if how in ("right", "full"):
        leaving = new_r.filter(F.col(T) < F.lit(wm - upper))
        if r_state is not None:
            leaving = r_state.select(None, (F.col(T) >= F.lit(prev - upper)) & (F.col(T) < F.lit(wm - upper))
                                     ).unionByName(leaving)
        candidates = new_l
        if l_state is not None:
            candidates = l_state.lookup(None, _keys_of(leaving, right_on, left_on), left_on).unionByName(new_l)
        ls, rs = sides(candidates, leaving)
        lone = rs.join(ls, cond(), "left_anti")
        out = out.unionByName(lone.select(*[F.lit(None).cast(left.schema[c].dataType).alias(c) for c in lcols],
                                          *[F.col(f"__r_{c}").alias(rnames[c]) for c in rcols]))
    return out


__all__ = ["T", "interval_join", "output_names"]
