"""Graphs in the pipeline DSL: vertex-centric computations and traversals over streams.

A :class:`Graph` is made from an edge stream (``src``, ``dst`` and any edge attributes), and
optionally a vertex stream (``id`` and any vertex attributes); without one the vertices are the
edges' endpoints. Every cycle window adds that window's edges (and vertices) to the graph, whose
adjacency is operator state in the checkpoint. Over it:

- :meth:`Graph.compute` runs a :class:`~lockgate.graph.compute.VertexProgram` each window, as an
  iteration cycle (supersteps) nested in the window's cycle. The first window computes from
  scratch; later windows continue from the previous window's values (GeaFlow's dynamic graph):
  a program with ``evolve`` (components, shortest paths) recomputes only what the new edges
  reach, one without warm-starts (PageRank). A bounded input read in one window is a static graph.
- :meth:`Graph.traverse` answers a stream of requests (start vertices) each window: the vertices
  within ``k`` hops of each, over the graph as it is in that window.

::

    from datetime import timedelta
    import lockgate as lg
    from lockgate.graph.library import ConnectedComponents, PageRank

    p = lg.Pipeline("links", cycle_window=timedelta(days=1))
    links = p.source(lg.FileSource("data/links", schema="src long, dst long, ts timestamp",
                                   event_time="ts"), name="links")
    pages = p.source(lg.FileSource("data/pages", schema="id long, ts timestamp", event_time="ts"),
                     name="pages")
    g = p.graph(links.select("src", "dst"), vertices=pages.select("id"), name="web")
    g.compute(PageRank(tolerance=1e-8), name="ranks").sink(lg.FileSink("out/ranks", key=["id"]))
    g.compute(ConnectedComponents(), name="components").sink(
        lg.PostgresSink("postgresql://lockgate@db/web", "components", key=["id"]))

A computation's output is an *updating* stream keyed by ``id``: each window emits the rows of the
vertices whose value changed (``emit="changes"``, the default) or of every vertex (``emit="all"``):
``program.finish``'s columns (``rank``, ``component``, ``distance``, ``label``; ``value`` for a
program without its own ``finish``) and ``as_of``, the window's end. Window ``k`` is
``[origin + k * cycle_window, origin + (k + 1) * cycle_window)``, ``origin`` the Unix epoch unless
``Pipeline(origin=...)`` says otherwise: with daily windows, window 20454 is 2026-01-01 (UTC).
A vertex of the vertex stream with no edge is a vertex all the same (PageRank gives it its teleport
and dangling share, components make it a component of its own, shortest paths reach it only
as their source).
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from ..errors import CompileError
from .nodes import Input, PipelineNodes
from .stream import Stream

#: how a computation's output reports each window
EMITS = ("changes", "all")
#: the directions a traversal follows edges in
DIRECTIONS = ("out", "in", "both")


def program_config(program: Any, op: str) -> dict[str, Any]:
    """What names a vertex program in the plan: its class, parameters and a hash of its code.

    Two plans whose programs differ in any of these cannot share the computation's state
    (another algorithm, other parameters, another value type): the state layout check refuses it."""
    from ..graph.compute import VertexProgram

    if isinstance(program, type) and issubclass(program, VertexProgram):
        raise CompileError(
            f"compute() takes a VertexProgram instance, got the class {program.__name__}: "
            f"call compute({program.__name__}()) (with its parameters)", operator=op)
    if not isinstance(program, VertexProgram):
        raise CompileError(
            f"compute() takes a lockgate.graph.VertexProgram (e.g. lockgate.graph.library.PageRank()), "
            f"got {program!r:.80}: subclass VertexProgram and define init and compute", operator=op)
    try:
        code = inspect.getsource(type(program))
    except (OSError, TypeError):
        code = type(program).__qualname__
    halt = program.halt_when
    return {
        **program.describe(),
        "code_hash": hashlib.sha256(code.encode()).hexdigest()[:16],
        "halt_when": None if halt is None else halt.value,
        "max_supersteps": program.max_supersteps,
        "converged": program.has_converged(),
        "combiner": program.combiner.name,
    }


class Graph:
    """A graph whose edges (and vertices) arrive on streams of a pipeline: made by
    :meth:`~lockgate.api.pipeline.Pipeline.graph`."""

    def __init__(self, pipeline: PipelineNodes, edges: Stream, vertices: Stream | None, name: str | None):
        for what, stream in (("edges", edges), ("vertices", vertices)):
            if stream is not None and stream.pipeline is not pipeline:
                raise ValueError(f"graph(): the {what} stream belongs to another pipeline")
        self.pipeline = pipeline
        self.edges = edges
        self.vertices = vertices
        self.name = name

    def _inputs(self) -> list[Input]:
        inputs = [Input(self.edges.node)]
        if self.vertices is not None:
            inputs.append(Input(self.vertices.node))
        return inputs

    def compute(
        self,
        program: Any,
        *,
        emit: str = "changes",
        checkpoint_every: int = 1,
        max_supersteps: int | None = None,
        name: str | None = None,
    ) -> Stream:
        """Run ``program`` (a :class:`~lockgate.graph.compute.VertexProgram`) over the graph every
        cycle window, superstep by superstep, and return its results (``program.finish``: ``id``
        and the result columns) as an updating stream keyed by ``id``.

        :param emit: ``"changes"``: each window emits the vertices whose value changed (new ones
            included); ``"all"``: every vertex, every window that computed.
        :param checkpoint_every: write the vertex state to the checkpoint store every this many
            supersteps (the others are held by Spark alone); a killed run resumes the window at
            the last one written.
        :param max_supersteps: a bound on supersteps per window, besides the program's own.

        Raises :class:`~lockgate.errors.CompileError` (naming the operator and the function) when
        the program has no halting rule and no bound.

        >>> g.compute(ConnectedComponents(), name="components")  # id, component
        """
        op = self.pipeline._next_name("graph_compute", name)
        config = {"program": program_config(program, op)}
        if emit not in EMITS:
            raise CompileError(f"compute() emit={emit!r}: use 'changes' or 'all'", operator=op)
        if not isinstance(checkpoint_every, int) or isinstance(checkpoint_every, bool) or checkpoint_every < 1:
            raise CompileError(f"compute() checkpoint_every={checkpoint_every!r}: use a whole number of "
                               "supersteps >= 1", operator=op)
        if max_supersteps is not None and (not isinstance(max_supersteps, int) or max_supersteps < 1):
            raise CompileError(f"compute() max_supersteps={max_supersteps!r}: use a whole number >= 1 or None",
                               operator=op)
        if program.halt_when is None and program.max_supersteps is None and max_supersteps is None \
                and not program.has_converged():
            pname = program.name
            raise CompileError(
                f"{pname} has no halting rule and no bound: {pname}.compute would run supersteps forever. "
                f"Fix: set {pname}.halt_when to Halt.NO_MESSAGES or Halt.NO_CHANGE, set {pname}.max_supersteps, "
                f"define {pname}.converged(stats), or pass compute(..., max_supersteps=N)", operator=op)
        config.update(emit=emit, checkpoint_every=checkpoint_every, max_supersteps=max_supersteps,
                      vertices=self.vertices is not None, graph=self.name)
        node = self.pipeline._add("graph_compute", self._inputs(), config, name, fn=program)
        return Stream(self.pipeline, node.id)

    def traverse(
        self,
        requests: Stream,
        k: int,
        *,
        start: str = "start",
        direction: str = "out",
        name: str | None = None,
    ) -> Stream:
        """Answer each request (a record of ``requests`` whose ``start`` column is a vertex id) in
        the window it arrives: the vertices within ``k`` hops of its start, over the graph as it is
        in that window (its edges included). Emits the request's columns, then ``vertex`` and
        ``hops`` (0 for the start itself, which is answered even if it has no edge yet), one row
        per vertex reached; hop by hop, each hop one superstep of the window's iteration cycle.

        :param direction: ``"out"`` (follow edges src -> dst), ``"in"`` or ``"both"``.

        >>> g.traverse(p.source(lg.FileSource("requests", ...)), k=2, start="user")
        """
        op = self.pipeline._next_name("graph_traverse", name)
        if requests.pipeline is not self.pipeline:
            raise ValueError("traverse(): the requests stream belongs to another pipeline")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise CompileError(f"traverse() k={k!r}: use a number of hops >= 0", operator=op)
        if direction not in DIRECTIONS:
            raise CompileError(f"traverse() direction={direction!r}: use 'out', 'in' or 'both'", operator=op)
        config = {"k": k, "start": start, "direction": direction, "graph": self.name}
        inputs = [Input(self.edges.node), Input(requests.node)]
        node = self.pipeline._add("graph_traverse", inputs, config, name)
        return Stream(self.pipeline, node.id)

    def __repr__(self) -> str:
        vertices = f", vertices={self.vertices.node!r}" if self.vertices is not None else ""
        return f"Graph({self.name!r}, edges={self.edges.node!r}{vertices})"


__all__ = ["DIRECTIONS", "EMITS", "Graph", "program_config"]
