"""The graph library against networkx on random graphs of about 10k edges."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from graphref import (
    clustered_edges,
    digraph,
    edges_df,
    nx_components,
    nx_distances,
    nx_pagerank,
    random_edges,
)
from pyspark.sql import SparkSession

from lockgate.graph import SuperstepStats
from lockgate.graph.library import connected_components, k_hop, label_propagation, pagerank, shortest_paths

EDGES = random_edges(3000, 10_000, seed=7)


def test_pagerank_matches_networkx(spark: SparkSession, tmp_path: Path) -> None:
    g = digraph(EDGES)
    dangling = [v for v in g if g.out_degree(v) == 0]
    assert len(dangling) > 50  # the dangling mass matters
    stats: list[SuperstepStats] = []
    result = pagerank(edges_df(spark, EDGES), str(tmp_path / "pr"), tolerance=1e-8, on_superstep=stats.append)
    assert result.halted_by == "converged"
    got = {r.id: r.rank for r in result.output.collect()}
    ref = nx_pagerank(g)
    assert got.keys() == ref.keys()
    assert max(abs(got[v] - ref[v]) for v in ref) < 1e-6
    assert abs(sum(got.values()) - 1.0) < 1e-9
    assert [s.superstep for s in stats] == list(range(result.superstep + 1))
    assert stats[1].messages_sent == len(EDGES)  # every vertex with out-edges sends along each


def test_connected_components_match_networkx(spark: SparkSession, tmp_path: Path) -> None:
    edges = clustered_edges(240, seed=11, per_vertex=2.0)  # ~9k edges, many components of many sizes
    result = connected_components(edges_df(spark, edges), str(tmp_path / "cc"))
    assert result.halted_by == "no_messages"
    got = {r.id: r.component for r in result.output.collect()}
    ref = nx_components(digraph(edges))
    assert len(set(ref.values())) > 100
    assert got == ref


def test_shortest_paths_match_networkx(spark: SparkSession, tmp_path: Path) -> None:
    g = digraph(EDGES)
    source = EDGES[0][0]
    result = shortest_paths(edges_df(spark, EDGES), str(tmp_path / "sssp"), source)
    got = {r.id: r.distance for r in result.output.collect()}
    ref = nx_distances(g, source)
    assert 1000 < len(ref) < g.number_of_nodes()  # some vertices unreachable
    assert got == ref


def test_shortest_paths_refuses_negative_weights(spark: SparkSession, tmp_path: Path) -> None:
    from lockgate.graph import GraphInputError

    with pytest.raises(GraphInputError, match="negative weights"):
        shortest_paths(edges_df(spark, [(1, 2, 1.0), (2, 3, -0.5)]), str(tmp_path / "neg"), 1)


def _reference_label_propagation(edges: list[tuple[int, int, float]], iterations: int) -> dict[int, int]:
    """Synchronous label propagation written out in Python: each vertex takes the most frequent
    label of its neighbours (both directions, by edge), the lowest of equally frequent ones."""
    neighbours: dict[int, list[int]] = {}
    for a, b, _ in edges:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    labels = {v: v for v in neighbours}
    for _ in range(iterations):
        new = {}
        for v, ns in neighbours.items():
            counts = Counter(labels[n] for n in ns)
            top = max(counts.values())
            new[v] = min(label for label, c in counts.items() if c == top)
        if new == labels:
            break
        labels = new
    return labels


def test_label_propagation_finds_planted_communities(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(5)
    groups, size = 30, 25
    edges = []
    for gi in range(groups):
        members = range(gi * size, (gi + 1) * size)
        edges += [(a, b, 1.0) for a in members for b in members if a < b and rng.random() < 0.4]
    for _ in range(60):  # a few edges between communities
        a, b = rng.randrange(groups * size), rng.randrange(groups * size)
        if a // size != b // size:
            edges.append((a, b, 1.0))
    result = label_propagation(edges_df(spark, edges), str(tmp_path / "lpa"), max_iterations=15)
    got = {r.id: r.label for r in result.output.collect()}
    assert got == _reference_label_propagation(edges, 15)
    pure = sum(len({got[v] for v in range(gi * size, (gi + 1) * size)}) == 1 for gi in range(groups))
    assert pure >= groups - 2
    assert result.halted_by == "no_change"


@pytest.mark.parametrize("direction", ["out", "both"])
def test_k_hop_matches_networkx(spark: SparkSession, tmp_path: Path, direction: str) -> None:
    g = digraph(EDGES)
    starts = [EDGES[0][0], EDGES[1][0], EDGES[2][1]]
    result = k_hop(edges_df(spark, EDGES), str(tmp_path / "khop"), starts, 3, direction=direction)
    got = {r.id: r.distance for r in result.output.collect()}
    ref_graph = g if direction == "out" else g.to_undirected()
    ref = nx.multi_source_dijkstra_path_length(ref_graph, starts, cutoff=3, weight=lambda *_: 1)
    assert got == ref
    assert max(got.values()) == 3
