"""Dynamic graphs: after each batch of new edges, the incremental result (from the previous result
and the batch) equals networkx's from-scratch result over all the edges so far."""

from __future__ import annotations

from pathlib import Path

from graphref import Edge, digraph, edges_df, nx_components, nx_distances, nx_pagerank, random_edges
from pyspark.sql import SparkSession

from lockgate.graph import SuperstepStats
from lockgate.graph.library import connected_components, pagerank, shortest_paths

BASE = random_edges(4000, 5000, seed=21)


def _batches(count: int, size: int, seed: int) -> list[list[Edge]]:
    """Batches of new edges over the old vertices and 500 new ones (4000..4499), none already there."""
    seen = {(a, b) for a, b, _ in BASE}
    pool = [e for e in random_edges(4500, 20_000, seed=seed) if (e[0], e[1]) not in seen]
    return [pool[i * size : (i + 1) * size] for i in range(count)]


def test_components_update_incrementally(spark: SparkSession, tmp_path: Path) -> None:
    first: list[SuperstepStats] = []
    result = connected_components(edges_df(spark, BASE), str(tmp_path / "cc-0"), on_superstep=first.append)
    assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(BASE))
    from_scratch = sum(s.messages_sent for s in first)
    edges = list(BASE)
    for i, batch in enumerate(_batches(3, 400, seed=22), start=1):
        edges += batch
        stats: list[SuperstepStats] = []
        result = connected_components(
            edges_df(spark, edges), str(tmp_path / f"cc-{i}"),
            previous=result.values, new_edges=edges_df(spark, batch), on_superstep=stats.append,
        )
        assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(edges)), i
        # the evolve step sends over the new edges only, and far fewer messages flow than from scratch
        assert stats[1].messages_sent <= 2 * len(batch)
        assert sum(s.messages_sent for s in stats) < from_scratch / 2


def test_shortest_paths_update_incrementally(spark: SparkSession, tmp_path: Path) -> None:
    source = BASE[0][0]
    result = shortest_paths(edges_df(spark, BASE), str(tmp_path / "sp-0"), source)
    assert {r.id: r.distance for r in result.output.collect()} == nx_distances(digraph(BASE), source)
    edges = list(BASE)
    for i, batch in enumerate(_batches(3, 400, seed=23), start=1):
        edges += batch
        stats: list[SuperstepStats] = []
        result = shortest_paths(
            edges_df(spark, edges), str(tmp_path / f"sp-{i}"), source,
            previous=result.values, new_edges=edges_df(spark, batch), on_superstep=stats.append,
        )
        got = {r.id: r.distance for r in result.output.collect()}
        assert got == nx_distances(digraph(edges), source), i
        assert stats[1].messages_sent <= len(batch)
        assert any(v >= 4000 for v in got)  # new vertices reached


def test_pagerank_warm_starts(spark: SparkSession, tmp_path: Path) -> None:
    cold: list[SuperstepStats] = []
    edges = list(BASE)
    result = pagerank(edges_df(spark, edges), str(tmp_path / "pr-0"), tolerance=1e-8, on_superstep=cold.append)
    ref = nx_pagerank(digraph(edges))
    got = {r.id: r.rank for r in result.output.collect()}
    assert max(abs(got[v] - ref[v]) for v in ref) < 1e-6
    batch = _batches(1, 150, seed=24)[0]
    edges += batch
    warm: list[SuperstepStats] = []
    result = pagerank(
        edges_df(spark, edges), str(tmp_path / "pr-1"), tolerance=1e-8, previous=result.values,
        on_superstep=warm.append,
    )
    ref = nx_pagerank(digraph(edges))
    got = {r.id: r.rank for r in result.output.collect()}
    assert got.keys() == ref.keys()
    assert max(abs(got[v] - ref[v]) for v in ref) < 1e-6
    assert len(warm) < len(cold)  # it started near the answer
