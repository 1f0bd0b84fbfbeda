"""Random graphs and their references computed by networkx, for the graph tests."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
from pyspark.sql import DataFrame, SparkSession

Edge = tuple[int, int, float]


def random_edges(n: int, m: int, seed: int, first_vertex: int = 0) -> list[Edge]:
    """``m`` distinct directed edges (no self-loops) over vertices ``first_vertex .. first_vertex+n-1``,
    weights in [0, 10) with 3 decimals (some 0)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: list[Edge] = []
    while len(out) < m:
        a, b = rng.randrange(n) + first_vertex, rng.randrange(n) + first_vertex
        if a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        out.append((a, b, 0.0 if rng.random() < 0.02 else round(rng.uniform(0, 10), 3)))
    return out


def clustered_edges(clusters: int, seed: int, per_vertex: float = 1.5, first_vertex: int = 0) -> list[Edge]:
    """Random clusters of 2 to 40 vertices with about ``per_vertex`` edges per vertex inside each
    (some clusters fall apart in several components): many components of many sizes, each of a
    small diameter (few supersteps)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: list[Edge] = []
    v0 = first_vertex
    for _ in range(clusters):
        size = rng.randint(2, 40)
        for _ in range(max(1, int(size * per_vertex))):
            a, b = rng.randrange(size) + v0, rng.randrange(size) + v0
            if a != b and (a, b) not in seen:
                seen.add((a, b))
                out.append((a, b, round(rng.uniform(0, 10), 3)))
        v0 += size
    return out


def edges_df(spark: SparkSession, edges: list[Edge]) -> DataFrame:
    """The edges as a DataFrame ``src long, dst long, weight double``."""
    return spark.createDataFrame(edges, "src long, dst long, weight double")


def digraph(edges: list[Edge]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_weighted_edges_from(edges)
    return g


def nx_pagerank(g: nx.DiGraph, alpha: float = 0.85) -> dict[int, float]:
    """PageRank from networkx's Google matrix (its dangling-node handling is pagerank's), by power
    iteration to machine precision (networkx.pagerank itself needs scipy)."""
    nodes = list(g.nodes)
    m = nx.google_matrix(g, alpha=alpha, nodelist=nodes, weight=None)
    x = np.full(len(nodes), 1.0 / len(nodes))
    for _ in range(1000):
        nxt = x @ m
        if np.abs(nxt - x).sum() < 1e-15:
            x = nxt
            break
        x = nxt
    return dict(zip(nodes, x.tolist(), strict=True))


def nx_components(g: nx.DiGraph) -> dict[int, int]:
    """Each vertex's weakly connected component, named by its smallest vertex."""
    return {v: min(c) for c in nx.weakly_connected_components(g) for v in c}


def nx_distances(g: nx.DiGraph, source: int) -> dict[int, float]:
    return dict(nx.single_source_dijkstra_path_length(g, source, weight="weight"))


GRAPH_PIPELINE = '''
from datetime import timedelta
import lockgate as lg
from lockgate.graph.library import ConnectedComponents

pipeline = lg.Pipeline("graph_remote", cycle_window=timedelta(minutes=1))
links = pipeline.source(lg.FileSource({edges!r}, event_time="ts"), name="links")
requests = pipeline.source(lg.FileSource({requests!r}, event_time="ts"), name="requests")
g = pipeline.graph(links.select("src", "dst"), name="web")
g.compute(ConnectedComponents(), name="components").sink(lg.CollectSink("components"), name="components_out")
g.traverse(requests, k=2, name="hops").sink(lg.CollectSink("hops"), name="hops_out")
'''
#: the window (one-minute windows since the epoch) of the remote graph pipeline's records
GRAPH_WINDOW = 29_453_760  # 2026-01-01T00:00Z


def write_graph_pipeline(folder, clusters: int = 8, seed: int = 5):
    """A small graph pipeline (components and a 2-hop traversal) over one window of clustered
    edges, for runs on Spark Connect and standalone clusters: returns its reference, edges and
    request starts."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa
    import pyarrow.parquet as pq

    edges = clustered_edges(clusters, seed=seed)
    starts = [edges[0][0], edges[-1][1]]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    (folder / "edges").mkdir(parents=True, exist_ok=True)
    (folder / "requests").mkdir(parents=True, exist_ok=True)
    ts = [t0 + timedelta(milliseconds=i) for i in range(len(edges))]
    pq.write_table(pa.table({"src": pa.array([e[0] for e in edges], pa.int64()),
                             "dst": pa.array([e[1] for e in edges], pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), folder / "edges" / "e.parquet")
    pq.write_table(pa.table({"start": pa.array(starts, pa.int64()),
                             "ts": pa.array([t0 + timedelta(seconds=30)] * 2, pa.timestamp("us", tz="UTC"))}),
                   folder / "requests" / "r.parquet")
    path = folder / "graph_pipe.py"
    path.write_text(GRAPH_PIPELINE.format(edges=str(folder / "edges"), requests=str(folder / "requests")))
    return f"{path}:pipeline", edges, starts


def check_graph_outputs(read_sink, job: str, edges, starts) -> None:
    """The remote graph pipeline's sinks equal networkx's components and 2-hop neighbourhoods."""
    g = digraph(edges)
    components = read_sink(job, "components").to_pandas()
    assert dict(zip(components["id"], components["component"], strict=True)) == nx_components(g)
    hops = read_sink(job, "hops").to_pandas()
    for start in starts:
        got = hops[hops["start"] == start]
        assert dict(zip(got["vertex"], got["hops"], strict=True)) == nx.single_source_shortest_path_length(
            g, start, cutoff=2)


def networkx_pagerank(g: nx.DiGraph, weight: str | None = None, **kwargs) -> dict[int, float]:
    """``nx.pagerank(g, weight=weight, **kwargs)``; without scipy (which ``nx.pagerank`` needs),
    networkx's pure-Python implementation of the same algorithm (the same iteration, dangling
    handling and stopping rule)."""
    try:
        return nx.pagerank(g, weight=weight, **kwargs)
    except ImportError:
        from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python

        return _pagerank_python(g, weight=weight, **kwargs)
