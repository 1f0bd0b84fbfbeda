"""Records that break a source's or a graph's contract are never lost silently: under the default
``invalid="fail"`` the window fails with one line naming the source (or operator), the file, the
column and the count, and nothing of it is committed; under ``invalid="skip"`` they are dropped and
counted (``invalid_rows`` in ``lockgate cycles`` and the client's cycles). Results are checked
against pandas and networkx over the valid records.

- a CSV edge file with ``abc`` as an id, a JSON line that is not JSON, a record with no event time;
- a headerless CSV read with the default ``header=True`` fails naming the file (its first row is
  never taken for a header silently); ``header=False`` reads every row;
- edges with a null ``src`` or ``dst`` before a graph operator;
- the same counts one window per round and in catch-up groups.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import networkx as nx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.cli.cycles import cycles_report
from lockgate.errors import InvalidRecordsError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from graphref import nx_pagerank

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W0 = int(T0.timestamp()) // 60
SCHEMA = "src BIGINT, dst BIGINT, ts TIMESTAMP"


def _at(i: int, s: int = 1) -> str:
    return (T0 + timedelta(minutes=i, seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def csv_pipeline() -> lg.Pipeline:
    """Edges from CSV files: running edge counts per source vertex, and connected components."""
    from lockgate.graph.library import ConnectedComponents

    env = os.environ
    p = lg.Pipeline(env["LG_TEST_INVALID_JOB"], cycle_window=timedelta(minutes=1),
                    invalid=env.get("LG_TEST_INVALID_RULE", "fail"))
    fmt = env.get("LG_TEST_INVALID_FORMAT", "csv")
    header = env.get("LG_TEST_INVALID_HEADER", "1") == "1"
    links = p.source(lg.FileSource(env["LG_TEST_INVALID_PATH"], format=fmt, schema=SCHEMA, event_time="ts",
                                   **({"header": header} if fmt == "csv" else {})), name="links")
    links.key_by("src").aggregate(n=lg.count(), name="out_degree").sink(lg.CollectSink("out_degree"),
                                                                        name="out_degree_out")
    g = p.graph(links.select("src", "dst"), name="web")
    g.compute(ConnectedComponents(), name="cc").sink(lg.CollectSink("cc"), name="cc_out")
    return p


REF = f"{__file__}:csv_pipeline"


def _csv(folder: Path, name: str, rows: list[tuple], header: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = (["src,dst,ts"] if header else []) + [",".join(str(v) for v in r) for r in rows]
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _env(monkeypatch: pytest.MonkeyPatch, job: str, path: Path, **kw: str) -> None:
    monkeypatch.setenv("LG_TEST_INVALID_JOB", job)
    monkeypatch.setenv("LG_TEST_INVALID_PATH", str(path))
    for k, v in kw.items():
        monkeypatch.setenv(f"LG_TEST_INVALID_{k.upper()}", v)


GOOD_0 = [(1, 2, _at(0)), (2, 3, _at(0, 2))]
BAD_1 = [(3, 4, _at(1)), ("abc", 5, _at(1, 2)), (4, 5, _at(1, 3))]  # 'abc' is not a BIGINT
GOOD_2 = [(5, 6, _at(2)), (7, 8, _at(2, 2))]


def _components(edges: list[tuple]) -> dict[int, int]:
    g = nx.Graph()
    g.add_edges_from((a, b) for a, b, _ in edges)
    return {v: min(c) for c in nx.connected_components(g) for v in c}


def _current(table: pa.Table, key: str, column: str) -> dict:
    rows = sorted(zip(table["lg_window"].to_pylist(), table[key].to_pylist(), table[column].to_pylist(),
                      strict=True))
    return {k: v for _w, k, v in rows}


def test_an_unparseable_csv_value_fails_the_window_naming_file_column_and_count(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "links"
    _csv(folder, "w0.csv", GOOD_0)
    bad = _csv(folder, "w1.csv", BAD_1)
    _env(monkeypatch, "invalid_fail", folder)
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        assert client.run(REF, first=W0, last=W0).state == "FINISHED"
        with pytest.raises(InvalidRecordsError) as err:
            client.run(REF, first=W0 + 1, last=W0 + 1)
        message = str(err.value)
        assert "\n" not in message
        assert "source 'links'" in message and "1 record " in message and bad.name in message
        assert "column 'src' BIGINT: 'abc'" in message and "invalid='skip'" in message
        assert err.value.count == 1 and err.value.column == "src" and bad.name in (err.value.file or "")
        # nothing of the window is committed: its checkpoint is missing, the sinks hold window 0 only
        assert [c.window for c in client.list_checkpoints("invalid_fail")] == [W0]
        assert set(client.read_sink("invalid_fail", "out_degree")["lg_window"].to_pylist()) == {W0}

        # fixed (the bad row removed), the window runs and the result is exact
        _csv(folder, "w1.csv", [r for r in BAD_1 if r[0] != "abc"])
        _csv(folder, "w2.csv", GOOD_2)
        assert client.run(REF, first=W0 + 1, last=W0 + 2).state == "FINISHED"
        edges = GOOD_0 + [r for r in BAD_1 if r[0] != "abc"] + GOOD_2
        assert _current(client.read_sink("invalid_fail", "cc"), "id", "component") == _components(edges)


@pytest.mark.parametrize("catchup", ["off", 3])
def test_skip_drops_and_counts_invalid_records(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               catchup) -> None:
    folder = tmp_path / "links"
    _csv(folder, "w0.csv", GOOD_0 + [(9, "x", _at(0, 5))])  # 'x' is not a BIGINT either
    _csv(folder, "w1.csv", BAD_1)
    _csv(folder, "w2.csv", GOOD_2)
    job = f"invalid_skip_{catchup}"
    _env(monkeypatch, job, folder, rule="skip")
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        assert client.run(REF, first=W0, last=W0 + 2, catchup=catchup).state == "FINISHED"
        cycles = {c.window: c for c in client.list_cycles(job).cycles}
        assert sum(c.invalid_rows for c in cycles.values()) == 2
        assert cycles[W0 + 1].invalid_rows == 1
        valid = GOOD_0 + [r for r in BAD_1 if r[0] != "abc"] + GOOD_2
        assert sum(c.rows_in for c in cycles.values()) == len(valid)
        assert _current(client.read_sink(job, "cc"), "id", "component") == _components(valid)
        degrees = _current(client.read_sink(job, "out_degree"), "src", "n")
        assert degrees == {s: sum(1 for a, _b, _t in valid if a == s) for s, _d, _t in valid}
        # lockgate cycles shows the tally
        data, text = cycles_report(argparse.Namespace(job=job, window=None, limit=20), client)
        assert "INVALID" in text.splitlines()[0]
        assert {d["window"]: d["invalid_rows"] for d in data}[W0 + 1] == 1


def test_a_record_with_no_event_time_fails_the_window_whatever_the_rule(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No window holds it, so it cannot be counted in one: it fails the window, as Flink fails a
    record with no timestamp in an event-time window. (A line whose time does not parse,
    'not-a-time', is a line that does not parse: skipped and counted under invalid='skip'.)"""
    folder = tmp_path / "links"
    path = _csv(folder, "w0.csv", GOOD_0 + [(9, 9, "not-a-time"), (8, 8, "")])
    for catchup in ("off", 3):
        _env(monkeypatch, f"timeless_{catchup}", folder, rule="skip")
        with lg.connect("embedded", home=str(tmp_path / f"home_{catchup}")) as client:
            with pytest.raises(InvalidRecordsError) as err:
                client.run(REF, first=W0, last=W0 + 1, catchup=catchup)
            message = str(err.value)
            assert "\n" not in message and path.name in message and "1 record in " in message and "has no event time" in message
            assert "column 'ts'" in message and err.value.column == "ts"
            assert client.list_checkpoints(f"timeless_{catchup}") == []

    # Parquet: a null in the event-time column (a footer's row count never stands in for the scan then)
    pfolder = tmp_path / "parquet"
    pfolder.mkdir()
    ts = [T0 + timedelta(seconds=1), None, T0 + timedelta(minutes=1)]
    pq.write_table(pa.table({"src": pa.array([1, 2, 3], pa.int64()), "dst": pa.array([2, 3, 4], pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), pfolder / "p.parquet")
    for catchup in ("off", 3):
        _env(monkeypatch, f"timeless_pq_{catchup}", pfolder, rule="skip", format="parquet")
        with lg.connect("embedded", home=str(tmp_path / f"home_pq_{catchup}")) as client, \
                pytest.raises(InvalidRecordsError, match="1 record in .*p.parquet has no event time"):
            client.run(REF, first=W0, last=W0 + 1, catchup=catchup)


def test_a_headerless_csv_is_never_read_as_a_header(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "links"
    path = _csv(folder, "w0.csv", GOOD_0 + [(3, 1, _at(0, 3))], header=False)
    _env(monkeypatch, "headerless", folder)
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(InvalidRecordsError) as err:
            client.run(REF, first=W0, last=W0)
        message = str(err.value)
        assert "\n" not in message and path.name in message and "header" in message
        assert "header=False" in message
        assert client.list_checkpoints("headerless") == []

    _env(monkeypatch, "headerless_ok", folder, header="0")
    with lg.connect("embedded", home=str(tmp_path / "home2")) as client:
        assert client.run(REF, first=W0, last=W0).state == "FINISHED"
        assert client.list_cycles("headerless_ok").cycles[0].rows_in == 3  # every row, the first too
        assert _current(client.read_sink("headerless_ok", "cc"), "id", "component") == {1: 1, 2: 1, 3: 1}


def test_a_malformed_json_line_fails_the_window(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "links"
    folder.mkdir()
    lines = [json.dumps({"src": 1, "dst": 2, "ts": _at(0)}), "{not json", json.dumps({"src": 2, "dst": 3, "ts": _at(0)})]
    (folder / "w0.json").write_text("\n".join(lines) + "\n")
    _env(monkeypatch, "bad_json", folder, format="json")
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(InvalidRecordsError) as err:
            client.run(REF, first=W0, last=W0)
        assert "source 'links': 1 record in" in str(err.value) and "w0.json" in str(err.value)
        assert "not JSON" in str(err.value)


def graph_pipeline() -> lg.Pipeline:
    from lockgate.graph.library import ConnectedComponents, PageRank

    env = os.environ
    p = lg.Pipeline(env["LG_TEST_INVALID_JOB"], cycle_window=timedelta(minutes=1),
                    invalid=env.get("LG_TEST_INVALID_RULE", "fail"))
    links = p.source(lg.FileSource(env["LG_TEST_INVALID_PATH"], event_time="ts"), name="links")
    g = p.graph(links.select("src", "dst"), name="web")
    g.compute(ConnectedComponents(), name="cc").sink(lg.CollectSink("cc"), name="cc_out")
    g.compute(PageRank(tolerance=1e-10), emit="all", name="pr").sink(lg.CollectSink("pr"), name="pr_out")
    return p


def _null_edges(folder: Path) -> list[tuple[int, int]]:
    folder.mkdir(parents=True, exist_ok=True)
    src = [1, None, 2, 3, 4]
    dst = [2, 3, None, 1, 5]
    ts = [T0 + timedelta(seconds=i) for i in range(len(src))]
    pq.write_table(pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), folder / "w0.parquet")
    return [(a, b) for a, b in zip(src, dst, strict=True) if a is not None and b is not None]


def test_null_vertex_ids_fail_or_are_counted(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "links"
    valid = _null_edges(folder)
    _env(monkeypatch, "null_ids", folder)
    ref = f"{__file__}:graph_pipeline"
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(InvalidRecordsError) as err:
            client.run(ref, first=W0, last=W0)
        message = str(err.value)
        assert "\n" not in message and "operator 'cc'" in message and "2 edges" in message
        assert "'src' (1)" in message and "'dst' (1)" in message and "IS NOT NULL" in message
        assert client.list_checkpoints("null_ids") == []

    _env(monkeypatch, "null_ids_skip", folder, rule="skip")
    with lg.connect("embedded", home=str(tmp_path / "home2")) as client:
        assert client.run(ref, first=W0, last=W0).state == "FINISHED"
        cycle = client.list_cycles("null_ids_skip").cycles[0]
        assert cycle.invalid_rows == 2  # two edges, counted once though both graph operators drop them
        g = nx.DiGraph(valid)
        ranks = _current(client.read_sink("null_ids_skip", "pr"), "id", "rank")
        want = nx_pagerank(g)
        assert ranks.keys() == want.keys() and max(abs(ranks[v] - want[v]) for v in want) < 1e-6
        assert abs(sum(ranks.values()) - 1) < 1e-6
        assert _current(client.read_sink("null_ids_skip", "cc"), "id", "component") == {
            v: min(c) for c in nx.weakly_connected_components(g) for v in c}


def test_the_readers_own_malformed_modes_are_refused_for_the_invalid_rule() -> None:
    with pytest.raises(ValueError, match="invalid='fail' or invalid='skip'"):
        lg.FileSource("data", format="csv", schema=SCHEMA, options={"mode": "DROPMALFORMED"})
    with pytest.raises(ValueError, match="invalid="):
        lg.FileSource("data", format="csv", schema=SCHEMA, invalid="drop")
    with pytest.raises(ValueError, match="invalid="):
        lg.Pipeline("p", invalid="ignore")
    with pytest.raises(ValueError, match="disagree"):
        lg.FileSource("data", format="csv", schema=SCHEMA, options={"header": "false"})
