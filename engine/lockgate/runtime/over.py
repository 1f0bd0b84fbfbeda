"""OVER aggregation per key in event time: every record with aggregates over the records of
its key before it, ``ROWS BETWEEN n PRECEDING AND CURRENT ROW`` or ``RANGE BETWEEN interval
PRECEDING AND CURRENT ROW`` (Flink's OVER windows on a rowtime attribute).

A record is emitted once the watermark passes its event time (then no record before it can
still arrive), in event-time order; ties are ordered by the other columns, so a replay
emits the same rows. Two state tables:

- ``pending``: records at or above the watermark, waiting (append-only; a record leaves by
  the horizon once the watermark passes it, in the round that emits it);
- ``history``: what later records' frames need: the last ``n`` emitted records per key
  (ROWS: upserted by position ``1..n``, newest first; the kept count only grows, so no
  tombstones) or the emitted records within ``interval`` of the watermark (RANGE).

Every emitted record lies in ``[previous watermark, watermark)``, so it is on time for a
window downstream: the output keeps the input's event time.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .context import CycleContext
from .state.layers import StateDelta
from .windowing import event_micros

#: a record's event time (µs) and, in ROWS history, its position (1 = the key's latest)
T, POS = "__lg_t", "__lg_pos"
#: aggregate kinds an OVER frame computes
KINDS = ("count", "sum", "min", "max", "avg", "collect")


def _frame_agg(kind: str, column: str | None, frame: Window) -> Column:
    c = F.col(column) if column else None
    if kind == "count":
        return F.count(c if c is not None else F.lit(1)).over(frame)
    if kind == "collect":
        return F.sort_array(F.collect_list(c).over(frame))
    return {"sum": F.sum, "min": F.min, "max": F.max, "avg": F.avg}[kind](c).over(frame)


def over_aggregate(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str, ts_is_end: bool
) -> DataFrame:
    """The records the watermark passes this round, each with its frame's aggregates."""
    keys: list[str] = cfg["keys"]
    columns = list(df.columns)
    wm = ctx.watermark_us
    new = df.withColumn(T, event_micros(ts_col, ts_is_end))
    pending = ctx.state(op, "pending")
    waiting = new
    if pending is not None and not pending.empty:
        waiting = pending.select(None).unionByName(new)
    waiting = ctx.cache(waiting)
    ctx.set_state(op, StateDelta(new.filter(F.col(T) >= F.lit(wm)), None, expire_below=(T, wm)), "pending")
    ready = waiting.filter(F.col(T) < F.lit(wm))

    rows = cfg.get("rows")
    history = ctx.state(op, "history")
    past = None
    if history is not None and not history.empty:
        identity = (*keys, POS) if rows is not None else None
        past = history.lookup(identity, ready.select(*keys).distinct(), keys).select(*columns, T)
    order = [F.col(T).asc(), *[F.col(c).asc_nulls_first() for c in columns]]
    spec = Window.partitionBy(*keys).orderBy(*order)
    if rows is not None:
        frame = spec.rowsBetween(-int(rows), Window.currentRow)
    else:
        frame = Window.partitionBy(*keys).orderBy(F.col(T)).rangeBetween(-int(cfg["range_us"]), Window.currentRow)
    both = ready.withColumn("__lg_new", F.lit(True))
    if past is not None:
        both = past.withColumn("__lg_new", F.lit(False)).unionByName(both)
    both = ctx.cache(both)
    aggs = cfg["aggs"]
    computed = both.select(
        *columns, T, "__lg_new",
        *[_frame_agg(a["kind"], a["column"], frame).alias(name) for name, a in aggs.items()],
    )
    if rows is not None:
        # the reverse of the frame's order: position 1 is the key's latest record
        latest = Window.partitionBy(*keys).orderBy(F.col(T).desc(), *[F.col(c).desc_nulls_last() for c in columns])
        kept = both.withColumn(POS, F.row_number().over(latest)).filter(F.col(POS) <= F.lit(int(rows)))
        ctx.set_state(op, StateDelta(kept.select(*columns, T, POS), (*keys, POS)), "history")
    else:
        ctx.set_state(op, StateDelta(ready.select(*columns, T).filter(F.col(T) >= F.lit(wm - int(cfg["range_us"]))),
                                     None, expire_below=(T, wm - int(cfg["range_us"]))), "history")
    return computed.filter(F.col("__lg_new")).select(*columns, *aggs.keys())


__all__ = ["KINDS", "over_aggregate"]
