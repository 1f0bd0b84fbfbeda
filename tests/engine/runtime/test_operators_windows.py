"""Tumbling and sliding window aggregates, run through the embedded client, checked row
for row against pandas over the same Nexmark bids.

Cycle windows are 10 s; the tumbling windows are 5 s (two per cycle), 10 s (one per
cycle) and 30 s (spanning three cycles, their partials carried in the snapshots); the
sliding windows are 10 s every 2 s and 30 s every 5 s. Every aggregate kind is checked,
each window must be emitted exactly once, in the cycle whose watermark passes its end.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
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

# 101 events/s: event n is due at n * 1e6 // 101 µs, so bids n = 505, 1010, ... land exactly
# on 5 s window boundaries (and n = 1010 on a cycle boundary)
SOURCE = {"events_per_second": 101, "seed": 3}
LAST = W0 + 3  # four cycles, 40 s of bids
TUMBLING_S = (5, 10, 30)
SLIDING_S = ((10, 2), (30, 5), (7, 3))  # the last: size not a multiple of slide


def aggs(col: str = "bidder", value: str = "price") -> dict[str, lg.Aggregate]:
    return {
        "n": lg.count(),
        "total": lg.sum(value),
        "lo": lg.min(value),
        "hi": lg.max(value),
        "mean": lg.avg(value),
        "values": lg.collect(col),
        "distinct": lg.approx_distinct(col),
    }


def ref_aggs(col: str = "bidder", value: str = "price") -> dict[str, tuple[str, str | None]]:
    return {name: (a.kind, a.column) for name, a in aggs(col, value).items()}


RESULT_KEY = ["window_start", "auction"]


def tumbling_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("op_tumbling", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    for secs in TUMBLING_S:
        (
            bids.key_by("auction")
            .window(lg.Tumbling(timedelta(seconds=secs)))
            .aggregate(name=f"tumbling_{secs}", **aggs())
            .sink(lg.CollectSink(f"tumbling_{secs}"), name=f"tumbling_{secs}_out")
        )
    # null keys and null values, a DECIMAL column (its sum widens), a window spanning cycles
    (
        bids.with_column("k", "CASE WHEN bidder % 3 = 0 THEN NULL ELSE bidder % 4 END")
        .with_column("v", "CASE WHEN price % 5 = 0 THEN NULL ELSE CAST(price AS DECIMAL(12, 2)) END")
        .key_by("k")
        .window(lg.Tumbling(timedelta(seconds=30)))
        .aggregate(name="nullable", **aggs(col="v", value="v"))
        .sink(lg.CollectSink("nullable"), name="nullable_out")
    )
    return p


def sliding_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("op_sliding", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    for size, slide in SLIDING_S:
        (
            bids.key_by("auction")
            .window(lg.Sliding(timedelta(seconds=size), timedelta(seconds=slide)))
            .aggregate(name=f"sliding_{size}_{slide}", **aggs())
            .sink(lg.CollectSink(f"sliding_{size}_{slide}"), name=f"sliding_{size}_{slide}_out")
        )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_windows"))


@pytest.fixture(scope="module")
def bids():
    return nexmark_events("bid", W0, LAST, **SOURCE)


def expected_windows(assigned, by, agg_spec):
    """Aggregates per window and key, with the cycle each window must be emitted in;
    windows the watermark has not passed by the last cycle are not expected."""
    out = aggregate(assigned, ["window_start", "window_end", *by], agg_spec)
    out["lg_window"] = emit_cycle(out["window_end"].to_numpy())
    return out[out["lg_window"] <= LAST]


def check_emission(result, what):
    """Emitted exactly when the watermark (the cycle's end) passed the window end."""
    assert (result["window_end"] <= (result["lg_window"] + 1) * CYCLE_US).all(), f"{what}: emitted early"
    assert (result["window_end"] > result["lg_window"] * CYCLE_US).all(), f"{what}: emitted late"


def test_tumbling_windows_smaller_equal_and_spanning_cycles(client, bids):
    run = client.run(f"{__file__}:tumbling_pipeline", first=W0, last=LAST)
    assert run.state == "FINISHED" and run.windows_run == 4
    assert run.rows_in == len(bids) and run.late_rows == 0
    on_boundary = bids[bids["ts_us"] % (5 * S) == 0]
    assert len(on_boundary) >= 5, "the data must hold records exactly on window boundaries"

    for secs in TUMBLING_S:
        result = read_sink(client, "op_tumbling", f"tumbling_{secs}")
        expected = expected_windows(tumbling(bids, secs * S), ["auction"], ref_aggs())
        # the second 30 s window, [30 s, 60 s), is still open: its partials stay in the state
        emitting = {W0 + 2} if secs == 30 else set(range(W0, LAST + 1))
        assert set(expected["lg_window"]) == emitting
        assert_same_rows(
            result, expected, RESULT_KEY, approx=["mean"], hll=["distinct"], what=f"tumbling {secs}s"
        )
        check_emission(result, f"tumbling {secs}s")
        # a record on a boundary opens the window that starts there
        for ts, auction in on_boundary[["ts_us", "auction"]].itertuples(index=False):
            hit = result[(result["window_start"] == ts - ts % (secs * S)) & (result["auction"] == auction)]
            assert len(hit) == 1 or ts - ts % (secs * S) + secs * S > (LAST + 1) * CYCLE_US

    nullable = bids.assign(
        k=pd.Series([None if b % 3 == 0 else b % 4 for b in bids["bidder"]], index=bids.index, dtype=object),
        v=pd.Series([None if p % 5 == 0 else p for p in bids["price"]], index=bids.index, dtype=object),
    )
    expected = expected_windows(tumbling(nullable, 30 * S), ["k"], ref_aggs(col="v", value="v"))
    assert expected["k"].isna().any() and len(expected) == 5
    result = read_sink(client, "op_tumbling", "nullable")
    assert_same_rows(
        result,
        expected,
        ["window_start", "k"],
        approx=["mean"],
        hll=["distinct"],
        what="nullable keys/values",
    )


def test_sliding_windows(client, bids):
    run = client.run(f"{__file__}:sliding_pipeline", first=W0, last=LAST)
    assert run.state == "FINISHED" and run.windows_run == 4
    for size, slide in SLIDING_S:
        result = read_sink(client, "op_sliding", f"sliding_{size}_{slide}")
        expected = expected_windows(sliding(bids, size * S, slide * S), ["auction"], ref_aggs())
        # windows that began before the first record are emitted too (partly empty)
        assert expected["window_start"].min() < W0 * CYCLE_US
        assert_same_rows(
            result, expected, RESULT_KEY, approx=["mean"], hll=["distinct"], what=f"sliding {size}s/{slide}s"
        )
        check_emission(result, f"sliding {size}s/{slide}s")


def test_sliding_windows_one_window_per_round_across_a_restore(client, bids):
    """The same windows one cycle per round, in two runs (the second restores the panes the
    first left in its state); the state holds one row per key and pane, not per window."""
    job = "op_sliding_rounds"
    first = client.run(f"{__file__}:sliding_pipeline", job=job, first=W0, last=W0 + 1, catchup="off")
    second = client.run(f"{__file__}:sliding_pipeline", job=job, first=W0 + 2, last=LAST, catchup="off")
    assert first.windows_run == 2 and second.windows_run == 2
    for size, slide in SLIDING_S:
        result = read_sink(client, job, f"sliding_{size}_{slide}")
        expected = expected_windows(sliding(bids, size * S, slide * S), ["auction"], ref_aggs())
        assert_same_rows(
            result, expected, RESULT_KEY, approx=["mean"], hll=["distinct"], what=f"sliding {size}s/{slide}s by round"
        )
        check_emission(result, f"sliding {size}s/{slide}s by round")

    # after the last round (watermark at its end), the 10 s / 2 s state is the bids' counts per
    # auction and 2 s pane, for the panes of the windows still open: starts after watermark - 10 s
    state = client.read_state(job, "sliding_10_2")
    assert "pane_start" in state.column_names and "window_start" not in state.column_names
    pane = pc.cast(pc.cast(state["pane_start"], pa.timestamp("us", tz="UTC")), pa.int64())
    got = pd.DataFrame({"auction": state["auction"].to_pandas(), "pane": pane.to_pandas(), "n": state["n"].to_pandas()})
    watermark = (LAST + 1) * CYCLE_US
    kept = bids[bids["ts_us"] - bids["ts_us"] % (2 * S) > watermark - 10 * S]
    want = kept.assign(pane=kept["ts_us"] - kept["ts_us"] % (2 * S)).groupby(["auction", "pane"]).size()
    assert len(want) > 0
    assert got.set_index(["auction", "pane"])["n"].sort_index().to_dict() == want.sort_index().to_dict()
