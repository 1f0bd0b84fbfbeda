"""Graph operators in pipelines (ITERATOR operators and their iteration cycles), checked against
networkx over the same edges, never against Lockgate's own operators.

- a static graph (every edge in one window): components, PageRank and shortest paths equal
  networkx's; the supersteps are in the catalog, ``checkpoint_every=2`` checkpoints every other
  superstep and the last;
- a dynamic graph (edges arriving over windows): after every window the sinks' current results
  (the changelog applied up to that window) equal networkx's from scratch over every edge so far,
  and the traversal answers each window's requests as networkx's BFS does;
- a changed program under the same operator name is refused, naming the operator.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import networkx as nx
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.errors import StateLayoutError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from graphref import clustered_edges, digraph, nx_components, nx_distances, nx_pagerank

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W0 = int(T0.timestamp()) // 60
SOURCE = 0


def _write(folder: Path, batches: list[list[tuple[int, int, float]]], name: str = "part") -> None:
    """Edges ``src, dst, weight, ts``: batch ``i`` in cycle window ``W0 + i``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches):
        ts = pd.Timestamp(T0) + pd.Timedelta(minutes=i) + pd.to_timedelta(range(len(batch)), unit="ms")
        table = pa.table({
            "src": pa.array([e[0] for e in batch], pa.int64()),
            "dst": pa.array([e[1] for e in batch], pa.int64()),
            "weight": pa.array([e[2] for e in batch], pa.float64()),
            "ts": pa.array(ts.tz_convert("UTC").to_pydatetime().tolist(), pa.timestamp("us", tz="UTC")),
        })
        pq.write_table(table, folder / f"{name}-{i}.parquet")


def graph_pipeline() -> lg.Pipeline:
    from lockgate.graph.library import ConnectedComponents, PageRank, ShortestPaths

    p = lg.Pipeline("graphs", cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource(os.environ["LG_TEST_GRAPH_EDGES"], event_time="ts"), name="links")
    g = p.graph(links.select("src", "dst", "weight"), name="web")
    out = Path(os.environ["LG_TEST_GRAPH_OUT"])
    g.compute(ConnectedComponents(), name="components").sink(lg.CollectSink("components"), name="components_out")
    if os.environ.get("LG_TEST_GRAPH_ONLY") == "components":
        return p
    g.compute(ShortestPaths(source=SOURCE), name="distances").sink(lg.CollectSink("distances"), name="distances_out")
    every = int(os.environ.get("LG_TEST_GRAPH_EVERY", "1"))
    if os.environ.get("LG_TEST_GRAPH_RANKS") != "0":
        g.compute(PageRank(tolerance=1e-9), checkpoint_every=every, name="ranks").sink(
            lg.FileSink(str(out / "ranks"), key=["id"]), name="ranks_out")
    if os.environ.get("LG_TEST_GRAPH_REQUESTS"):
        requests = p.source(lg.FileSource(os.environ["LG_TEST_GRAPH_REQUESTS"], event_time="ts"), name="requests")
        g.traverse(requests, k=2, start="start", name="hops").sink(lg.CollectSink("hops"), name="hops_out")
    return p


def changed_pipeline() -> lg.Pipeline:
    """``components`` computes label propagation (another program) or PageRank (another value
    type) now, under the same name."""
    from lockgate.graph.library import LabelPropagation, PageRank

    p = lg.Pipeline("graphs", cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource(os.environ["LG_TEST_GRAPH_EDGES"], event_time="ts"), name="links")
    g = p.graph(links.select("src", "dst", "weight"), name="web")
    program = LabelPropagation() if os.environ["LG_TEST_GRAPH_CHANGED"] == "labels" else PageRank()
    g.compute(program, name="components").sink(lg.CollectSink("components"), name="components_out")
    return p


def _current(changelog: pd.DataFrame, upto: int, column: str) -> dict[int, float]:
    """What an updating stream's changelog says after window ``upto``: each id's last value."""
    rows = changelog[changelog["lg_window"] <= upto].sort_values("lg_window", kind="stable")
    last = rows.groupby("id", as_index=False).tail(1)
    return dict(zip(last["id"].tolist(), last[column].tolist(), strict=True))


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, batches, requests=None) -> None:
    _write(tmp_path / "edges", batches)
    monkeypatch.setenv("LG_TEST_GRAPH_EDGES", str(tmp_path / "edges"))
    monkeypatch.setenv("LG_TEST_GRAPH_OUT", str(tmp_path / "out"))
    if requests is not None:
        folder = tmp_path / "requests"
        folder.mkdir()
        for i, starts in enumerate(requests):
            ts = [T0 + timedelta(minutes=i, seconds=30)] * len(starts)
            pq.write_table(pa.table({"start": pa.array(starts, pa.int64()), "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}),
                           folder / f"req-{i}.parquet")
        monkeypatch.setenv("LG_TEST_GRAPH_REQUESTS", str(folder))


def _check_window(client, edges_so_far: list, w: int, ranks_dir: Path | None) -> None:
    g = digraph(edges_so_far)
    components = client.read_sink("graphs", "components").to_pandas()
    assert _current(components, w, "component") == nx_components(g), f"components after window {w}"
    distances = client.read_sink("graphs", "distances").to_pandas()
    got = _current(distances, w, "distance")
    want = nx_distances(g, SOURCE) if SOURCE in g else {}
    assert got.keys() == want.keys(), f"reached vertices after window {w}"
    assert all(abs(got[v] - want[v]) < 1e-9 for v in want), f"distances after window {w}"
    if ranks_dir is None:
        return
    import pyarrow.dataset as ds

    ranks = ds.dataset(ranks_dir, format="parquet", partitioning="hive").to_table().to_pandas()
    got_r, want_r = _current(ranks, w, "rank"), nx_pagerank(g)
    assert got_r.keys() == want_r.keys()
    assert max(abs(got_r[v] - want_r[v]) for v in want_r) < 1e-6, f"PageRank after window {w}"


def test_a_static_graph_equals_networkx_and_records_its_supersteps(spark, tmp_path, monkeypatch) -> None:
    edges = clustered_edges(350, seed=11, per_vertex=1.6)  # ~10k edges, one window: a static graph
    assert len(edges) >= 9_000
    _env(monkeypatch, tmp_path, [edges])
    monkeypatch.setenv("LG_TEST_GRAPH_EVERY", "2")
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        res = client.run(f"{__file__}:graph_pipeline", first=W0, last=W0)
        assert res.state == "FINISHED"
        _check_window(client, edges, W0, tmp_path / "out" / "ranks")
        steps = client.list_supersteps("graphs", W0)
    by_op: dict[str, list] = {}
    for s in steps:
        by_op.setdefault(s.operator, []).append(s)
    assert set(by_op) == {"components", "distances", "ranks"}
    for op, ss in by_op.items():
        assert [s.superstep for s in ss] == list(range(len(ss))), op
        assert ss[-1].halted_by is not None and all(s.halted_by is None for s in ss[:-1]), op
        assert ss[1].messages_sent > 0 and not any(s.resumed for s in ss), op
    assert by_op["components"][-1].halted_by == "no_messages"
    assert by_op["ranks"][-1].halted_by == "converged"
    # checkpoint_every=2: supersteps 0, 2, 4, ... and the last are checkpointed, the others held by Spark
    ranks = by_op["ranks"]
    assert [s.checkpointed for s in ranks[:-1]] == [s.superstep % 2 == 0 for s in ranks[:-1]]
    assert ranks[-1].checkpointed


def test_a_dynamic_graph_equals_networkx_from_scratch_after_every_window(spark, tmp_path, monkeypatch) -> None:
    base = clustered_edges(30, seed=3, per_vertex=1.5)
    later = [clustered_edges(12, seed=4 + i, per_vertex=1.2, first_vertex=0) for i in range(2)]
    batches = [base, *later]
    # the requests: vertices of the base graph, one of them the source of the shortest paths
    requests = [[SOURCE, base[5][0]], [base[9][1]], [SOURCE]]
    _env(monkeypatch, tmp_path, batches, requests)
    # PageRank's warm start window after window is checked by the example DAG's test
    # (tests/provider/test_provider_example_dags.py), on a graph of its own
    monkeypatch.setenv("LG_TEST_GRAPH_RANKS", "0")
    ref = f"{__file__}:graph_pipeline"
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        client.run(ref, first=W0, last=W0 + len(batches) - 1)
        so_far: list = []
        seen: set = set()
        for i, batch in enumerate(batches):
            so_far += [e for e in batch if (e[0], e[1]) not in seen]  # an edge seen again is the same edge
            seen |= {(e[0], e[1]) for e in batch}
            _check_window(client, so_far, W0 + i, None)
            g = digraph(so_far)
            hops = client.read_sink("graphs", "hops").to_pandas()
            for start in requests[i]:
                got = hops[(hops["lg_window"] == W0 + i) & (hops["start"] == start)]
                want = nx.single_source_shortest_path_length(g, start, cutoff=2) if start in g else {start: 0}
                assert dict(zip(got["vertex"], got["hops"], strict=True)) == want, f"2 hops from {start}, window {i}"
        steps = client.list_supersteps("graphs")
    # later windows continue from the previous values: components and distances only recompute
    # what the new edges reach, so they take fewer supersteps than from scratch
    first = [s for s in steps if s.window == W0 and s.operator == "components"]
    assert first and all(s.halted_by is None for s in first[:-1])
    hops_steps = [s for s in steps if s.operator == "hops" and s.window == W0]
    assert [s.superstep for s in hops_steps] == list(range(1, len(hops_steps) + 1)) and len(hops_steps) <= 2


def test_a_restored_window_recomputes_the_same_and_another_program_is_refused(spark, tmp_path, monkeypatch) -> None:
    batches = [clustered_edges(6, seed=1), clustered_edges(3, seed=2), clustered_edges(3, seed=3)]
    _env(monkeypatch, tmp_path, batches)
    monkeypatch.setenv("LG_TEST_GRAPH_ONLY", "components")
    ref = f"{__file__}:graph_pipeline"

    def components_after(client, w: int) -> dict:
        return _current(client.read_sink("graphs", "components").to_pandas(), w, "component")

    so_far = batches[0] + [e for e in batches[1] if (e[0], e[1]) not in {(x[0], x[1]) for x in batches[0]}]
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        client.run(ref, first=W0, last=W0 + 1)
        assert components_after(client, W0 + 1) == nx_components(digraph(so_far))
        # back to window 0's checkpoint: window 1 runs again from the graph as it was then
        client.restore("graphs", W0)
        client.run(ref, first=W0 + 1, last=W0 + 1)
        assert components_after(client, W0 + 1) == nx_components(digraph(so_far))
        assert [c.window for c in client.list_checkpoints("graphs")] == [W0, W0 + 1]

        for changed, expected in (
            ("labels", ["operator 'components' settings changed", "LabelPropagation"]),
            ("ranks", ["operator 'components' state 'values' changed from [id bigint, value bigint] to "
                       "[id bigint, value double]"]),
        ):
            monkeypatch.setenv("LG_TEST_GRAPH_CHANGED", changed)
            with pytest.raises(StateLayoutError) as err:
                client.run(f"{__file__}:changed_pipeline", first=W0 + 2, last=W0 + 2)
            assert all(text in str(err.value) for text in expected), str(err.value)
        assert client.get_job("graphs").last_window == W0 + 1  # nothing committed was lost
