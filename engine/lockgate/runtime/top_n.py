"""Windowed top-N: the ``n`` first records per key and window by an order, emitted when the
watermark closes the window.

The state holds at most ``n`` rows per key and window (ranked ``1..n``), never every record
seen: a round ranks its window's records together with the touched groups' kept rows and
keeps the ``n`` best again. A group's kept count only grows (more candidates never make
fewer), so upserting by ``(keys, window, rank)`` replaces it exactly, without tombstones.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .context import CycleContext
from .state.layers import StateDelta, anti_join
from .stateful import _closed_gone, _closing
from .windowing import WE, WS, assign, to_timestamp, window_time

#: the rank column of the state (and, named by the operator's ``rank`` option, of the output)
RANK = "__rank"


def order_columns(cfg: dict[str, Any], columns: list[str]) -> list[Column]:
    """The total order of the ranking: ``by`` columns first (descending unless ``ascending``),
    then every other column ascending, so ties are broken the same way on every replay."""
    by: list[str] = cfg["by"]
    asc = cfg["ascending"]
    directions = asc if isinstance(asc, list) else [asc] * len(by)
    first = [F.col(c).asc_nulls_last() if a else F.col(c).desc_nulls_last() for c, a in zip(by, directions, strict=True)]
    rest = [F.col(c).asc_nulls_first() for c in columns if c not in by]
    return first + rest


def window_top_n(
    ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame, ts_col: str, ts_is_end: bool
) -> DataFrame:
    """The top ``cfg['n']`` records per key and tumbling or sliding window."""
    spec = cfg["window"]
    keys: list[str] = cfg["keys"]
    columns = list(df.columns)
    group = [*keys, WS, WE]
    identity = (*group, RANK)
    new = assign(df, spec, window_time(spec, ts_col, ts_is_end)).withColumn(RANK, F.lit(None).cast("int"))
    state = ctx.state(op)
    candidates = new
    closing_untouched = None
    if state is not None:
        old = state.lookup(identity, new.select(*group).distinct(), group)
        candidates = old.unionByName(new)
        closing_untouched = anti_join(state.select(identity, _closing(ctx)), new, group)
    ranked = ctx.cache(
        candidates.withColumn(RANK, F.row_number().over(Window.partitionBy(*group).orderBy(
            *order_columns(cfg, columns))))
        .filter(F.col(RANK) <= F.lit(cfg["n"]))
        .select(*columns, WS, WE, RANK)
    )
    wm = F.lit(ctx.watermark_us)
    ctx.set_state(op, StateDelta(ranked.filter(F.col(WE) > wm), identity, expire_below=_closed_gone(ctx)))
    closed = ranked.filter(F.col(WE) <= wm)
    if closing_untouched is not None:
        closed = closed.unionByName(closing_untouched.select(*columns, WS, WE, RANK))
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *columns,
        F.col(RANK).alias(cfg["rank"]),
    )


__all__ = ["RANK", "order_columns", "window_top_n"]
