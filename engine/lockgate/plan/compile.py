"""Compiling a Pipeline to its logical and physical plans, with validation.

Structural checks (a source, a sink, every stream consumed, no cycle) need nothing but
the pipeline. Schemas are then filled in by the :class:`SchemaInference` the caller hands
in: the runtime's (:mod:`lockgate.runtime.analysis`) translates every operator over empty
inputs with Spark's analyzer. The plan layer itself imports neither Spark nor the
runtime; :func:`lockgate.runtime.compiler.compile_pipeline` is the entry point that
compiles with Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..api.pipeline import Pipeline
from ..clock import to_micros
from ..errors import CompileError
from .logical import OP_KINDS, Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from .physical import ExecutionGraph, build_execution_graph


class SchemaInference(Protocol):
    """Fills in, in place, every vertex's ``schema``, ``event_time`` (and
    ``event_time_is_end``) and ``state`` tables of a logical graph whose structure is
    checked; raises :class:`~lockgate.errors.CompileError` naming the operator and the fix.

    ``fns`` maps operator ids to the pipeline's Python callables (``map_batches``).
    """

    def __call__(self, graph: PipelineGraph, fns: Mapping[str, Callable[..., Any]]) -> None: ...


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
            "PostgresSink, DeltaSink, IcebergSink or CollectSink, or nothing would ever be written"
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
    invalid = getattr(pipeline, "invalid", "fail")
    for n in pipeline.nodes.values():
        config = dict(n.config)
        if invalid != "fail":  # the pipeline's rule for bad records, where the operator reads records
            if n.op == "source" and not config["source"].get("invalid"):
                config["source"] = {**config["source"], "invalid": invalid}
            elif n.op in ("graph_compute", "graph_traverse"):
                config["invalid"] = invalid
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
        origin_us=to_micros(pipeline.origin),
        watermark=wm,
        vertices=vertices,
        edges=edges,
        sql={k: q for k, q in getattr(pipeline, "sql_queries", {}).items() if k in vertices},
    )


def compile_pipeline(pipeline: Pipeline, infer: SchemaInference) -> CompiledPlan:
    """Validate ``pipeline`` and build its logical and physical plans, with the schemas
    ``infer`` fills in (on Spark: :func:`lockgate.runtime.compiler.compile_pipeline`).

    Raises :class:`~lockgate.errors.CompileError` naming the operator and the fix.
    """
    if not callable(infer):
        raise TypeError(
            f"compile_pipeline(pipeline, infer) takes a SchemaInference, not {type(infer).__name__}: "
            "to compile with a SparkSession use lockgate.runtime.compiler.compile_pipeline(pipeline, spark)"
        )
    check_structure(pipeline)
    graph = build_graph(pipeline)
    fns = {n.id: n.fn for n in pipeline.nodes.values() if n.fn is not None}
    infer(graph, fns)
    execution = build_execution_graph(graph)
    return CompiledPlan(pipeline, graph, execution, fns)


__all__ = ["CompiledPlan", "SchemaInference", "build_graph", "check_structure", "compile_pipeline"]
