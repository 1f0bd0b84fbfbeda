"""Graph algorithms as vertex programs: PageRank, weakly connected components, single-source shortest
paths, label propagation and k-hop traversal. Each is a few lines over :mod:`lockgate.graph.compute`.

The programs with an ``evolve`` (components, shortest paths) update a previous result when edges
are added (a dynamic graph): only what the new edges reach recomputes. PageRank warm-starts from
the previous ranks. The functions run a program with a :class:`~lockgate.graph.superstep.SuperstepDriver`
and return its :class:`~lockgate.graph.superstep.GraphResult` (``.output`` is the results DataFrame).

>>> # ranks = pagerank(edges, "/tmp/pr").output              # id, rank
>>> # first = connected_components(edges, "/tmp/cc-1")
>>> # later = connected_components(edges.union(batch), "/tmp/cc-2",
>>> #                              previous=first.values, new_edges=batch)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lockgate.graph.compute import (
    MIN,
    SUM,
    AggregateContext,
    Combiner,
    EdgeContext,
    Halt,
    Step,
    VertexContext,
    VertexProgram,
)
from lockgate.graph.errors import GraphInputError
from lockgate.graph.stats import SuperstepStats
from lockgate.graph.superstep import GraphResult, SuperstepDriver

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_INF = math.inf


@dataclass(frozen=True)
class PageRank(VertexProgram):
    """PageRank as networkx's ``pagerank(G, weight=None)`` computes it: unweighted (a vertex's rank
    is split equally over its out-edges, edge attributes are ignored), uniform teleport, the rank of
    dangling vertices (no out-edge, vertices without any edge included) spread over all vertices, so
    the ranks sum to 1 over the vertices present. Stops when the ranks moved less than
    ``num_vertices * tolerance`` in total (L1) or after ``max_iterations`` iterations (the last
    ranks are the result, where networkx raises). Output: ``id``, ``rank``.

    Superstep 1 sends the initial ranks (scaled to sum 1: with ``previous``, the previous ranks
    and ``1/N`` for new vertices, networkx's ``nstart``); superstep ``k + 1`` is networkx's
    iteration ``k``.

    >>> PageRank(damping=0.85, tolerance=1e-8).max_supersteps
    101
    """

    damping: float = 0.85
    tolerance: float = 1e-6
    max_iterations: int = 100

    combiner = SUM
    halt_when = None
    compute_all = True

    @property
    def max_supersteps(self) -> int:  # type: ignore[override]
        return self.max_iterations + 1

    def init(self, ctx: VertexContext) -> Column:
        return F.lit(1.0 / ctx.num_vertices)

    def compute(self, ctx: VertexContext) -> Step:
        # superstep 1 scales the starting ranks to sum 1 as networkx does with nstart: a warm start
        # (previous ranks, 1/N for new vertices) sums to more, and that excess decays only by
        # damping**k, slower than the rest of the error
        if ctx.superstep == 1:
            rank = ctx.value / F.lit(ctx.aggregate("total"))
        else:
            d, n = self.damping, ctx.num_vertices
            teleport = (1 - d) / n + d * (ctx.aggregate("dangling") or 0.0) / n
            rank = F.lit(teleport) + d * F.coalesce(ctx.messages, F.lit(0.0))
        return Step(rank, send_out=F.when(ctx.out_degree > 0, rank / ctx.out_degree))

    def aggregates(self, ctx: AggregateContext) -> dict[str, Column]:
        return {
            "total": F.sum(ctx.value),
            "dangling": F.sum(F.when(ctx.out_degree == 0, ctx.value).otherwise(F.lit(0.0))),
            "delta": F.sum(F.abs(ctx.value - ctx.previous)),
        }

    def converged(self, stats: SuperstepStats) -> bool:
        return stats.superstep >= 2 and stats.aggregates["delta"] < stats.num_vertices * self.tolerance

    def finish(self, state: DataFrame) -> DataFrame:
        return state.select("id", F.col("value").alias("rank"))


@dataclass(frozen=True)
class ConnectedComponents(VertexProgram):
    """Weakly connected components by min-label propagation: each vertex ends with the smallest
    vertex id of its component; a vertex with no edge is a component of its own. Output: ``id``,
    ``component``. Incremental: ``evolve`` sends the labels of the new edges' endpoints along the
    new edges only; the components they merge relabel from there.

    >>> ConnectedComponents().halt_when
    <Halt.NO_MESSAGES: 'no_messages'>
    """

    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx: VertexContext) -> Column:
        return ctx.id

    def compute(self, ctx: VertexContext) -> Step:
        if ctx.superstep == 1:
            return Step(ctx.value, send_out=ctx.value, send_in=ctx.value)
        smaller = ctx.messages < ctx.value
        value = F.when(smaller, ctx.messages).otherwise(ctx.value)
        sent = F.when(smaller, value)
        return Step(value, send_out=sent, send_in=sent)

    def evolve(self, ctx: VertexContext) -> Step:
        assert ctx.touched is not None
        sent = F.when(ctx.touched, ctx.value)
        return Step(ctx.value, send_out=sent, send_in=sent)

    def finish(self, state: DataFrame) -> DataFrame:
        return state.select("id", F.col("value").alias("component"))


@dataclass(frozen=True)
class ShortestPaths(VertexProgram):
    """Single-source shortest paths along out-edges, weighted by the edge column ``weight``
    (non-negative; ``None``: every edge weighs 1). A vertex's value is its distance (``inf`` when
    unreachable); ``finish`` gives ``id``, ``distance`` of the reached vertices only: an unreached
    vertex has no row, and no vertex has one when ``source`` is not in the graph. Negative weights
    are refused by :func:`shortest_paths`, not by the program (filter them out before a pipeline's
    graph). Incremental: ``evolve`` relaxes the new edges from their reached sources; distances only
    shrink from there.

    >>> ShortestPaths(source=1, weight=None).weight is None
    True
    """

    source: Any = 0
    weight: str | None = "weight"

    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx: VertexContext) -> Column:
        return F.when(ctx.id == F.lit(self.source), F.lit(0.0)).otherwise(F.lit(_INF))

    def compute(self, ctx: VertexContext) -> Step:
        if ctx.superstep == 1:
            return Step(ctx.value, send_out=F.when(ctx.value < F.lit(_INF), ctx.value))
        shorter = ctx.messages < ctx.value
        value = F.when(shorter, ctx.messages).otherwise(ctx.value)
        return Step(value, send_out=F.when(shorter, value))

    def evolve(self, ctx: VertexContext) -> Step:
        assert ctx.touched is not None
        return Step(ctx.value, send_out=F.when(ctx.touched & (ctx.value < F.lit(_INF)), ctx.value))

    def along_edge(self, message: Column, edge: EdgeContext) -> Column:
        w = F.lit(1.0) if self.weight is None else edge.attr(self.weight).cast("double")
        return message + w

    def finish(self, state: DataFrame) -> DataFrame:
        return state.where(F.col("value") < F.lit(_INF)).select("id", F.col("value").alias("distance"))


#: the most frequent message, the lowest of equally frequent ones
MODE = Combiner("mode", lambda m: F.mode(m, deterministic=True))


@dataclass(frozen=True)
class LabelPropagation(VertexProgram):
    """Community detection by synchronous label propagation, ignoring edge direction: every
    vertex starts with its id as label and takes, each superstep, the most frequent label among
    its neighbours (an edge each way counts twice), the lowest of equally frequent ones; a vertex
    with no neighbour keeps its label. Stops when no label changes or after ``max_iterations``
    (synchronous updates can oscillate, e.g. two vertices joined by one edge swap labels: they end
    at the bound). Output: ``id``, ``label``.

    >>> LabelPropagation(max_iterations=5).max_supersteps
    6
    """

    max_iterations: int = 20

    combiner = MODE
    halt_when = Halt.NO_CHANGE
    compute_all = True

    @property
    def max_supersteps(self) -> int:  # type: ignore[override]
        return self.max_iterations + 1

    def init(self, ctx: VertexContext) -> Column:
        return ctx.id

    def compute(self, ctx: VertexContext) -> Step:
        label = ctx.value if ctx.superstep == 1 else F.coalesce(ctx.messages, ctx.value)
        return Step(label, send_out=label, send_in=label)

    def finish(self, state: DataFrame) -> DataFrame:
        return state.select("id", F.col("value").alias("label"))


@dataclass(frozen=True)
class KHop(VertexProgram):
    """The vertices within ``k`` hops of the ``starts`` (ids), with their distance in hops, along
    ``direction``: ``"out"`` (out-edges), ``"in"`` or ``"both"`` (ignoring direction). Output:
    ``id``, ``distance`` (hops).

    >>> KHop(starts=(1, 2), k=2).max_supersteps
    3
    """

    starts: tuple[Any, ...] = ()
    k: int = 1
    direction: str = "out"

    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def __post_init__(self) -> None:
        if self.direction not in ("out", "in", "both"):
            raise GraphInputError(f"KHop direction={self.direction!r}: use 'out', 'in' or 'both'")
        if self.k < 0:
            raise GraphInputError(f"KHop k={self.k}: use a number of hops >= 0")

    @property
    def max_supersteps(self) -> int:  # type: ignore[override]
        return self.k + 1

    def init(self, ctx: VertexContext) -> Column:
        return F.when(ctx.id.isin(list(self.starts)), F.lit(0))

    def compute(self, ctx: VertexContext) -> Step:
        if ctx.superstep == 1:
            value = ctx.value
            send = F.when((value == 0) & F.lit(self.k > 0), F.lit(1))
        else:
            reached = ctx.value.isNull() & ctx.messages.isNotNull()
            value = F.when(reached, ctx.messages).otherwise(ctx.value)
            send = F.when(reached & (value < F.lit(self.k)), value + 1)
        return Step(
            value,
            send_out=send if self.direction in ("out", "both") else None,
            send_in=send if self.direction in ("in", "both") else None,
        )

    def finish(self, state: DataFrame) -> DataFrame:
        return state.where(F.col("value").isNotNull()).select("id", F.col("value").alias("distance"))


def _run(
    program: VertexProgram,
    edges: DataFrame,
    folder: str,
    *,
    vertices: DataFrame | None,
    previous: DataFrame | None,
    new_edges: DataFrame | None,
    spark: SparkSession | None,
    on_superstep: Callable[[SuperstepStats], None] | None,
    stored_edges: list[str] | None = None,
) -> GraphResult:
    driver = SuperstepDriver(program, folder, spark=spark or edges.sparkSession, on_superstep=on_superstep)
    return driver.run(edges, vertices, previous=previous, new_edges=new_edges, stored_edges=stored_edges)


def pagerank(
    edges: DataFrame,
    folder: str,
    *,
    damping: float = 0.85,
    tolerance: float = 1e-6,
    max_iterations: int = 100,
    vertices: DataFrame | None = None,
    previous: DataFrame | None = None,
    spark: SparkSession | None = None,
    on_superstep: Callable[[SuperstepStats], None] | None = None,
    stored_edges: list[str] | None = None,
) -> GraphResult:
    """PageRank (:class:`PageRank`, unweighted); ``previous`` (an earlier result's ``values``)
    warm-starts it. ``vertices`` adds vertices (``id``) that may have no edge; both DataFrames are
    taken as they are (a repeated ``src``, ``dst`` row is a parallel edge).

    ``stored_edges`` (Parquet files or folders holding exactly the rows of ``edges``) reads the
    edges in place instead of copying them into ``folder`` (:meth:`SuperstepDriver.run`).

    >>> # pagerank(edges, "/tmp/pr", tolerance=1e-8).output  # id, rank
    """
    program = PageRank(damping=damping, tolerance=tolerance, max_iterations=max_iterations)
    return _run(program, edges, folder, vertices=vertices, previous=previous, new_edges=None, spark=spark,
                on_superstep=on_superstep, stored_edges=stored_edges)


def connected_components(
    edges: DataFrame,
    folder: str,
    *,
    vertices: DataFrame | None = None,
    previous: DataFrame | None = None,
    new_edges: DataFrame | None = None,
    spark: SparkSession | None = None,
    on_superstep: Callable[[SuperstepStats], None] | None = None,
    stored_edges: list[str] | None = None,
) -> GraphResult:
    """Weakly connected components (:class:`ConnectedComponents`); with ``previous`` and
    ``new_edges`` (part of ``edges``), incrementally.

    ``stored_edges`` (Parquet files or folders holding exactly the rows of ``edges``, less
    ``new_edges`` in an incremental run) reads the edges in place instead of copying them into
    ``folder``, as pipelines do with their graph state (:meth:`SuperstepDriver.run`).

    >>> # connected_components(edges, "/tmp/cc").output  # id, component
    """
    return _run(ConnectedComponents(), edges, folder, vertices=vertices, previous=previous,
                new_edges=new_edges, spark=spark, on_superstep=on_superstep, stored_edges=stored_edges)


def shortest_paths(
    edges: DataFrame,
    folder: str,
    source: Any,
    *,
    weight: str | None = "weight",
    vertices: DataFrame | None = None,
    previous: DataFrame | None = None,
    new_edges: DataFrame | None = None,
    spark: SparkSession | None = None,
    on_superstep: Callable[[SuperstepStats], None] | None = None,
    stored_edges: list[str] | None = None,
) -> GraphResult:
    """Single-source shortest paths (:class:`ShortestPaths`); raises :class:`GraphInputError` on a
    negative weight. With ``previous`` and ``new_edges`` (part of ``edges``), incrementally.

    ``stored_edges`` (Parquet files or folders holding exactly the rows of ``edges``, less
    ``new_edges`` in an incremental run) reads the edges in place instead of copying them into
    ``folder``, as pipelines do with their graph state (:meth:`SuperstepDriver.run`).

    >>> # shortest_paths(edges, "/tmp/sssp", source=0).output  # id, distance
    """
    if weight is not None:
        if weight not in edges.columns:
            raise GraphInputError(f"shortest_paths: edges has no weight column {weight!r} (it has {edges.columns})")
        if edges.where(F.col(weight) < 0).limit(1).count():
            raise GraphInputError(
                f"shortest_paths: edges have negative weights in {weight!r}; shortest paths need weights >= 0"
            )
    return _run(ShortestPaths(source=source, weight=weight), edges, folder, vertices=vertices,
                previous=previous, new_edges=new_edges, spark=spark, on_superstep=on_superstep,
                stored_edges=stored_edges)


def label_propagation(
    edges: DataFrame,
    folder: str,
    *,
    max_iterations: int = 20,
    vertices: DataFrame | None = None,
    spark: SparkSession | None = None,
    on_superstep: Callable[[SuperstepStats], None] | None = None,
) -> GraphResult:
    """Communities by label propagation (:class:`LabelPropagation`).

    >>> # label_propagation(edges, "/tmp/lpa").output  # id, label
    """
    return _run(LabelPropagation(max_iterations=max_iterations), edges, folder, vertices=vertices,
                previous=None, new_edges=None, spark=spark, on_superstep=on_superstep)


def k_hop(
    edges: DataFrame,
    folder: str,
    starts: Iterable[Any],
    k: int,
    *,
    direction: str = "out",
    vertices: DataFrame | None = None,
    spark: SparkSession | None = None,
    on_superstep: Callable[[SuperstepStats], None] | None = None,
) -> GraphResult:
    """The vertices within ``k`` hops of ``starts`` (:class:`KHop`).

    >>> # k_hop(edges, "/tmp/khop", starts=[1, 7], k=2).output  # id, distance
    """
    program = KHop(starts=tuple(starts), k=k, direction=direction)
    return _run(program, edges, folder, vertices=vertices, previous=None, new_edges=None, spark=spark,
                on_superstep=on_superstep)


__all__ = [
    "MODE",
    "ConnectedComponents",
    "KHop",
    "LabelPropagation",
    "PageRank",
    "ShortestPaths",
    "connected_components",
    "k_hop",
    "label_propagation",
    "pagerank",
    "shortest_paths",
]
