"""PageRank over the vertices present (dangling ones, isolated ones given only as vertex rows)
equals networkx's unweighted PageRank, and its ranks sum to 1."""

from __future__ import annotations

import random
from pathlib import Path

from graphref import digraph, edges_df, networkx_pagerank, random_edges
from pyspark.sql import SparkSession

from lockgate.graph.library import pagerank


def test_ranks_sum_to_one_over_dangling_and_isolated_vertices(spark: SparkSession, tmp_path: Path) -> None:
    edges = random_edges(80, 160, seed=3)  # 80 vertices, 2 edges each on average: many dangling
    g = digraph(edges)
    isolated = [1000, 1001, 1002]  # in the vertex rows only, no edge
    listed = [*isolated, edges[0][0], edges[5][1]]  # and some that have edges too
    g.add_nodes_from(isolated)
    dangling = [v for v in g if g.out_degree(v) == 0]
    assert len(dangling) >= 8 and set(isolated) <= set(dangling)
    vertices = spark.createDataFrame([(v,) for v in listed], "id long")
    result = pagerank(edges_df(spark, edges), str(tmp_path / "pr"), vertices=vertices)
    got = {r.id: r.rank for r in result.output.collect()}
    want = networkx_pagerank(g, weight=None)
    assert got.keys() == want.keys() == set(g)
    assert abs(sum(got.values()) - 1.0) < 1e-9
    assert max(abs(got[v] - want[v]) for v in want) < 1e-6
    # the isolated vertices rank the least: teleport and dangling mass only
    assert all(abs(got[v] - min(got.values())) < 1e-12 for v in isolated)


def test_pagerank_is_unweighted_on_a_weighted_graph(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(8)
    # weights from 0.1 to 25: a weighted PageRank would differ much from the unweighted one
    edges = [(a, b, rng.choice([0.1, 1.0, 25.0])) for a, b, _ in random_edges(40, 120, seed=9)]
    g = digraph(edges)  # weights in the "weight" attribute, as networkx's default weight= reads them
    result = pagerank(edges_df(spark, edges), str(tmp_path / "pr"))
    got = {r.id: r.rank for r in result.output.collect()}
    unweighted = networkx_pagerank(g, weight=None)
    weighted = networkx_pagerank(g, weight="weight")  # networkx.pagerank's default
    assert got.keys() == unweighted.keys()
    assert max(abs(got[v] - unweighted[v]) for v in g) < 1e-6
    assert abs(sum(got.values()) - 1.0) < 1e-9
    # networkx's default (weighted) form gives other ranks: Lockgate's is not it
    assert max(abs(got[v] - weighted[v]) for v in g) > 0.01
