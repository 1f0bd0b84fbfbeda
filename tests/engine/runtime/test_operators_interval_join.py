"""Interval joins and joins with a time-to-live, run through the embedded client and checked
against pandas (a merge on the keys, then the bounds) over the same Nexmark events.

Nexmark q9's join is written as an interval join (bids from an auction's start on) and a
filter up to the auction's expiry; q3's person-auction join as a join with a TTL."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

import lockgate as lg
from lockgate.errors import CompileError

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import T0_ISO, W0, S, assert_same_rows, embedded_client, nexmark_events, read_sink

SOURCE = {"events_per_second": 200, "seed": 31}
LAST = W0 + 5
MAX_AUCTION = timedelta(seconds=60)  # auctions at 200 events/s last under 50 s
TTL = timedelta(seconds=15)


def joins() -> lg.Pipeline:
    p = lg.Pipeline("op_interval_join", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    persons = p.source(lg.NexmarkSource("person", start=T0_ISO, **SOURCE), name="persons")
    in_time = bids.join(auctions, left_on=["auction"], right_on=["id"], between=(timedelta(0), MAX_AUCTION),
                        name="bid_in_auction").filter("date_time <= expires", name="before_expiry")
    in_time.select("auction", "bidder", "price", "date_time", "seller", "category", name="q9_pairs") \
        .sink(lg.CollectSink("bids_in_auctions"), name="pairs_out")
    # q9's shape: running aggregates over the join, keyed by its right key (and a right-side
    # column), by its left key, and by a column that is no join key
    cents = in_time.with_column("cents", "price * 100", name="cents")
    cents.key_by("id", "seller").aggregate(n=lg.count(), top=lg.max("cents"), name="per_auction") \
        .sink(lg.CollectSink("per_auction"), name="per_auction_out")
    in_time.key_by("auction").aggregate(n=lg.count(), name="per_bid_auction") \
        .sink(lg.CollectSink("per_bid_auction"), name="per_bid_auction_out")
    in_time.key_by("bidder").aggregate(n=lg.count(), name="per_bidder") \
        .sink(lg.CollectSink("per_bidder"), name="per_bidder_out")
    # a join on two columns named in another order on each side, one of them renamed on the right
    # ("lane" is on both sides: the right one is "lane_right"), and an aggregate keyed by the
    # right side's names, over a filter that drops pairs (so the bound holds keys no pair carries)
    lanes_l = bids.with_column("lane", "auction % 3", name="bid_lane")
    lanes_r = auctions.with_column("lane", "id % 3", name="auction_lane")
    lanes_l.join(lanes_r, left_on=["lane", "auction"], right_on=["lane", "id"], between=(timedelta(0), MAX_AUCTION),
                 name="lane_join") \
        .filter("price % 2 = 0", name="even_prices") \
        .key_by("id", "lane_right", "seller").aggregate(n=lg.count(), name="per_lane") \
        .sink(lg.CollectSink("per_lane"), name="per_lane_out")
    (
        auctions.join(persons, left_on=["seller"], right_on=["id"], ttl=TTL, name="seller_join")
        .select("id AS auction", "seller", "name", "city", "date_time", "date_time_right AS joined",
                name="q3_pairs")
        .sink(lg.CollectSink("sellers"), name="sellers_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_interval_join"))


@pytest.fixture(scope="module")
def run(client):
    # two runs: the join state crosses a restart from the checkpoint
    first = client.run(f"{__file__}:joins", first=W0, last=W0 + 2)
    second = client.run(f"{__file__}:joins", first=W0 + 3, last=LAST)
    assert first.state == second.state == "FINISHED"
    return second


def _events(stream: str):
    df = nexmark_events(stream, W0, LAST, **SOURCE)
    df["date_time"] = df["ts_us"]
    return df


def test_interval_join_then_expiry_filter_matches_pandas(client, run):
    want = _pairs_in_time()[["auction", "bidder", "price", "date_time", "seller", "category"]]
    got = read_sink(client, "op_interval_join", "bids_in_auctions")
    assert len(want) > 100
    assert_same_rows(got, want, ["auction", "bidder", "date_time", "price"], what="bids within their auction")


def _pairs_in_time(expiry: bool = True) -> pd.DataFrame:
    """q9's pairs (``expiry``: filtered to the auction's expiry) with the round each is emitted in
    (the later of its two records' cycles)."""
    bids, auctions = _events("bid"), _events("auction")
    auctions["expires"] = (auctions["expires"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1)
    m = bids.merge(auctions, left_on="auction", right_on="id", suffixes=("", "_a"))
    lo, hi = m["date_time_a"], m["date_time_a"] + int(MAX_AUCTION.total_seconds() * S)
    m = m[(m["date_time"] >= lo) & (m["date_time"] <= hi) & ((m["date_time"] <= m["expires"]) | (not expiry))].copy()
    m["round"] = m[["cycle", "cycle_a"]].max(axis=1)
    return m


@pytest.mark.parametrize(("sink", "keys", "aggs"), [
    ("per_auction", ["id", "seller"], {"n": ("price", "size"), "top": ("price", "max")}),
    ("per_bid_auction", ["auction"], {"n": ("price", "size")}),
    ("per_bidder", ["bidder"], {"n": ("price", "size")}),
    ("per_lane", ["id", "lane_right", "seller"], {"n": ("price", "size")}),
])
def test_running_aggregates_over_the_join_emit_each_rounds_touched_keys(client, run, sink, keys, aggs):
    """Each round emits exactly the keys its pairs touched, with their totals so far (the state of
    a key the round's records carried but no pair touched is read, never emitted)."""
    pairs = _pairs_in_time(expiry=sink != "per_lane")
    if sink == "per_lane":
        pairs = pairs[pairs["price"] % 2 == 0].copy()
        pairs["lane_right"] = pairs["id"] % 3
    got = read_sink(client, "op_interval_join", sink)
    rounds = sorted(pairs["round"].unique())
    assert len(rounds) >= 4 and set(got["lg_window"]) == set(rounds)
    for w in rounds:
        upto = pairs[pairs["round"] <= w]
        want = upto.groupby(keys, as_index=False).agg(**aggs)
        if "top" in want:
            want["top"] = want["top"] * 100
        touched = pairs.loc[pairs["round"] == w, keys].drop_duplicates()
        want = want.merge(touched, on=keys)
        assert_same_rows(got[got["lg_window"] == w], want, keys, what=f"{sink} in round {w}")


def test_join_with_ttl_pairs_records_at_most_ttl_apart(client, run):
    auctions, persons = _events("auction"), _events("person")
    m = auctions.merge(persons, left_on="seller", right_on="id", suffixes=("", "_p"))
    ttl = int(TTL.total_seconds() * S)
    want = m[(m["date_time"] - m["date_time_p"]).abs() <= ttl]
    want = want.rename(columns={"id": "auction", "date_time_p": "joined"})
    want = want[["auction", "seller", "name", "city", "date_time", "joined"]]
    got = read_sink(client, "op_interval_join", "sellers")
    assert len(want) > 20 and len(m) > len(want)  # the ttl cuts some pairs
    assert_same_rows(got, want, ["auction", "joined"], what="sellers of auctions")


def test_join_state_is_bounded_by_the_watermark(client, run):
    state = client.read_state("op_interval_join", "seller_join", window=LAST, table="left").to_pandas()
    end_us = (LAST + 1) * 10 * S
    # a kept auction can still meet a person arriving later: its time is within ttl of the watermark
    assert len(state) > 0 and (state["lg_t"] >= end_us - int(TTL.total_seconds() * S)).all()


def test_join_forms_are_refused_with_a_clear_error():
    p = lg.Pipeline("bad_join", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    with pytest.raises(CompileError, match="exactly one of window=, between= or ttl=, got none"):
        bids.join(auctions, left_on=["auction"], right_on=["id"])
    with pytest.raises(CompileError, match="lower <= upper"):
        bids.join(auctions, left_on=["auction"], right_on=["id"], between=(timedelta(5), timedelta(1)))
    with pytest.raises(CompileError, match="window and ttl|got window and ttl"):
        bids.join(auctions, left_on=["auction"], right_on=["id"], ttl=TTL,
                  window=lg.Tumbling(timedelta(seconds=10)))


def test_explain_shows_the_interval_and_the_state_layout(spark):
    from lockgate.plan import explain
    from lockgate.runtime.compiler import compile_pipeline

    text = explain(compile_pipeline(joins(), spark))
    assert "interval join on ['auction'] = ['id']: right.ts + 0:00:00 <= left.ts <= right.ts + 0:01:00" in text
    assert "join on ['seller'] = ['id'] with ttl 0:00:15" in text
    assert "__lg_t bigint" in text


OUTER = (timedelta(seconds=-2), timedelta(seconds=5))
OUTER_COLS = ["auction", "bidder", "price", "date_time", "id", "seller", "auction_time"]


def outer_joins() -> lg.Pipeline:
    p = lg.Pipeline("op_outer_join", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    for how in ("left", "right", "full"):
        (bids.join(auctions, left_on=["auction"], right_on=["id"], between=OUTER, how=how, name=f"{how}_join")
         .select(*OUTER_COLS[:-1], "date_time_right AS auction_time", name=f"{how}_cols")
         .sink(lg.CollectSink(how), name=f"{how}_out"))
    return p


def _outer_reference(how: str) -> pd.DataFrame:
    bids, auctions = _events("bid"), _events("auction")
    bids["lid"], auctions["rid"] = range(len(bids)), range(len(auctions))
    lo, hi = (int(d.total_seconds() * S) for d in OUTER)
    m = bids.merge(auctions, left_on="auction", right_on="id", suffixes=("", "_right"))
    pairs = m[(m["date_time"] >= m["date_time_right"] + lo) & (m["date_time"] <= m["date_time_right"] + hi)]
    pairs = pairs.rename(columns={"date_time_right": "auction_time"})
    parts = [pairs[OUTER_COLS]]
    end = (LAST + 1) * 10 * S  # the watermark after the last cycle: records it made final
    if how in ("left", "full"):
        lone = bids[~bids["lid"].isin(pairs["lid"]) & (bids["date_time"] < end + lo)]
        parts.append(lone[["auction", "bidder", "price", "date_time"]])
    if how in ("right", "full"):
        lone = auctions[~auctions["rid"].isin(pairs["rid"]) & (auctions["date_time"] + hi < end)]
        parts.append(lone.rename(columns={"date_time": "auction_time"})[["id", "seller", "auction_time"]])
    return pd.concat(parts)[OUTER_COLS]


def _multiset(df: pd.DataFrame) -> list[tuple]:
    def norm(v):
        return None if v is None or (isinstance(v, float) and v != v) or v is pd.NA else int(v)
    return sorted((tuple(norm(v) for v in r) for r in df[OUTER_COLS].itertuples(index=False)),
                  key=lambda r: tuple((x is None, x or 0) for x in r))


@pytest.mark.parametrize("how", ["left", "right", "full"])
def test_outer_interval_joins_emit_the_unmatched_once_final(outer, how):
    want = _outer_reference(how)
    got = read_sink(outer, "op_outer_join", how)
    assert (want["id"].isna().sum() > 10) == (how in ("left", "full"))
    assert (want["bidder"].isna().sum() > 3) == (how in ("right", "full"))
    assert _multiset(got) == _multiset(want)


@pytest.fixture(scope="module")
def outer(spark, tmp_path_factory):
    for client in embedded_client(tmp_path_factory.mktemp("op_outer_join")):
        first = client.run(f"{__file__}:outer_joins", first=W0, last=W0 + 2)
        second = client.run(f"{__file__}:outer_joins", first=W0 + 3, last=LAST)
        assert first.state == second.state == "FINISHED"
        yield client
