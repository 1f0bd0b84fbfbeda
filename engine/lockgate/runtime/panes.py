"""Sliding windows by pane: each record is aggregated once, into its pane.

A sliding window of size ``S`` every ``D`` is a run of consecutive *panes* of
``gcd(S, D)``: every window boundary is a pane boundary. A sliding windowed aggregate keeps
per-pane partial aggregates in its state (identity: the key and the pane's start, ``__ps``)
instead of one row per window; a record lands in one pane, not in ``ceil(S / D)`` windows.
When the watermark closes windows, their panes are exploded into the windows that hold
them and merged there, which is exact for every mergeable aggregate
(:mod:`lockgate.runtime.aggregates`).

A pane is kept until the last window holding it closes: its start plus ``S`` is past the
watermark (:func:`horizon`). The windows the watermark closes between ``prev`` and ``wm``
are built from the panes starting in ``(prev - S, wm)`` (:func:`closing_panes`).

Example: 10 s windows every 2 s have 2 s panes; a record at 13 s lands in pane [12 s, 14 s),
which the windows starting at 4, 6, 8, 10 and 12 s hold.
"""

from __future__ import annotations

from collections.abc import Callable
from math import gcd
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from . import aggregates as agg
from .state.layers import LayeredState, StateDelta
from .windowing import WE, WS, assign

#: a pane's start (µs), part of a sliding aggregate's state identity
PS = "__ps"
#: marks a merged pane that one of the round's records touched (not kept in state)
_TOUCHED = "__lg_touched"


def pane_us(spec: dict[str, Any]) -> int:
    """The pane length of a sliding window spec: the largest length that divides both the
    size and the slide."""
    return gcd(int(spec["size_us"]), int(spec["slide_us"]))


def pane_start(spec: dict[str, Any], ts: Column) -> Column:
    """The start of the pane that holds instant ``ts`` (µs)."""
    return ts - F.pmod(ts, F.lit(pane_us(spec)))


def closing_panes(spec: dict[str, Any], prev_us: int, wm_us: int) -> Column:
    """The panes of the windows whose end is in ``(prev_us, wm_us]``: starts in
    ``(prev_us - size, wm_us)``."""
    return (F.col(PS) > F.lit(prev_us - spec["size_us"])) & (F.col(PS) < F.lit(wm_us))


def horizon(spec: dict[str, Any], wm_us: int) -> tuple[str, int]:
    """The state's horizon after watermark ``wm_us``: a pane starting at or before
    ``wm_us - size`` is in no window still open."""
    return (PS, wm_us - spec["size_us"] + 1)


def windows_from_panes(
    panes: DataFrame, spec: dict[str, Any], keys: list[str], aggs: dict[str, dict[str, Any]],
    prev_us: int, wm_us: int, layout: StructType,
) -> DataFrame:
    """The merged partials (``keys``, ``__ws``, ``__we``, partial columns) of the windows whose
    end is in ``(prev_us, wm_us]``, from pane partials that include every pane of them
    (``layout``: the panes' schema, already known, so no round looks it up again)."""
    windows = assign(panes, spec, F.col(PS))
    windows = windows.filter((F.col(WE) > F.lit(prev_us)) & (F.col(WE) <= F.lit(wm_us)))
    merged = windows.groupBy(*keys, WS, WE).agg(*agg.merge_exprs(aggs))
    # the partials keep the panes' types (a DECIMAL sum would widen), as a tumbling window's do
    bounds = [StructField(WS, LongType()), StructField(WE, LongType())]
    like = [layout[c] for c in keys] + bounds + [layout[c] for c in agg.partial_columns(aggs)]
    return agg.conform(merged, StructType(like))


def aggregate_by_pane(
    df: DataFrame, ts: Column, cfg: dict[str, Any], state: LayeredState | None, prev_us: int, wm_us: int,
    keep: Callable[[DataFrame], DataFrame],
) -> tuple[StateDelta, DataFrame]:
    """A sliding aggregate's records ``df`` (placed at instant ``ts``) merged into their panes
    and the state's (``state``: None or empty, none yet), for the watermark moving from
    ``prev_us`` to ``wm_us``. Returns the state delta (the touched panes still in an open
    window, and the new horizon) and the merged partials of the windows the watermark closes
    (:func:`windows_from_panes`). ``keep`` persists the merged panes, which both read.

    The state is read once, whole: every live pane starts above the last horizon,
    ``prev_us - size``, which is where :func:`closing_panes` starts too, so the round's read of
    its closing panes is nearly all of the live state anyway. The round's panes and the live ones
    are merged in one aggregation that marks the panes a record touched (the delta); a lookup of
    the touched panes first would broadcast the round's panes, one Spark job more, and read the
    state twice."""
    spec, keys, aggs = cfg["window"], cfg["keys"], cfg["aggs"]
    identity = (*keys, PS)
    new = df.withColumn(PS, pane_start(spec, ts)).groupBy(*identity).agg(*agg.partial_exprs(aggs, df.schema))
    layout = new.schema
    merged = new.withColumn(_TOUCHED, F.lit(True))
    if state is not None and not state.empty:
        live = agg.conform(state.select(identity), layout).withColumn(_TOUCHED, F.lit(False))
        merged = merged.unionByName(live).groupBy(*identity).agg(
            *agg.merge_exprs(aggs), F.max(_TOUCHED).alias(_TOUCHED))
    merged = keep(merged)
    cut = horizon(spec, wm_us)
    touched = agg.conform(merged.filter(F.col(_TOUCHED) & (F.col(PS) >= F.lit(cut[1]))), layout)
    delta = StateDelta(touched, identity, expire_below=cut)
    of_closing = agg.conform(merged.filter(closing_panes(spec, prev_us, wm_us)), layout)
    return delta, windows_from_panes(of_closing, spec, keys, aggs, prev_us, wm_us, layout)
