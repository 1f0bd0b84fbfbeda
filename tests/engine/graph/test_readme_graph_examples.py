"""The examples of the documentation site's graph page (docs/pipelines/graphs.md), taken from the
page by their ``<!-- graph-example: NAME -->`` markers and run as they are (only the pipeline's
relative ``data/`` and ``out/`` paths are made absolute), checked against networkx and against the
results the page shows (tests/docs/test_docs_examples.py runs the other pages' examples):

- ``pipeline`` + ``program``: the pipeline with the four library algorithms, a traversal and the
  custom vertex program (``Widest``), over the records of ``data`` in window 20454 (2026-01-01);
  every value of the ``results`` table and the traversal equal networkx's (PageRank within 1e-6,
  summing to 1, unweighted);
- ``library``: the library functions on DataFrames, with the results the page shows.
"""

from __future__ import annotations

import ast
import math
import re
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import networkx as nx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from graphref import networkx_pagerank
from pyspark.sql import SparkSession

import lockgate as lg

PAGE = Path(__file__).resolve().parents[3] / "docs" / "pipelines" / "graphs.md"
WINDOW = 20454  # the page's window: daily windows since the Unix epoch
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _section() -> str:
    return PAGE.read_text()


def _after(name: str) -> str:
    marker = f"<!-- graph-example: {name} -->\n"
    section = _section()
    assert section.count(marker) == 1, f"docs/pipelines/graphs.md has no single {marker!r}"
    return section[section.index(marker) + len(marker):]


def page_code(name: str) -> str:
    """The ```python block right after the marker ``name``."""
    rest = _after(name)
    match = re.match(r"```python\n(.*?)\n```\n", rest, re.DOTALL)
    assert match, f"no ```python block right after the marker {name!r}"
    return match.group(1)


def page_table(name: str) -> list[dict[str, object]]:
    """The Markdown table right after the marker ``name``: one dict per row by column name (``—``
    is None, ``inf`` infinity)."""
    lines = []
    for line in _after(name).splitlines():
        if not line.startswith("|"):
            break
        lines.append([c.strip().strip("`") for c in line.strip().strip("|").split("|")])
    header, rows = lines[0], lines[2:]

    def cell(text: str) -> object:
        if text == "—":
            return None
        return math.inf if text == "inf" else ast.literal_eval(text)

    return [dict(zip(header, map(cell, row), strict=True)) for row in rows]


def run_page_code(code: str, namespace: dict) -> object:
    """Run ``code`` in ``namespace``; the value of its last statement when that is an expression."""
    tree = ast.parse(code)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, "docs/pipelines/graphs.md", "exec"), namespace)
    return None if last is None else eval(compile(ast.Expression(last.value), "docs/pipelines/graphs.md", "eval"), namespace)


def page_data() -> dict:
    namespace: dict = {}
    run_page_code(page_code("data"), namespace)
    return namespace


def graph_of(links, pages) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_weighted_edges_from(links)
    g.add_nodes_from(pages)
    return g


def label_propagation_reference(g: nx.DiGraph, max_iterations: int = 20) -> dict:
    """The page's rule written out: each iteration every vertex takes the most frequent label of
    its neighbours (once per edge, both directions), the smallest of equally frequent ones; a vertex
    without neighbours keeps its label; stop when nothing changes."""
    neighbours = {v: [*g.successors(v), *g.predecessors(v)] for v in g}
    labels = {v: v for v in g}
    for _ in range(max_iterations):
        new = {}
        for v, ns in neighbours.items():
            counts = Counter(labels[n] for n in ns)
            top = max(counts.values(), default=0)
            new[v] = min((label for label, c in counts.items() if c == top), default=labels[v])
        if new == labels:
            break
        labels = new
    return labels


def widest_reference(g: nx.DiGraph, source: int) -> dict:
    """Each vertex's widest-path width from ``source`` by networkx reachability: the largest
    capacity ``c`` such that the edges of capacity >= ``c`` lead from ``source`` to it."""
    out = {source: math.inf}
    for c in sorted({w for _, _, w in g.edges(data="weight")}):
        sub = nx.DiGraph([(a, b) for a, b, w in g.edges(data="weight") if w >= c])
        if source in sub:
            out.update({v: c for v in nx.descendants(sub, source) - {source}})
    return out


def _write(folder: Path, columns: dict[str, pa.Array]) -> None:
    folder.mkdir(parents=True)
    n = len(next(iter(columns.values())))
    ts = pa.array([T0 + timedelta(hours=1, seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({**columns, "ts": ts}), folder / "part-0.parquet")


def _column(table: pa.Table, name: str) -> dict:
    rows = table.to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), f"one row per vertex in {name}"
    return {r["id"]: r[name] for r in rows}


def test_the_graph_page_pipeline_gives_its_table_and_networkx_results(spark: SparkSession, tmp_path: Path) -> None:
    data = page_data()
    links, pages, requests = data["links"], data["pages"], data["requests"]
    _write(tmp_path / "data" / "links", {"src": pa.array([e[0] for e in links], pa.int64()),
                                         "dst": pa.array([e[1] for e in links], pa.int64()),
                                         "weight": pa.array([e[2] for e in links], pa.float64())})
    _write(tmp_path / "data" / "pages", {"id": pa.array(pages, pa.int64())})
    _write(tmp_path / "data" / "requests", {"start": pa.array(requests, pa.int64())})
    code = page_code("pipeline") + "\n\n" + page_code("program") + "\n"
    assert code.count('"data/') == 3 and code.count('"out/') == 1
    code = code.replace('"data/', f'"{tmp_path}/data/').replace('"out/', f'"{tmp_path}/out/')
    (tmp_path / "graph_daily.py").write_text(code)

    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        result = client.run(f"{tmp_path / 'graph_daily.py'}:p", first=WINDOW, last=WINDOW)
        assert result.state == "FINISHED"
        sinks = {name: client.read_sink("graph_daily", name) for name in ("components", "distances", "labels",
                                                                           "widths", "hops")}
    ranks_table = pq.read_table(tmp_path / "out" / "ranks" / "_current" / "current.parquet")
    window_end = T0 + timedelta(days=1)  # the page: window 20454 is 2026-01-01, as_of its end
    for name, table in [*sinks.items(), ("ranks", ranks_table)]:
        if name != "hops":
            assert set(table.to_pylist()[0]) >= {"id", "as_of"}, name
            assert {r["as_of"] for r in table.to_pylist()} == {window_end}, name
    assert all(r["lg_window"] == WINDOW for t in sinks.values() for r in t.to_pylist())

    g = graph_of(links, pages)
    got = {
        "rank": _column(ranks_table, "rank"),
        "component": _column(sinks["components"], "component"),
        "distance": _column(sinks["distances"], "distance"),
        "label": _column(sinks["labels"], "label"),
        "width": _column(sinks["widths"], "width"),
    }
    # against networkx
    ranks = got["rank"]
    unweighted, weighted = networkx_pagerank(g, weight=None), networkx_pagerank(g, weight="weight")
    assert ranks.keys() == set(g) and len(g) == 12
    assert abs(sum(ranks.values()) - 1.0) < 1e-9
    assert max(abs(ranks[v] - unweighted[v]) for v in g) < 1e-6
    assert 0.05 < max(abs(ranks[v] - weighted[v]) for v in g) < 0.06  # the page: "more than 0.05 apart"
    assert got["component"] == {v: min(c) for c in nx.weakly_connected_components(g) for v in c}
    assert got["distance"] == nx.single_source_dijkstra_path_length(g, 1)
    assert got["label"] == label_propagation_reference(g)
    assert got["width"] == widest_reference(g, 1)
    hops = sinks["hops"].to_pylist()
    assert set(hops[0]) >= {"start", "ts", "vertex", "hops"}  # the request's columns, vertex, hops
    assert {r["start"] for r in hops} == set(requests)
    for start in requests:
        want = nx.single_source_shortest_path_length(g, start, cutoff=2)
        assert {r["vertex"]: r["hops"] for r in hops if r["start"] == start} == want
    assert {r["vertex"]: r["hops"] for r in hops} == {1: 0, 2: 1, 3: 1, 4: 2}  # as the page says

    # against the page's table
    table = page_table("results")
    assert [row["id"] for row in table] == sorted(g)
    for column, values in got.items():
        shown = {row["id"]: row[column] for row in table if row[column] is not None}
        assert shown.keys() == values.keys(), column
        for v, want in shown.items():
            assert values[v] == pytest.approx(want, abs=5e-5 if column == "rank" else 0), (column, v)


def test_the_graph_page_library_example_prints_what_it_shows(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp() folders
    namespace = page_data()
    code = page_code("library")
    printed = run_page_code(code, namespace)
    shown = ast.literal_eval(code.rstrip().splitlines()[-1].removeprefix("# "))
    assert printed == shown
    g = graph_of(namespace["links"], namespace["pages"])
    assert printed == {v: float(d) for v, d in nx.single_source_shortest_path_length(g, 1).items()}
    assert namespace["result"].halted_by == "no_messages"
    components = namespace["components"]
    assert components == {v: min(c) for c in nx.weakly_connected_components(g) for v in c}
    assert components == {row["id"]: row["component"] for row in page_table("results")}
