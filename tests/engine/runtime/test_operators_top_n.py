"""Windowed top-N, run through the embedded client and checked against pandas over the same
Nexmark bids: the ``n`` highest (or lowest) records per key and window, ties broken by the
other columns ascending, emitted in the cycle whose watermark closes the window; the state
never holds more than ``n`` rows per key and window."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

import lockgate as lg
from lockgate.errors import CompileError

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    T0_ISO,
    W0,
    S,
    assert_same_rows,
    embedded_client,
    emit_cycle,
    nexmark_events,
    read_sink,
    sliding,
    tumbling,
)

SOURCE = {"events_per_second": 101, "seed": 23}
LAST = W0 + 5
BID_COLUMNS = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]


def top_bids() -> lg.Pipeline:
    p = lg.Pipeline("op_top_n", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    (
        bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=20)))  # spans two cycles
        .top_n(3, by="price", name="top3")
        .sink(lg.CollectSink("top3"), name="top3_out")
    )
    (
        bids.window(lg.Sliding(timedelta(seconds=20), timedelta(seconds=10)))  # no key: per window
        .top_n(5, by=["price"], ascending=True, rank="pos", name="cheapest")
        .sink(lg.CollectSink("cheapest"), name="cheapest_out")
    )
    (
        bids.key_by("bidder").window(lg.Tumbling(timedelta(seconds=30)))
        .top_n(1, by="date_time", name="latest")  # the latest bid per bidder and window
        .sink(lg.CollectSink("latest"), name="latest_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_top_n"))


@pytest.fixture(scope="module")
def run(client):
    return client.run(f"{__file__}:top_bids", first=W0, last=LAST)


@pytest.fixture(scope="module")
def bids():
    df = nexmark_events("bid", W0, LAST, **SOURCE)
    df["date_time"] = df["ts_us"]
    return df


def expected_top(windows, keys: list[str], n: int, by: str, ascending: bool, rank: str):
    """Rank each (keys, window) group in pandas: ``by`` first, then the other columns ascending."""
    rest = [c for c in BID_COLUMNS if c != by]
    ordered = windows.sort_values([by, *rest], ascending=[ascending] + [True] * len(rest), kind="stable")
    ordered[rank] = ordered.groupby([*keys, "window_start"], sort=False).cumcount() + 1
    out = ordered[ordered[rank] <= n].copy()
    out["lg_window"] = emit_cycle(out["window_end"].to_numpy())
    return out[out["lg_window"] <= LAST][["window_start", "window_end", *BID_COLUMNS, rank, "lg_window"]]


def test_top_n_per_key_and_tumbling_window_matches_pandas(client, run, bids):
    assert run.state == "FINISHED"
    want = expected_top(tumbling(bids, 20 * S), ["auction"], 3, "price", False, "rank")
    got = read_sink(client, "op_top_n", "top3")
    assert_same_rows(got, want, ["auction", "window_start", "rank"], what="top 3 bids per auction")
    # the data exercises ties and groups with fewer than n records
    assert (want.groupby(["auction", "window_start"]).size() < 3).any()
    assert (want.groupby(["auction", "window_start"]).size() == 3).any()


def test_top_n_per_sliding_window_without_key_ascending(client, run, bids):
    want = expected_top(sliding(bids, 20 * S, 10 * S), [], 5, "price", True, "pos")
    got = read_sink(client, "op_top_n", "cheapest")
    assert_same_rows(got, want, ["window_start", "pos"], what="5 cheapest bids per sliding window")
    assert len(want) == 5 * want["window_start"].nunique()


def test_top_1_by_time_is_the_latest_record_per_key(client, run, bids):
    want = expected_top(tumbling(bids, 30 * S), ["bidder"], 1, "date_time", False, "rank")
    got = read_sink(client, "op_top_n", "latest")
    assert_same_rows(got, want, ["bidder", "window_start"], what="latest bid per bidder")
    last = tumbling(bids, 30 * S).groupby(["bidder", "window_start"])["ts_us"].max().reset_index()
    merged = got.merge(last, on=["bidder", "window_start"])
    assert len(merged) == len(got) and (merged["date_time"] == merged["ts_us"]).all()


def test_state_keeps_at_most_n_rows_per_key_and_window(client, run):
    state = client.read_state("op_top_n", "top3", window=W0 + 4).to_pandas()
    assert len(state) > 0  # the 20 s windows still open after cycle W0 + 4
    assert state.groupby(["auction", "window_start"]).size().max() <= 3
    assert sorted(state["rank"].unique()) == [1, 2, 3]


def test_top_n_is_refused_with_a_clear_error(spark, tmp_path):
    p = lg.Pipeline("bad_top", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    with pytest.raises(ValueError, match="n >= 1"):
        bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10))).top_n(0, by="price")
    with pytest.raises(ValueError, match="not a Session window"):
        bids.key_by("auction").window(lg.Session(timedelta(seconds=10))).top_n(3, by="price")
    (bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10))).top_n(3, by="cost", name="top")
     .sink(lg.CollectSink("x")))
    from lockgate.runtime.compiler import compile_pipeline

    with pytest.raises(CompileError, match="cost") as err:
        compile_pipeline(p, spark)
    assert "top" in str(err.value)


def test_explain_shows_the_top_n_and_its_state_layout(spark):
    from lockgate.plan import explain
    from lockgate.runtime.compiler import compile_pipeline

    text = explain(compile_pipeline(top_bids(), spark))
    assert "tumbling(0:00:20) top 3 by [price] descending per [auction] as rank" in text
    assert "__rank int" in text
