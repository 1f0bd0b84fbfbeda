"""OVER aggregations per key (ROWS and RANGE frames in event time), run through the embedded
client over out-of-order Nexmark bids and checked against pandas: each on-time record once,
with aggregates over its key's on-time records up to it in (event time, other columns) order,
emitted once the watermark passes it."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import CYCLE_US, T0_ISO, W0, S, assert_same_rows, embedded_client, nexmark_events, read_sink

SOURCE = {"events_per_second": 60, "seed": 41, "out_of_order": 4.0}
LATENESS_US = 2 * S
LAST = W0 + 4
COLUMNS = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]


def over_bids() -> lg.Pipeline:
    p = lg.Pipeline("op_over", cycle_window=timedelta(seconds=10), parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(microseconds=LATENESS_US), late="drop"))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    (
        bids.key_by("bidder").over(preceding=3, n=lg.count(), avg_price=lg.avg("price"), top=lg.max("price"),
                                   name="last_four")
        .sink(lg.CollectSink("rows"), name="rows_out")
    )
    (
        bids.key_by("auction").over(preceding=timedelta(seconds=5), n=lg.count(), total=lg.sum("price"),
                                    name="last_5s")
        .sink(lg.CollectSink("range"), name="range_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_over"))


@pytest.fixture(scope="module")
def run(client):
    first = client.run(f"{__file__}:over_bids", first=W0, last=W0 + 1)
    second = client.run(f"{__file__}:over_bids", first=W0 + 2, last=LAST)  # state across a restart
    assert first.state == second.state == "FINISHED"
    return second


@pytest.fixture(scope="module")
def on_time():
    df = nexmark_events("bid", W0, LAST, **SOURCE)
    df["date_time"] = df["ts_us"]
    late = df["ts_us"] < df["cycle"] * CYCLE_US - LATENESS_US
    assert late.sum() > 5 and (df["ts_us"] < df["cycle"] * CYCLE_US).sum() > late.sum()
    return df[~late].sort_values(["ts_us", *COLUMNS], kind="stable").reset_index(drop=True)


def emitted(df: pd.DataFrame) -> pd.DataFrame:
    """Records the watermark after the last cycle has passed."""
    return df[df["ts_us"] < (LAST + 1) * CYCLE_US - LATENESS_US]


def test_rows_frame_matches_pandas_rolling(client, run, on_time):
    g = on_time.groupby("bidder", sort=False)["price"]
    want = on_time.assign(
        n=g.transform(lambda s: s.rolling(4, min_periods=1).count().astype("int64")),
        avg_price=g.transform(lambda s: s.rolling(4, min_periods=1).mean()),
        top=g.transform(lambda s: s.rolling(4, min_periods=1).max().astype("int64")),
    )
    want = emitted(want)[[*COLUMNS, "n", "avg_price", "top"]]
    got = read_sink(client, "op_over", "rows")
    assert_same_rows(got, want, ["bidder", "date_time", "auction", "price"], approx=["avg_price"], what="ROWS frame")
    assert (want["n"] == 4).sum() > 20  # frames that reach back over earlier cycles


def test_range_frame_matches_pandas(client, run, on_time):
    parts = []
    for _, grp in on_time.groupby("auction"):
        ts, price = grp["ts_us"].to_numpy(), grp["price"].to_numpy()
        inside = (ts[None, :] >= ts[:, None] - 5 * S) & (ts[None, :] <= ts[:, None])  # peers included
        parts.append(grp.assign(n=inside.sum(axis=1).astype("int64"), total=(inside * price[None, :]).sum(axis=1)))
    want = emitted(pd.concat(parts))[[*COLUMNS, "n", "total"]]
    got = read_sink(client, "op_over", "range")
    assert_same_rows(got, want, ["auction", "date_time", "bidder", "price"], what="RANGE frame")
    assert (want["n"] > 1).sum() > 20


def test_state_holds_waiting_records_and_bounded_history(client, run):
    pending = client.read_state("op_over", "last_four", window=LAST, table="pending").to_pandas()
    history = client.read_state("op_over", "last_four", window=LAST, table="history").to_pandas()
    wm = (LAST + 1) * CYCLE_US - LATENESS_US
    assert len(pending) > 0 and (pending["lg_t"] >= wm).all()  # not yet passed by the watermark
    assert history.groupby("bidder").size().max() <= 3
    assert np.array_equal(np.sort(history["lg_pos"].unique()), [1, 2, 3])


def test_over_is_refused_with_a_clear_error():
    p = lg.Pipeline("bad_over", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    with pytest.raises(ValueError, match="key_by"):
        bids.over(preceding=3, n=lg.count())
    with pytest.raises(ValueError, match="not n=approx_distinct"):
        bids.key_by("bidder").over(preceding=3, n=lg.approx_distinct("auction"))
    with pytest.raises(ValueError, match="preceding"):
        bids.key_by("bidder").over(preceding=-1, n=lg.count())


def test_explain_shows_the_frames_and_the_state_layout(spark):
    from lockgate.plan import explain
    from lockgate.runtime.compiler import compile_pipeline

    text = explain(compile_pipeline(over_bids(), spark))
    assert "over [bidder] order by event time rows between 3 preceding and current row" in text
    assert "over [auction] order by event time range between 0:00:05 preceding and current row" in text
    assert "last_four.history:" in text and "__lg_pos int" in text and "last_four.pending:" in text
