"""Translating plan operators to Spark DataFrame operations.

:func:`translate` maps one vertex of the PipelineGraph, given its input DataFrames, to its
output DataFrame. The same code runs at compile time on empty inputs (to infer every
operator's schema and state layout through Spark's own analyzer) and in every cycle
round, so a plan that compiles is a plan that runs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..plan.logical import Partitioning, PipelineGraph, PipelineVertex
from ..plan.physical import Cycle
from . import stateful
from .context import CycleContext
from .interval_join import interval_join
from .iteration import graph_compute, graph_traverse
from .lookup import lookup_join
from .over import over_aggregate
from .state import key_ranges
from .state.key_bounds import passed
from .table_aggregate import table_aggregate
from .top_n import window_top_n

_SQL_VIEW_LOCK = threading.Lock()

#: prefix of the module names :func:`lockgate.api.loader.load_pipeline` gives pipeline files
_FILE_MODULE_PREFIX = "lockgate_pipeline_"


def _pickle_by_value(fn: Callable[..., Any]) -> None:
    """Make Spark ship ``fn`` with its code when it was defined in a pipeline *file*.

    A pipeline file is imported under a synthetic module name that Python workers cannot
    import, and cloudpickle pickles functions of importable-looking modules by reference,
    so a worker would fail with ``No module named 'lockgate_pipeline_...'``.
    """
    from pyspark import cloudpickle

    name = getattr(fn, "__module__", None) or ""
    module = sys.modules.get(name)
    if module is not None and name.startswith(_FILE_MODULE_PREFIX):
        cloudpickle.register_pickle_by_value(module)


def _arrow_mapper(fn: Callable[[pa.RecordBatch], Any]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    _pickle_by_value(fn)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = fn(batch)
            if isinstance(out, pa.Table):
                yield from out.to_batches()
            elif out is not None:
                yield out

    return run


def translate(
    ctx: CycleContext,
    graph: PipelineGraph,
    v: PipelineVertex,
    inputs: list[DataFrame],
    fns: Mapping[str, Callable[..., Any]],
    iteration: Cycle | None = None,
) -> DataFrame:
    """The output DataFrame of vertex ``v`` for this cycle round (an ITERATOR operator runs its
    ``iteration`` cycle, the supersteps nested in the round)."""
    cfg = v.config
    edges = graph.inputs(v.id)
    if len(edges) == 1 and ctx.key_bounds.get(edges[0].source):
        bounds = passed(v.op, cfg, ctx.key_bounds[edges[0].source])
        if bounds:
            ctx.key_bounds[v.id] = bounds
    if len(edges) == 1 and ctx.key_ranges.get(edges[0].source):
        ranges = key_ranges.passed(v.op, cfg, ctx.key_ranges[edges[0].source])
        if ranges:
            ctx.key_ranges[v.id] = ranges
    df = inputs[0] if inputs else None
    if edges and edges[0].partitioning == Partitioning.KEY and v.op in ("map_batches", "sql", "filter", "select"):
        df = df.repartition(v.parallelism, *edges[0].keys)

    def ts_of(i: int) -> tuple[str | None, bool]:
        up = graph.vertices[edges[i].source]
        return up.event_time, up.event_time_is_end

    if v.op == "select":
        return df.selectExpr(*cfg["exprs"])
    if v.op == "with_column":
        return df.withColumn(cfg["column"], F.expr(cfg["expr"]))
    if v.op == "filter":
        return df.filter(F.expr(cfg["condition"]))
    if v.op == "map_batches":
        schema = StructType.fromDDL(cfg["schema"]) if cfg.get("schema") else df.schema
        return df.mapInArrow(_arrow_mapper(fns[v.id]), schema)
    if v.op == "sql":
        # the view is session-wide: hold it while the query is analysed (spark.sql resolves
        # views eagerly), so sql operators of jobs on other threads cannot swap it meanwhile
        with _SQL_VIEW_LOCK:
            df.createOrReplaceTempView("input")
            return ctx.spark.sql(cfg["query"])
    if v.op == "union":
        out = inputs[0]
        for other in inputs[1:]:
            out = out.unionByName(other)
        return out
    if v.op == "window_aggregate":
        ts, is_end = ts_of(0)
        return stateful.window_aggregate(ctx, v.id, cfg, df, ts or "", is_end)
    if v.op == "window_top_n":
        ts, is_end = ts_of(0)
        return window_top_n(ctx, v.id, cfg, df, ts or "", is_end)
    if v.op == "over_aggregate":
        ts, is_end = ts_of(0)
        return over_aggregate(ctx, v.id, cfg, df, ts or "", is_end)
    if v.op == "running_aggregate":
        if cfg.get("over_updates") is not None:
            return table_aggregate(ctx, v.id, cfg, df)
        return stateful.running_aggregate(ctx, v.id, cfg, df, ctx.key_bounds.get(edges[0].source, []),
                                          ctx.key_ranges.get(edges[0].source))
    if v.op == "deduplicate":
        return stateful.deduplicate(ctx, v.id, cfg, df, ts_of(0)[0], ctx.key_ranges.get(edges[0].source))
    if v.op == "join":
        return stateful.join(ctx, v.id, cfg, inputs[0], inputs[1], ts_of(0), ts_of(1))  # type: ignore[arg-type]
    if v.op == "lookup_join":
        return lookup_join(ctx.spark, cfg, df, ctx.analysis)
    if v.op == "interval_join":
        ranges = (ctx.key_ranges.get(edges[0].source), ctx.key_ranges.get(edges[1].source))
        return interval_join(ctx, v.id, cfg, inputs[0], inputs[1], ts_of(0), ts_of(1), ranges)  # type: ignore[arg-type]
    if v.op == "graph_compute":
        return graph_compute(ctx, v, inputs, fns, iteration, [e.source for e in edges])
    if v.op == "graph_traverse":
        return graph_traverse(ctx, v, inputs, iteration, [e.source for e in edges])
    if v.op == "sink":
        return df
    raise ValueError(f"operator {v.id}: no translation for {v.op!r}")
