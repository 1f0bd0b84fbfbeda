"""The windowed stream-stream join, run through the embedded client and checked against a
pandas merge over the same Nexmark events.

Nexmark q8-like: persons joined to the auctions they sell (``person.id = auction.seller``)
created in the same 10 s tumbling window; and a cascade, per-auction bid counts of a
window aggregate joined to the auctions of the same window (both inputs carry their own
``window_start``/``window_end``).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    CYCLE_US,
    T0_ISO,
    W0,
    aggregate,
    assert_same_rows,
    embedded_client,
    emit_cycle,
    nexmark_events,
    read_sink,
    tumbling,
)

SOURCE = {"events_per_second": 101, "seed": 13}
LAST = W0 + 3


def join_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("op_join", cycle_window=timedelta(seconds=10), parallelism=2)
    persons = p.source(lg.NexmarkSource("person", start=T0_ISO, **SOURCE), name="persons")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    window = lg.Tumbling(timedelta(seconds=10))
    (
        persons.join(auctions, left_on=["id"], right_on=["seller"], window=window, name="q8").sink(
            lg.CollectSink("q8"), name="q8_out"
        )
    )
    (
        persons.join(auctions, left_on=["id"], right_on=["seller"], window=window, how="full", name="q8_full")
        .sink(lg.CollectSink("q8_full"), name="q8_full_out")
    )
    counts = bids.key_by("auction").window(window).aggregate(name="bid_counts", bids=lg.count())
    (
        counts.join(auctions, left_on=["auction"], right_on=["id"], window=window, name="counted").sink(
            lg.CollectSink("counted"), name="counted_out"
        )
    )
    # a cascade on the upstream's exclusive window end, named explicitly with on=
    (
        counts.key_by("auction")
        .window(lg.Tumbling(timedelta(seconds=20), on="window_end"))
        .aggregate(name="bid_counts_20s", bids=lg.sum("bids"), windows=lg.count())
        .sink(lg.CollectSink("counts_20s"), name="counts_20s_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_join"))


@pytest.fixture(scope="module")
def run(client):
    return client.run(f"{__file__}:join_pipeline", first=W0, last=LAST)


@pytest.fixture(scope="module")
def events():
    return {
        s: tumbling(nexmark_events(s, W0, LAST, **SOURCE), 10 * 1_000_000)
        for s in ("person", "auction", "bid")
    }


def test_q8_persons_join_their_auctions_in_the_same_window(client, run, events):
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
    persons, auctions = events["person"], events["auction"]
    expected = persons.merge(
        auctions, left_on=["window_start", "id"], right_on=["window_start", "seller"], suffixes=("", "_right")
    )
    expected["date_time"], expected["date_time_right"] = expected["ts_us"], expected["ts_us_right"]
    expected["lg_window"] = expected["window_start"] // CYCLE_US  # the cycle the window ends with
    assert len(expected) >= 10 and expected["lg_window"].nunique() >= 2
    cols = [
        "window_start", "window_end", "id", "name", "city", "date_time", "extra",
        "id_right", "seller", "reserve", "category", "date_time_right", "extra_right", "lg_window",
    ]  # fmt: skip
    result = read_sink(client, "op_join", "q8")
    assert_same_rows(result, expected[cols], ["id", "id_right"], what="q8 join")
    # persons and auctions that match but in different windows are not joined
    across = persons.merge(auctions, left_on="id", right_on="seller")
    assert (across["window_start_x"] != across["window_start_y"]).any()


def test_a_full_outer_windowed_join_emits_the_unmatched_of_each_side_when_the_window_closes(client, run, events):
    persons, auctions = events["person"], events["auction"]
    expected = persons.merge(
        auctions, left_on=["window_start", "id"], right_on=["window_start", "seller"], suffixes=("", "_right"),
        how="outer", indicator=True,
    )
    assert {"left_only", "right_only", "both"} <= set(expected["_merge"])  # every kind of row occurs
    expected["window_end"] = expected["window_end"].fillna(expected["window_end_right"])
    expected["date_time"], expected["date_time_right"] = expected["ts_us"], expected["ts_us_right"]
    expected["lg_window"] = expected["window_start"] // CYCLE_US  # emitted when its window closes
    cols = [
        "window_start", "window_end", "id", "name", "city", "date_time", "extra",
        "id_right", "seller", "reserve", "category", "date_time_right", "extra_right", "lg_window",
    ]  # fmt: skip
    result = read_sink(client, "op_join", "q8_full")
    assert_same_rows(result, expected[cols], ["id", "id_right"], what="q8 full outer join")
    inner = read_sink(client, "op_join", "q8")
    assert len(result) == len(inner) + (expected["_merge"] != "both").sum()


def test_join_of_a_window_aggregate_keeps_both_window_columns(client, run, events):
    bids, auctions = events["bid"], events["auction"]
    counts = aggregate(bids, ["window_start", "window_end", "auction"], {"bids": ("count", None)})
    expected = counts.merge(
        auctions, left_on=["window_start", "auction"], right_on=["window_start", "id"], suffixes=("_left", "")
    )
    expected["window_start_left"] = expected["window_start"]
    expected["window_end"] = expected["window_end_left"]
    expected["date_time"] = expected["ts_us"]
    expected["lg_window"] = expected["window_start"] // CYCLE_US
    assert len(expected) >= 10
    cols = [
        "window_start", "window_end", "window_start_left", "window_end_left", "auction", "bids",
        "id", "seller", "date_time", "lg_window",
    ]  # fmt: skip
    result = read_sink(client, "op_join", "counted")
    assert len(result.columns) == len(set(result.columns)), f"duplicate columns: {list(result.columns)}"
    assert_same_rows(result, pd.DataFrame(expected[cols]), ["auction", "window_start"], what="cascaded join")


def test_cascaded_window_on_the_upstream_window_end(client, run, events):
    bids = events["bid"]
    counts = aggregate(bids, ["window_start", "auction"], {"bids": ("count", None)})
    counts["ts_us"] = counts["window_start"]  # any instant inside the 10 s window
    expected = aggregate(
        tumbling(counts, 20 * 1_000_000),
        ["window_start", "window_end", "auction"],
        {"bids": ("sum", "bids"), "windows": ("count", None)},
    )
    expected["lg_window"] = emit_cycle(expected["window_end"].to_numpy())
    expected = expected[expected["lg_window"] <= LAST]
    assert set(expected["lg_window"]) == {W0 + 1, W0 + 3} and expected["windows"].max() == 2
    result = read_sink(client, "op_join", "counts_20s")
    assert_same_rows(result, expected, ["window_start", "auction"], what="cascade on window_end")
