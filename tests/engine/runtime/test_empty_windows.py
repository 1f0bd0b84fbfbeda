"""Every stateful operator carries its state unchanged through windows that change nothing: a
window with no records, a window whose records are all late, and a catch-up group of empty
windows; a restore to an empty window's checkpoint restores the state as it was.

One pipeline holds one operator of every stateful kind (windowed, running and updating
aggregates, a running top-N, dedup, sessions, a windowed top-N, OVER, interval, TTL and windowed
joins, a graph's components and PageRank). Its records land in windows 0, 2 and 4; window 1 is
empty, window 3 holds only late records, windows 5..7 are empty (they close the last windows).
The pipeline runs three ways, and each time every sink's output is checked against pandas (and
networkx for the graph) over every on-time record, never against Lockgate's own operators:

- one window per round (``catchup="off"``);
- in catch-up groups of three (the last group, windows 6 and 7, is empty windows only; without the
  graph operators, since a plan with one runs a window per round);
- after a restore to the empty window 1, the windows after it run again (``make test-long``; the
  test command checks what that restore reads: the empty window's checkpoint holds the state of the
  window before it).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import assert_same_rows, read_sink, sessions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from graphref import nx_pagerank

S = 1_000_000
CYCLE_S = 10
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_US = int(T0.timestamp()) * S
W0 = T0_US // (CYCLE_S * S)
LAST = W0 + 7
LATENESS_S = 5
#: windows (from W0) holding on-time records; window 3 holds only late ones
DATA_WINDOWS = (0, 2, 4)
LATE_WINDOW = 3
EDGES = {0: [(1, 2), (5, 6)], 2: [(2, 3), (6, 7)], 4: [(4, 1), (7, 5)]}
LATE_EDGES = [(3, 9)]
JOB = "empty_windows"
#: minutes of Spark rounds (the test command hands the longest modules out first: tests/module_seconds.json)
pytestmark = pytest.mark.slow


def empty_windows_pipeline() -> lg.Pipeline:
    from lockgate.graph.library import ConnectedComponents, PageRank

    p = lg.Pipeline(JOB, cycle_window=timedelta(seconds=CYCLE_S), parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(seconds=LATENESS_S)))
    folder = Path(os.environ["LG_TEST_EMPTY_DATA"])
    events = p.source(lg.FileSource(str(folder / "events"), event_time="ts", arrival="arr"), name="events")
    keyed = events.key_by("k")
    keyed.window(lg.Tumbling(timedelta(seconds=20))).aggregate(n=lg.count(), s=lg.sum("v"), name="tumbling") \
        .sink(lg.CollectSink("tumbling"), name="tumbling_out")
    running = keyed.aggregate(n=lg.count(), s=lg.sum("v"), name="running")
    running.sink(lg.CollectSink("running"), name="running_out")
    running.key_by("n").aggregate(keys=lg.count(), name="per_n").sink(lg.CollectSink("per_n"), name="per_n_out")
    keyed.aggregate(top=lg.top_k(2, by="v", columns=["ts"]), name="running_top") \
        .sink(lg.CollectSink("running_top"), name="running_top_out")
    events.deduplicate("k", name="dedup").sink(lg.CollectSink("dedup"), name="dedup_out")
    keyed.window(lg.Session(timedelta(seconds=8))).aggregate(n=lg.count(), s=lg.sum("v"), name="sessions") \
        .sink(lg.CollectSink("sessions"), name="sessions_out")
    keyed.window(lg.Tumbling(timedelta(seconds=20))).top_n(2, by="v", name="top2") \
        .sink(lg.CollectSink("top2"), name="top2_out")
    keyed.over(preceding=2, s=lg.sum("v"), name="over").sink(lg.CollectSink("over"), name="over_out")
    left = events.filter("side = 'L'", name="left")
    right = events.filter("side = 'R'", name="right")
    left.join(right, on="k", between=(timedelta(seconds=-30), timedelta(seconds=30)), name="interval") \
        .sink(lg.CollectSink("interval"), name="interval_out")
    left.join(right, on="k", ttl=timedelta(seconds=20), name="ttl").sink(lg.CollectSink("ttl"), name="ttl_out")
    left.join(right, on="k", window=lg.Tumbling(timedelta(seconds=30)), name="windowed_join") \
        .sink(lg.CollectSink("windowed_join"), name="windowed_join_out")
    if os.environ.get("LG_TEST_EMPTY_GRAPH") == "0":
        return p  # a plan with a graph operator runs no catch-up groups
    links = p.source(lg.FileSource(str(folder / "links"), event_time="ts", arrival="arr"), name="links")
    g = p.graph(links.select("src", "dst"), name="web")
    g.compute(ConnectedComponents(), name="cc").sink(lg.CollectSink("cc"), name="cc_out")
    g.compute(PageRank(tolerance=1e-4), emit="all", name="pr").sink(lg.CollectSink("pr"), name="pr_out")
    return p


# -- the data --------------------------------------------------------------------------------
def _ts(seconds: np.ndarray) -> pa.Array:
    return pa.array((T0_US + (seconds * S).astype("int64")).tolist(), pa.timestamp("us", tz="UTC"))


def _write(folder: Path) -> pd.DataFrame:
    """Events of windows 0, 2, 4 (on time) and 3 (late: event time in window 0); returns every
    event with ``late``."""
    rng = np.random.default_rng(27)
    parts = []
    for i in (*DATA_WINDOWS, LATE_WINDOW):
        n = 24
        # distinct instants (OVER and dedup order by them), distinct values (top-N has no ties)
        offsets = np.sort(rng.choice(np.arange(0, CYCLE_S * 1000), n, replace=False)) / 1000.0
        event_s = (0 if i == LATE_WINDOW else i * CYCLE_S) + offsets
        arrival_s = i * CYCLE_S + offsets
        df = pd.DataFrame({
            "k": rng.integers(0, 5, n).astype("int64") + (5 if i == 4 else 0) * (rng.random(n) < 0.3),
            "v": rng.choice(np.arange(1, 10_000), n, replace=False).astype("int64") + i * 10_000,
            "side": np.where(rng.random(n) < 0.5, "L", "R"),
            "event_s": event_s,
            "arrival_s": arrival_s,
        })
        df["late"] = i == LATE_WINDOW
        parts.append(df)
        (folder / "events").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"k": df["k"], "v": df["v"], "side": df["side"], "ts": _ts(df["event_s"].to_numpy()),
                                 "arr": _ts(df["arrival_s"].to_numpy())}), folder / "events" / f"part-{i}.parquet")
    for i, edges in [*EDGES.items(), (LATE_WINDOW, LATE_EDGES)]:
        (folder / "links").mkdir(parents=True, exist_ok=True)
        offsets = np.arange(len(edges), dtype=float) + 1.0
        event_s = (0 if i == LATE_WINDOW else i * CYCLE_S) + offsets
        pq.write_table(pa.table({
            "src": pa.array([a for a, _ in edges], pa.int64()), "dst": pa.array([b for _, b in edges], pa.int64()),
            "ts": _ts(event_s), "arr": _ts(i * CYCLE_S + offsets),
        }), folder / "links" / f"part-{i}.parquet")
    events = pd.concat(parts, ignore_index=True)
    events["ts_us"] = T0_US + (events["event_s"] * S).round().astype("int64")
    return events


# -- references (pandas and networkx over the on-time records) --------------------------------
def _windows(df: pd.DataFrame, size_s: int) -> pd.DataFrame:
    out = df.copy()
    out["window_start"] = out["ts_us"] - (out["ts_us"] - 0) % (size_s * S)
    out["window_end"] = out["window_start"] + size_s * S
    return out


def _current(changelog: pd.DataFrame, keys: list[str], upto: int | None = None) -> pd.DataFrame:
    """The table an updating stream's changelog describes: each key's last row, deletes dropped."""
    rows = changelog if upto is None else changelog[changelog["lg_window"] <= upto]
    rows = rows.sort_values("lg_window", kind="stable")
    last = rows.groupby(keys, as_index=False).tail(1)
    if "op" in last.columns:
        last = last[last["op"] != "-D"]
    return last


def _pairs(events: pd.DataFrame, match: Any) -> pd.DataFrame:
    left, right = events[events["side"] == "L"], events[events["side"] == "R"]
    pairs = left.merge(right, on="k", suffixes=("", "_right"))
    return pairs[match(pairs)]


def _graph_after(upto: int) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edges_from(e for i, edges in EDGES.items() if W0 + i <= upto for e in edges)
    return g


def _same(got: pd.DataFrame, want: pd.DataFrame, cols: list[str], what: str) -> None:
    assert_same_rows(got, want[cols], cols, what=what)


def check_outputs(client: Any, events: pd.DataFrame, graph: bool = True) -> None:
    """Every sink's committed output against the references over ``events``' on-time records."""
    ok = events[~events["late"]]

    got = read_sink(client, JOB, "tumbling")
    want = _windows(ok, 20).groupby(["k", "window_start", "window_end"], as_index=False).agg(
        n=("v", "size"), s=("v", "sum"))
    _same(got, want, ["window_start", "window_end", "k", "n", "s"], what="tumbling windows")

    want_totals = ok.groupby("k", as_index=False).agg(n=("v", "size"), s=("v", "sum"))
    running = read_sink(client, JOB, "running")
    _same(_current(running, ["k"]), want_totals, ["k", "n", "s"], what="running aggregate")

    per_n = _current(read_sink(client, JOB, "per_n"), ["n"])
    want_per_n = want_totals.groupby("n", as_index=False).agg(keys=("k", "size"))
    _same(per_n, want_per_n, ["n", "keys"], what="aggregate over updates")

    top = _current(read_sink(client, JOB, "running_top"), ["k"])
    got_top = {int(r.k): [int(t["v"]) for t in r.top] for r in top.itertuples()}
    want_top = {int(k): sorted(g["v"].tolist(), reverse=True)[:2] for k, g in ok.groupby("k")}
    assert got_top == want_top, "running top-N"

    dedup = read_sink(client, JOB, "dedup")
    want_dedup = ok.sort_values("ts_us").groupby("k", as_index=False).head(1)
    _same(dedup, want_dedup, ["k", "v"], what="dedup")

    got = read_sink(client, JOB, "sessions")
    want = sessions(ok, ["k"], 8 * S).groupby(["k", "window_start", "window_end"], as_index=False).agg(
        n=("v", "size"), s=("v", "sum"))
    _same(got, want, ["window_start", "window_end", "k", "n", "s"], what="sessions")

    got = read_sink(client, JOB, "top2")
    ranked = _windows(ok, 20).sort_values("v", ascending=False)
    ranked["rank"] = ranked.groupby(["k", "window_start"]).cumcount() + 1
    want = ranked[ranked["rank"] <= 2]
    _same(got, want, ["window_start", "window_end", "k", "v", "rank"], what="windowed top-N")

    got = read_sink(client, JOB, "over")
    ordered = ok.sort_values(["k", "ts_us"])
    want = ordered.assign(s=ordered.groupby("k")["v"].transform(lambda s: s.rolling(3, min_periods=1).sum()))
    _same(got, want, ["k", "v", "s"], what="OVER")

    for name, bound_s in (("interval", 30), ("ttl", 20)):
        got = read_sink(client, JOB, name)
        want = _pairs(ok, lambda p, b=bound_s: (p["ts_us"] - p["ts_us_right"]).abs() <= b * S)
        _same(got, want, ["k", "v", "v_right"], what=f"{name} join")

    got = read_sink(client, JOB, "windowed_join")
    want = _pairs(ok, lambda p: p["ts_us"] // (30 * S) == p["ts_us_right"] // (30 * S))
    _same(got, want, ["k", "v", "v_right"], what="windowed join")

    if not graph:
        return
    cc = read_sink(client, JOB, "cc")
    pr = read_sink(client, JOB, "pr")
    for w in range(W0, LAST + 1):
        g = _graph_after(w)
        want_cc = {v: min(c) for c in nx.weakly_connected_components(g) for v in c}
        got_cc = _current(cc, ["id"], w)
        assert dict(zip(got_cc["id"], got_cc["component"], strict=True)) == want_cc, f"components after {w}"
        computed = sorted(set(pr["lg_window"]))
        last = max((x for x in computed if x <= w), default=None)
        if last is None:
            continue
        ranks = pr[pr["lg_window"] == last]
        want_pr = nx_pagerank(_graph_after(last))
        got_pr = dict(zip(ranks["id"], ranks["rank"], strict=True))
        assert got_pr.keys() == want_pr.keys(), f"PageRank's vertices after {w}"
        # a loose tolerance keeps the supersteps few: what is checked here is which vertices the graph holds
        assert max(abs(got_pr[v] - want_pr[v]) for v in want_pr) < 1e-3, f"PageRank after {w}"
        assert abs(sum(got_pr.values()) - 1) < 1e-6


# -- the runs --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    folder = tmp_path_factory.mktemp("empty_windows_data")
    frame = _write(folder)
    os.environ["LG_TEST_EMPTY_DATA"] = str(folder)
    return frame


REF = f"{__file__}:empty_windows_pipeline"


@pytest.fixture(scope="module")
def one_by_one(spark, events, tmp_path_factory):
    with lg.connect("embedded", home=str(tmp_path_factory.mktemp("empty_one"))) as client:
        run = client.run(REF, first=W0, last=LAST, catchup="off")
        assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
        yield client


def test_one_window_per_round(one_by_one, events) -> None:
    check_outputs(one_by_one, events)
    cycles = {c.window: c for c in one_by_one.list_cycles(JOB, limit=20).cycles}
    assert cycles[W0 + 1].rows_in == 0 and cycles[W0 + LATE_WINDOW].late_rows > 0


def test_an_empty_window_checkpoint_holds_the_state_it_was_given(one_by_one) -> None:
    """The outside user's symptom: the graph's edges at the empty window's checkpoint were 0 rows."""
    for op, table in (("cc", "edges"), ("pr", "edges"), ("cc", "values"), ("running", None), ("dedup", None),
                      ("running_top", None), ("interval", "left"), ("windowed_join", "right")):
        before = one_by_one.read_state(JOB, op, window=W0, table=table).to_pandas()
        after = one_by_one.read_state(JOB, op, window=W0 + 1, table=table).to_pandas()
        assert len(before) > 0, (op, table)
        cols = sorted(before.columns)
        key = lambda df, c=cols: df[c].astype(str).sort_values(c).reset_index(drop=True)  # noqa: E731
        pd.testing.assert_frame_equal(key(after), key(before), obj=f"{op}.{table} across the empty window")
    edges = one_by_one.read_state(JOB, "cc", window=W0 + LATE_WINDOW, table="edges").to_pandas()
    assert sorted(zip(edges["src"], edges["dst"], strict=True)) == sorted(EDGES[0] + EDGES[2])


@pytest.mark.long  # its short form in the test command: the empty window's checkpoint check above
def test_restore_to_an_empty_window_then_run_again(one_by_one, events) -> None:
    one_by_one.restore(JOB, W0 + 1)
    run = one_by_one.run(REF, first=W0 + 2, last=LAST, catchup="off")
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 - 1
    check_outputs(one_by_one, events)


def test_catch_up_groups_with_empty_windows(spark, events, tmp_path_factory, monkeypatch) -> None:
    """Every operator but the graph's (a plan with one runs no groups), in groups of three."""
    monkeypatch.setenv("LG_TEST_EMPTY_GRAPH", "0")
    with lg.connect("embedded", home=str(tmp_path_factory.mktemp("empty_groups"))) as client:
        run = client.run(REF, first=W0, last=LAST, catchup=3)
        assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
        groups = [c.timings.get("group") for c in client.list_cycles(JOB, limit=20).cycles]
        assert max(g or 1 for g in groups) == 3, groups
        check_outputs(client, events, graph=False)
        # the last group is empty windows only: its checkpoint still holds every key's totals
        totals = client.read_state(JOB, "running", window=LAST).to_pandas()
        assert len(totals) == events.loc[~events["late"], "k"].nunique()
