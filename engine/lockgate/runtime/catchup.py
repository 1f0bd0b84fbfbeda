"""A catch-up group in one pass: the DataFrames of many consecutive cycle windows built as one.

Running window after window costs a round's fixed price each time (a Spark job per state table
and sink, a snapshot, the catalog). For a plan whose every operator is *window-exact* (its
output for a window depends only on which window each record arrived in and on the clock's
watermarks, never on what happened at the boundaries between rounds), the whole group is one
DataFrame computation instead:

- each source's records of the group are read once and tagged with their cycle window
  (``__lg_w``, from the slice column), and records that window's watermark makes late are
  dropped there, exactly as the window's own round would;
- stateless operators (``select``, ``with_column``, ``filter``, ``union``) carry the tag;
- a tumbling or sliding windowed aggregate merges the group's records with the state's touched
  windows (a sliding one: panes, :mod:`lockgate.runtime.panes`) in one aggregation and tags each
  result with the cycle whose watermark closes it:
  the first window ``c`` with ``end(c) - lateness >= window_end``. A record that arrives after
  that cycle is late (dropped at the head), so each result holds exactly what the window's own
  round would have emitted. The windows still open after the group are its state delta.
- a tumbling windowed join buffers both sides' records of the windows still open after the group
  (its state delta), and joins every window the group closes at once: the state's buffered
  records of those windows and the group's own, each result tagged with the cycle that closes
  its window, which is the round that would have emitted it.

So a group costs one Spark job per sink and state table, whatever its size; sinks still stage each
window's output on its own (split by the tag). A windowed aggregate's merged windows are cached for
the group (its state delta and its output both read them; computing them twice costs more). A
windowed join's records are not: its delta (the windows still open, none when windows end on cycle
boundaries) is counted first, reading the time column alone, and written only when it holds rows
(bench.backfill W3, a 64-window group: caching both sides' records took 3.0 s, reading them twice
and counting 1.2 s), or not even counted where the plan proves it empty (:func:`opens_no_window`). :func:`one_pass` says whether a plan
qualifies; the windows of other plans' groups run as rounds of their own (or, replaying a derived
checkpoint, window by window in memory: :meth:`lockgate.runtime.cycle.CycleRunner.run_group`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..plan.logical import PipelineGraph, PipelineVertex
from ..plan.one_pass import one_pass
from . import aggregates as agg
from . import panes
from .availability import slice_column, slices_by_arrival
from .invalid import clean
from .sources import SourceSpan
from .state.layers import LayeredState, StateDelta
from .stateful import join_closed
from .windowing import WE, WS, assign, to_timestamp, window_time

#: the cycle window a record arrived in, or a result is emitted in
TAG = "__lg_w"

@dataclass
class Span:
    """The windows ``first..last`` of one pass, and the clock that places them."""

    first: int
    last: int
    origin_us: int
    size_us: int
    lateness_us: int
    #: what each stateful table changed over the span
    deltas: dict[str, StateDelta] = field(default_factory=dict)

    def start(self, window: int) -> int:
        return self.origin_us + window * self.size_us

    @property
    def prev_watermark_us(self) -> int:
        """The watermark before the span's first window."""
        return self.start(self.first) - self.lateness_us

    @property
    def watermark_us(self) -> int:
        """The watermark after the span's last window."""
        return self.start(self.last + 1) - self.lateness_us

    def window_of(self, micros: Column) -> Column:
        """The cycle window holding instant ``micros``."""
        return F.floor((micros - F.lit(self.origin_us)) / F.lit(self.size_us)).cast("long")

    def closes(self, window_end: Column) -> Column:
        """The first cycle window whose watermark reaches ``window_end`` (µs)."""
        x = window_end + F.lit(self.lateness_us - self.origin_us) - F.lit(1)
        return F.floor(x / F.lit(self.size_us)).cast("long")


def tagged_head(span: Span, source: SourceSpan) -> DataFrame:
    """A source's records of the span, tagged with their cycle window, late ones dropped."""
    cfg = source.cfg
    if source.df is not None:
        df = source.df
    else:  # produced on the driver: one slice for the whole span
        df = source.slice(span.start(span.first), span.start(span.last + 1)).df
    df = clean(df).withColumn(TAG, span.window_of(F.unix_micros(F.col(slice_column(cfg)))))
    if slices_by_arrival(cfg):
        prev_wm = F.col(TAG) * F.lit(span.size_us) + F.lit(span.origin_us - span.lateness_us)
        df = df.filter(F.unix_micros(F.col(cfg["event_time"])) >= prev_wm)
    return df


def _window_aggregate(
    span: Span, v: PipelineVertex, df: DataFrame, ts_col: str, ts_is_end: bool, state: LayeredState | None,
    keep: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    cfg = v.config
    spec, keys, aggs = cfg["window"], cfg["keys"], cfg["aggs"]
    if spec["type"] == "sliding":
        return _sliding_aggregate(span, v, df, window_time(spec, ts_col, ts_is_end), state, keep)
    identity = [*keys, WS, WE]
    new = assign(df, spec, window_time(spec, ts_col, ts_is_end)).groupBy(*identity).agg(
        *agg.partial_exprs(aggs, df.schema)
    )
    merged = new
    if state is not None and not state.empty:
        old = state.lookup(tuple(identity), new, identity)
        merged = agg.conform(old.unionByName(new).groupBy(*identity).agg(*agg.merge_exprs(aggs)), new.schema)
        # windows of the state that the span's watermarks close and its records did not touch
        closing = (F.col(WE) > F.lit(span.prev_watermark_us)) & (F.col(WE) <= F.lit(span.watermark_us))
        right = new.select(*[F.col(c).alias(f"__lg_o_{c}") for c in identity]).distinct()
        cond = None
        for c in identity:
            term = F.col(c).eqNullSafe(right[f"__lg_o_{c}"])
            cond = term if cond is None else cond & term
        untouched = state.select(tuple(identity), closing)
        merged = merged.unionByName(agg.conform(untouched.join(right, cond, "left_anti"), new.schema))
    merged = keep(merged.withColumn(TAG, F.greatest(span.closes(F.col(WE)), F.lit(span.first))))
    span.deltas[f"{v.id}.main"] = StateDelta(
        merged.filter(F.col(TAG) > F.lit(span.last)).drop(TAG), tuple(identity), expire_below=(WE, span.watermark_us + 1)
    )
    return merged.filter(F.col(TAG) <= F.lit(span.last)).select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *keys,
        *agg.final_exprs(aggs),
        TAG,
    )


def _sliding_aggregate(
    span: Span, v: PipelineVertex, df: DataFrame, ts: Column, state: LayeredState | None,
    keep: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    """The span's records merged into their panes; every window the span closes built from
    its panes and tagged with the cycle that closes it (:mod:`lockgate.runtime.panes`)."""
    cfg = v.config
    delta, closed = panes.aggregate_by_pane(df, ts, cfg, state, span.prev_watermark_us, span.watermark_us, keep)
    span.deltas[f"{v.id}.main"] = delta
    return closed.select(
        to_timestamp(WS).alias("window_start"),
        to_timestamp(WE).alias("window_end"),
        *cfg["keys"],
        *agg.final_exprs(cfg["aggs"]),
        F.greatest(span.closes(F.col(WE)), F.lit(span.first)).alias(TAG),
    )


def opens_no_window(span: Span, spec: dict[str, Any], up: PipelineVertex) -> bool:
    """True when no record that source ``up`` gives the span can fall in a tumbling window still
    open after it, so a windowed join buffers none of them: the join reads the source itself,
    which slices by the event time the window is on (every record of the span is before its
    end), the watermark has no lateness, and the span ends on a window boundary. The join's
    state is then not counted before it is written (bench.backfill W3: two count jobs, 0.2 s
    of a 64-window group's 0.8 s)."""
    if up.op != "source" or span.lateness_us != 0 or spec["type"] != "tumbling":
        return False
    cfg = up.config["source"]
    event_time = cfg.get("event_time")
    return (bool(event_time) and not slices_by_arrival(cfg) and slice_column(cfg) == event_time
            and up.event_time == event_time and not up.event_time_is_end
            and spec.get("on") in (None, event_time) and span.watermark_us % spec["size_us"] == 0)


def _window_join(
    span: Span, graph: PipelineGraph, v: PipelineVertex, inputs: list[DataFrame], state: Mapping[str, LayeredState],
) -> DataFrame:
    cfg = v.config
    spec = cfg["window"]
    wm = F.lit(span.watermark_us)
    closing = (F.col(WE) > F.lit(span.prev_watermark_us)) & (F.col(WE) <= wm)
    sides, columns = [], []
    for i, (table, df) in enumerate((("left", inputs[0]), ("right", inputs[1]))):
        up = graph.vertices[graph.inputs(v.id)[i].source]
        df = df.drop(TAG)
        assigned = assign(df, spec, window_time(spec, up.event_time or "", up.event_time_is_end))
        span.deltas[f"{v.id}.{table}"] = StateDelta(
            assigned.filter(F.col(WE) > wm), None, expire_below=(WE, span.watermark_us + 1), count_first=True,
            empty=opens_no_window(span, spec, up),
        )
        closed = assigned.filter(F.col(WE) <= wm)
        old = state.get(f"{v.id}.{table}")
        if old is not None and not old.empty:
            closed = old.select(None, closing).unionByName(closed)
        sides.append(closed)
        columns.append(df.columns)
    out = join_closed(cfg, sides[0], sides[1], columns[0], columns[1])
    return out.withColumn(TAG, F.greatest(span.closes(F.unix_micros(F.col("window_end"))), F.lit(span.first)))


def translate_span(
    span: Span,
    graph: PipelineGraph,
    v: PipelineVertex,
    inputs: list[DataFrame],
    state: Mapping[str, LayeredState],
    keep: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    """The tagged output of vertex ``v`` over the whole span (``one_pass`` plans only)."""
    cfg = v.config
    df = inputs[0] if inputs else None
    if v.op == "select":
        exprs = cfg["exprs"]
        return df.selectExpr(*exprs) if "*" in exprs else df.selectExpr(*exprs, TAG)
    if v.op == "with_column":
        return df.withColumn(cfg["column"], F.expr(cfg["expr"]))
    if v.op == "filter":
        return df.filter(F.expr(cfg["condition"]))
    if v.op == "union":
        out = inputs[0]
        for other in inputs[1:]:
            out = out.unionByName(other)
        return out
    if v.op == "window_aggregate":
        up = graph.vertices[graph.inputs(v.id)[0].source]
        return _window_aggregate(span, v, df, up.event_time or "", up.event_time_is_end, state.get(f"{v.id}.main"), keep)
    if v.op == "join":
        return _window_join(span, graph, v, inputs, state)
    if v.op == "sink":
        return df
    raise ValueError(f"operator {v.id}: {v.op!r} has no one-pass form")


__all__ = ["TAG", "Span", "one_pass", "tagged_head", "translate_span"]
