"""Late records, run through the embedded client and checked against a reference that
classifies lateness by the watermark contract.

The Nexmark source with ``out_of_order > 0`` is sliced by *nominal* (arrival) time:
event ``n`` is read in the cycle holding ``start + n * 1e6 // events_per_second`` µs,
and its event time lags behind by up to ``out_of_order`` seconds. A record read in cycle
``W`` is late when its event time is below ``start(W) - lateness`` (the watermark at the
start of ``W``): it is counted in ``RunResult.late_rows``, written to the ``late`` side
sink (or dropped), and never aggregated.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    CYCLE_US,
    T0_ISO,
    W0,
    S,
    aggregate,
    assert_same_rows,
    embedded_client,
    emit_cycle,
    nexmark_events,
    read_sink,
    sliding,
    tumbling,
)

SOURCE = {"events_per_second": 101, "seed": 17, "out_of_order": 4.0}
LATENESS_US = 1 * S
LAST = W0 + 3
AGGS = {"n": lg.count(), "total": lg.sum("price"), "hi": lg.max("price")}


def _pipeline(name: str, late: object) -> lg.Pipeline:
    p = lg.Pipeline(
        name,
        cycle_window=timedelta(seconds=10),
        watermark=lg.Watermark(lateness=timedelta(microseconds=LATENESS_US), late=late),
        parallelism=2,
    )
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    (
        bids.key_by("auction")
        .window(lg.Tumbling(timedelta(seconds=5)))
        .aggregate(name="per_auction", **AGGS)
        .sink(lg.CollectSink("per_auction"), name="per_auction_out")
    )
    # a sliding window (kept by pane): a record late for its round must not reach any of its windows
    (
        bids.key_by("auction")
        .window(lg.Sliding(timedelta(seconds=10), timedelta(seconds=4)))
        .aggregate(name="sliding", **AGGS)
        .sink(lg.CollectSink("sliding"), name="sliding_out")
    )
    return p


def late_to_sink() -> lg.Pipeline:
    return _pipeline("op_late_sink", lg.CollectSink("late"))


def late_dropped() -> lg.Pipeline:
    return _pipeline("op_late_drop", "drop")


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_late"))


@pytest.fixture(scope="module")
def bids():
    df = nexmark_events("bid", W0, LAST, **SOURCE)
    df["late"] = df["ts_us"] < df["cycle"] * CYCLE_US - LATENESS_US
    return df


def expected_windows(bids, sliding_s: tuple[int, int] | None = None):
    on_time = tumbling(bids[~bids["late"]], 5 * S) if sliding_s is None else sliding(
        bids[~bids["late"]], sliding_s[0] * S, sliding_s[1] * S)
    out = aggregate(
        on_time, ["window_start", "window_end", "auction"], {n: (a.kind, a.column) for n, a in AGGS.items()}
    )
    out["lg_window"] = emit_cycle(out["window_end"].to_numpy(), LATENESS_US)
    return out[out["lg_window"] <= LAST]


def check_windows(client, job, bids):
    result = read_sink(client, job, "per_auction")
    assert_same_rows(result, expected_windows(bids), ["window_start", "auction"], what=f"{job} windows")
    # nothing emitted before the watermark (cycle end - lateness) passed the window end
    assert (result["window_end"] <= (result["lg_window"] + 1) * CYCLE_US - LATENESS_US).all()
    result = read_sink(client, job, "sliding")
    assert_same_rows(result, expected_windows(bids, (10, 4)), ["window_start", "auction"], what=f"{job} sliding")
    assert (result["window_end"] <= (result["lg_window"] + 1) * CYCLE_US - LATENESS_US).all()


def test_late_records_counted_and_written_to_the_side_sink(client, bids):
    n_late = int(bids["late"].sum())
    assert 20 <= n_late < len(bids) // 4, "the data must have some late records, not mostly late ones"
    assert (bids["ts_us"] < bids["cycle"] * CYCLE_US).sum() > n_late, "some records lag but are not late"

    run = client.run(f"{__file__}:late_to_sink", first=W0, last=LAST)
    assert run.state == "FINISHED"
    assert run.late_rows == n_late
    assert run.rows_in == len(bids)

    late = read_sink(client, "op_late_sink", "late.bids")
    expected = bids[bids["late"]].assign(date_time=lambda f: f["ts_us"], lg_window=lambda f: f["cycle"])
    cols = ["auction", "bidder", "price", "date_time", "extra", "lg_window"]
    assert_same_rows(late, expected[cols], ["date_time", "auction", "bidder", "price", "extra"], what="late")
    check_windows(client, "op_late_sink", bids)


def test_late_records_dropped(client, bids):
    run = client.run(f"{__file__}:late_dropped", first=W0, last=LAST)
    assert run.state == "FINISHED"
    assert run.late_rows == int(bids["late"].sum())
    check_windows(client, "op_late_drop", bids)
    with pytest.raises(lg.LockgateError):
        client.read_sink("op_late_drop", "late.bids")


@pytest.mark.parametrize("job", ["late_to_sink", "late_dropped"])
def test_late_records_in_catch_up_groups(tmp_path, spark, bids, monkeypatch, job):
    """Groups of windows count, divert and drop the same late records as single rounds."""
    monkeypatch.setenv("LOCKGATE_CATCHUP", "2")
    for client in embedded_client(tmp_path / "home"):
        run = client.run(f"{__file__}:{job}", first=W0, last=LAST)
        assert run.state == "FINISHED" and run.rows_in == len(bids)
        assert run.late_rows == int(bids["late"].sum())
        groups = [c.timings.get("group") for c in client.list_cycles(run.job, limit=10).cycles]
        assert groups == [2, 2, 2, 2]  # two groups of two
        # a Nexmark source with out-of-order events makes the plan not window-exact: each window of
        # a group is a round of its own, with its own snapshot
        assert all(cp.snapshot_uri for cp in client.list_checkpoints(run.job))
        check_windows(client, run.job, bids)
        if job == "late_to_sink":
            assert len(read_sink(client, run.job, "late.bids")) == int(bids["late"].sum())
