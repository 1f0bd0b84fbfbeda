"""Dynamic graphs: after each batch of new edges, the incremental result (from the previous result
and the batch) equals networkx's from-scratch result over all the edges so far."""

from __future__ import annotations

from pathlib import Path

from graphref import (
    Edge,
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
from lockgate.graph.library import connected_components, pagerank, shortest_paths

BASE = clustered_edges(150, seed=21, per_vertex=2.0)  # ~5k edges over ~2900 vertices, ~150 components


def _batches(base: list[Edge], vertices: int, count: int, size: int, seed: int) -> list[list[Edge]]:
    """``count`` batches of ``size`` new edges over ``vertices`` vertices (more than ``base`` has:
    some are new), none already in ``base``."""
    assert max(max(a, b) for a, b, _ in base) < vertices
    seen = {(a, b) for a, b, _ in base}
    pool = [e for e in random_edges(vertices, count * size * 2, seed=seed) if (e[0], e[1]) not in seen]
    return [pool[i * size : (i + 1) * size] for i in range(count)]


def test_components_update_incrementally(spark: SparkSession, tmp_path: Path) -> None:
    first: list[SuperstepStats] = []
    result = connected_components(edges_df(spark, BASE), str(tmp_path / "cc-0"), on_superstep=first.append)
    assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(BASE))
    from_scratch = sum(s.messages_sent for s in first)
    edges = list(BASE)
    for i, batch in enumerate(_batches(BASE, 3200, 3, 40, seed=22), start=1):
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
    base = random_edges(2500, 5000, seed=25)
    source = base[0][0]
    result = shortest_paths(edges_df(spark, base), str(tmp_path / "sp-0"), source)
    assert {r.id: r.distance for r in result.output.collect()} == nx_distances(digraph(base), source)
    edges = list(base)
    for i, batch in enumerate(_batches(base, 2700, 3, 100, seed=23), start=1):
        edges += batch
        stats: list[SuperstepStats] = []
        result = shortest_paths(
            edges_df(spark, edges), str(tmp_path / f"sp-{i}"), source,
            previous=result.values, new_edges=edges_df(spark, batch), on_superstep=stats.append,
        )
        got = {r.id: r.distance for r in result.output.collect()}
        assert got == nx_distances(digraph(edges), source), i
        assert stats[1].messages_sent <= len(batch)
        assert any(v >= 2500 for v in got)  # new vertices reached


def test_pagerank_warm_starts(spark: SparkSession, tmp_path: Path) -> None:
    cold: list[SuperstepStats] = []
    base = random_edges(1000, 4000, seed=26)
    edges = list(base)
    result = pagerank(edges_df(spark, edges), str(tmp_path / "pr-0"), tolerance=1e-9, on_superstep=cold.append)
    ref = nx_pagerank(digraph(edges))
    got = {r.id: r.rank for r in result.output.collect()}
    assert max(abs(got[v] - ref[v]) for v in ref) < 1e-6
    batch = _batches(base, 1050, 1, 100, seed=24)[0]
    edges += batch
    warm: list[SuperstepStats] = []
    result = pagerank(
        edges_df(spark, edges), str(tmp_path / "pr-1"), tolerance=1e-9, previous=result.values,
        on_superstep=warm.append,
    )
    ref = nx_pagerank(digraph(edges))
    got = {r.id: r.rank for r in result.output.collect()}
    assert got.keys() == ref.keys()
    assert max(abs(got[v] - ref[v]) for v in ref) < 1e-6
    assert len(warm) < len(cold)  # it started near the answer


def test_stored_edges_are_read_in_place_and_resumed(spark: SparkSession, tmp_path: Path) -> None:
    """``stored_edges``: the edges already in Parquet are not copied into the folder (the manifest
    says where they are), the new edges are; a stopped run resumes from there to the same result,
    and the library's functions take it too."""
    from lockgate.graph import SuperstepDriver
    from lockgate.graph.library import ConnectedComponents

    first = connected_components(edges_df(spark, BASE), str(tmp_path / "cc-0"))
    stored = str(tmp_path / "stored")
    edges_df(spark, BASE).write.parquet(stored)
    batch = _batches(BASE, 3200, 1, 40, seed=27)[0]
    edges = [*BASE, *batch]
    folder = tmp_path / "cc-1"
    driver = SuperstepDriver(ConnectedComponents(), str(folder), spark=spark)
    stopped = driver.run(spark.read.parquet(stored).unionByName(edges_df(spark, batch)), previous=first.values,
                         new_edges=edges_df(spark, batch), stop_after=1, stored_edges=[stored])
    assert stopped.halted_by is None
    assert not (folder / "edges").exists() and (folder / "new_edges").exists()
    assert stopped.edges.count() == len(edges)
    result = SuperstepDriver(ConnectedComponents(), str(folder), spark=spark).resume()
    assert result.halted_by == "no_messages"
    assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(edges))
    assert result.edges.count() == len(edges)
    # the library's functions pass stored_edges= on
    lib = connected_components(spark.read.parquet(stored).unionByName(edges_df(spark, batch)), str(tmp_path / "lib"),
                               previous=first.values, new_edges=edges_df(spark, batch), stored_edges=[stored])
    assert not (tmp_path / "lib" / "edges").exists()
    assert {r.id: r.component for r in lib.output.collect()} == nx_components(digraph(edges))
