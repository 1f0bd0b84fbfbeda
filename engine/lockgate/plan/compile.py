"""Compiling a Pipeline to its logical and physical plans, with validation.

Structural checks (a source, a sink, every stream consumed, no cycle) need nothing but
the pipeline. Schemas are then inferred by translating every operator over empty inputs
with Spark's analyzer, so an unknown column or a type error is reported at compile
time, naming the operator and the fix, exactly as it would fail at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from ..api.pipeline import EPOCH, Pipeline
from ..api.windows import _micros
from ..errors import CompileError
from .logical import OP_KINDS, Column, Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from .physical import ExecutionGraph, build_execution_graph


@dataclass
class CompiledPlan:
    """Everything needed to run a pipeline: both plans and the Python callables."""

    pipeline: Pipeline
    graph: PipelineGraph
    execution: ExecutionGraph
    fns: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.graph.version

    @property
    def name(self) -> str:
        return self.graph.name


def _columns(schema: StructType) -> list[Column]:
    return [Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields]


def struct_of(cols: list[Column]) -> StructType:
    return StructType.fromDDL(", ".join(f"`{c.name}` {c.type}" for c in cols)) if cols else StructType([])


def check_structure(pipeline: Pipeline) -> None:
    """The checks that need no schema: a source, a sink, every stream consumed, no cycle."""
    nodes = pipeline.nodes
    if not any(n.op == "source" for n in nodes.values()):
        raise CompileError(
            f"pipeline '{pipeline.name}' has no source: add one with pipeline.source(lockgate.FileSource(...))"
        )
    if not any(n.op == "sink" for n in nodes.values()):
        raise CompileError(
            f"pipeline '{pipeline.name}' has no sink: end a stream with .sink(lockgate.FileSink(...)), "
            "PostgresSink or CollectSink, or nothing would ever be written"
        )
    consumed = {i.node for n in nodes.values() for i in n.inputs}
    for n in nodes.values():
        for i in n.inputs:
            if i.node not in nodes:
                raise CompileError(f"input '{i.node}' does not exist in pipeline '{pipeline.name}'", n.id)
        if n.op != "sink" and n.id not in consumed:
            raise CompileError(
                "produces a stream that nothing consumes: end it with .sink(...) or remove it", n.id
            )
    # cycle detection (Kahn)
    indeg = {n: len(nodes[n].inputs) for n in nodes}
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for n in nodes.values():
        for i in n.inputs:
            out[i.node].append(n.id)
    ready = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for m in out[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    if seen != len(nodes):
        stuck = sorted(n for n, d in indeg.items() if d > 0)
        raise CompileError(
            f"the plan has a cycle through {', '.join(stuck)}: a pipeline must be a DAG; "
            "use a graph iteration for iterative work"
        )


def build_graph(pipeline: Pipeline) -> PipelineGraph:
    """The logical graph with no schemas yet."""
    wm = pipeline.watermark.to_config()
    vertices: dict[str, PipelineVertex] = {}
    edges: list[PipelineEdge] = []
    for n in pipeline.nodes.values():
        config = dict(n.config)
        parallelism = n.parallelism or pipeline.parallelism
        if n.op == "sink":  # a sink writes with its input's partitions
            parallelism = vertices[n.inputs[0].node].parallelism
        vertices[n.id] = PipelineVertex(
            id=n.id,
            op=n.op,
            kind=OP_KINDS[n.op],
            parallelism=parallelism,
            config=config,
        )
        for idx, i in enumerate(n.inputs):
            part = Partitioning.KEY if i.keys else Partitioning.FORWARD
            edges.append(PipelineEdge(i.node, n.id, idx, part, list(i.keys or ())))
    return PipelineGraph(
        name=pipeline.name,
        cycle_window_us=pipeline.cycle_micros,
        origin_us=_micros(pipeline.origin - EPOCH),
        watermark=wm,
        vertices=vertices,
        edges=edges,
    )


def _is_timestamp(schema: StructType, col: str) -> bool:
    return col in schema.fieldNames() and isinstance(schema[col].dataType, TimestampType | TimestampNTZType)


def _check_columns(v: PipelineVertex, schema: StructType, cols: list[str], what: str, fix: str) -> None:
    names = schema.fieldNames()
    for c in cols:
        if c not in names:
            raise CompileError(f"{what} column '{c}' is not in its input (columns: {', '.join(names)}); {fix}", v.id)


def _analyze(graph: PipelineGraph, pipeline: Pipeline, spark: SparkSession) -> None:
    """Fill in every vertex's schema, event-time column and state layout."""
    from ..runtime.context import CycleContext
    from ..runtime.sources import source_schema
    from ..runtime.translate import translate

    ctx = CycleContext(spark, 0, 0, 0, 0, 0, analysis=True)
    fns = {n.id: n.fn for n in pipeline.nodes.values() if n.fn is not None}
    frames: dict[str, Any] = {}
    for vid in graph.topological_order():
        v = graph.vertices[vid]
        ins = graph.inputs(vid)
        in_schemas = [frames[e.source].schema for e in ins]
        for e, s in zip(ins, in_schemas, strict=True):
            if e.partitioning == Partitioning.KEY:
                _check_columns(v, s, e.keys, "key_by", "key by a column the stream has")
        if v.op == "source":
            try:
                schema = source_schema(v.config["source"])
            except CompileError as err:
                raise CompileError(str(err), vid) from None
            frames[vid] = spark.createDataFrame([], schema)
            et = v.config["source"]["event_time"]
            _check_columns(v, schema, [et], "event_time", "set event_time= to a timestamp column of the source")
            if not _is_timestamp(schema, et):
                raise CompileError(
                    f"event_time column '{et}' is {schema[et].dataType.simpleString()}, not a timestamp: "
                    "cast it in the source or point event_time= at a TIMESTAMP column",
                    vid,
                )
            v.event_time = et
            v.schema = _columns(schema)
            continue
        _validate_inputs(graph, v, in_schemas)
        inputs = [frames[e.source] for e in ins]
        try:
            out = translate(ctx, graph, v, inputs, fns)
            schema = out.schema
        except AnalysisException as err:
            msg = str(err).strip().splitlines()[0]
            cols = ", ".join(in_schemas[0].fieldNames()) if in_schemas else ""
            raise CompileError(f"{msg} (input columns: {cols})", vid) from None
        dupes = sorted({n for n in schema.fieldNames() if schema.fieldNames().count(n) > 1})
        if dupes:
            raise CompileError(
                f"output has duplicate column names {', '.join(dupes)}: rename the aggregate or column "
                "(e.g. an aggregate named like a key, or a key called window_start)",
                vid,
            )
        frames[vid] = out
        v.schema = _columns(schema)
        v.state = {k.split(".", 1)[1]: _columns(df.schema) for k, df in ctx.state_out.items() if k.startswith(vid + ".")}
        _propagate_event_time(graph, v, schema)


def _validate_inputs(graph: PipelineGraph, v: PipelineVertex, in_schemas: list[StructType]) -> None:
    cfg = v.config
    up = [graph.vertices[e.source] for e in graph.inputs(v.id)]
    if v.op in ("window_aggregate", "running_aggregate", "deduplicate"):
        s = in_schemas[0]
        _check_columns(v, s, cfg["keys"], "key", "key_by a column the stream has")
        for name, a in cfg.get("aggs", {}).items():
            if a["column"]:
                _check_columns(v, s, [a["column"]], f"aggregate '{name}'", "aggregate a column the stream has")
    if v.op in ("window_aggregate", "join"):
        spec = cfg["window"]
        for u, s in zip(up, in_schemas, strict=False):
            col = spec.get("on") or u.event_time
            if col is None:
                raise CompileError(
                    f"the stream from '{u.id}' has no event-time column (an operator before dropped it): "
                    "keep the source's event-time column, or pass on= to the window",
                    v.id,
                )
            if not _is_timestamp(s, col):
                typ = s[col].dataType.simpleString() if col in s.fieldNames() else "missing"
                raise CompileError(
                    f"window on column '{col}' of type {typ}: windows need a TIMESTAMP column; convert it "
                    f"first, e.g. .with_column('{col}', 'timestamp_millis({col})')",
                    v.id,
                )
    if v.op == "deduplicate" and up[0].event_time is None:
        pass  # dedup without event time keeps the first record by column order
    if v.op == "join":
        ls, rs = in_schemas
        _check_columns(v, ls, cfg["left_on"], "join key", "join on columns both streams have")
        _check_columns(v, rs, cfg["right_on"], "join key", "join on columns both streams have")
        for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
            lt, rt = ls[lk].dataType.simpleString(), rs[rk].dataType.simpleString()
            if lt != rt:
                raise CompileError(
                    f"join key types differ: left '{lk}' is {lt}, right '{rk}' is {rt}; cast one side with "
                    "with_column first",
                    v.id,
                )
    if v.op == "union":
        first = in_schemas[0]
        base = {f.name: f.dataType.simpleString() for f in first.fields}
        for u, s in zip(up[1:], in_schemas[1:], strict=True):
            other = {f.name: f.dataType.simpleString() for f in s.fields}
            if other != base:
                missing = sorted(set(base) ^ set(other))
                typed = sorted(c for c in set(base) & set(other) if base[c] != other[c])
                detail = []
                if missing:
                    detail.append(f"columns only on one side: {', '.join(missing)}")
                if typed:
                    detail.append(
                        "types differ: " + ", ".join(f"{c} ({base[c]} vs {other[c]})" for c in typed)
                    )
                raise CompileError(
                    f"union of '{up[0].id}' and '{u.id}' has mismatched schemas ({'; '.join(detail)}); "
                    "select the same columns with the same types on every input",
                    v.id,
                )
        ets = {u.event_time for u in up}
        if len(ets) > 1:
            raise CompileError(
                f"union inputs have different event-time columns ({', '.join(sorted(str(e) for e in ets))})",
                v.id,
            )


def _propagate_event_time(graph: PipelineGraph, v: PipelineVertex, schema: StructType) -> None:
    if v.op in ("window_aggregate", "join"):
        v.event_time, v.event_time_is_end = "window_end", True
        return
    if v.op == "running_aggregate":
        v.event_time, v.event_time_is_end = "as_of", True
        return
    up = graph.vertices[graph.inputs(v.id)[0].source]
    if up.event_time and _is_timestamp(schema, up.event_time):
        v.event_time, v.event_time_is_end = up.event_time, up.event_time_is_end


def compile_pipeline(pipeline: Pipeline, spark: SparkSession | None = None) -> CompiledPlan:
    """Validate ``pipeline`` and build its logical and physical plans.

    Raises :class:`~lockgate.errors.CompileError` naming the operator and the fix.

    >>> plan = compile_pipeline(pipeline)
    >>> plan.version            # the plan version: a stable hash
    '3f9c0a6e1d2b4c5a'
    """
    check_structure(pipeline)
    graph = build_graph(pipeline)
    if spark is None:
        from ..runtime.session import get_spark

        spark = get_spark()
    _analyze(graph, pipeline, spark)
    execution = build_execution_graph(graph)
    fns = {n.id: n.fn for n in pipeline.nodes.values() if n.fn is not None}
    return CompiledPlan(pipeline, graph, execution, fns)


__all__ = ["CompiledPlan", "check_structure", "compile_pipeline", "struct_of"]
