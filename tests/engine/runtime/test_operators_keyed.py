"""Running aggregates and deduplication across cycles, run through the embedded client and
checked against references computed with pandas over the same Nexmark bids.

Running aggregate: each cycle emits the keys it touched, with totals over every record
up to the end of that cycle (``as_of``); the last totals of every key are a plain
group-by over everything. Deduplicate: the first record of a key (earliest event time
within a cycle) is kept and later ones dropped in every later cycle; with ``within=``, a
key is forgotten once the watermark is that far past the record that was kept.
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
    S,
    aggregate,
    assert_same_rows,
    embedded_client,
    nexmark_events,
    read_sink,
)

SOURCE = {"events_per_second": 101, "seed": 11}
LAST = W0 + 3
FEW = {"events_per_second": 5, "seed": 11, "max_events": 60}  # 46 bids in cycle 0, 6 in cycle 1
WITHIN_S = 15
NULL_KEY = "CASE WHEN bidder % 5 = 0 THEN NULL ELSE bidder END"
TOTALS = {
    "n": lg.count(),
    "total": lg.sum("price"),
    "lo": lg.min("price"),
    "hi": lg.max("price"),
    "mean": lg.avg("price"),
    "auctions": lg.approx_distinct("auction"),
}


def keyed_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("op_keyed", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    keyed = bids.with_column("k", NULL_KEY, name="with_k")
    keyed.key_by("k").aggregate(name="totals", **TOTALS).sink(lg.CollectSink("totals"), name="totals_out")
    keyed.deduplicate("k", name="first_seen").sink(lg.CollectSink("first_seen"), name="first_seen_out")
    (
        bids.key_by("bidder")
        .deduplicate(within=timedelta(seconds=WITHIN_S), name="recent")
        .sink(lg.CollectSink("recent"), name="recent_out")
    )
    # a global (unkeyed) running aggregate over a source that runs dry after cycle 1
    few = p.source(lg.NexmarkSource("bid", start=T0_ISO, **FEW), name="few_bids")
    few.aggregate(name="global_totals", n=lg.count(), total=lg.sum("price")).sink(
        lg.CollectSink("global_totals"), name="global_totals_out"
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_keyed"))


@pytest.fixture(scope="module")
def run(client):
    return client.run(f"{__file__}:keyed_pipeline", first=W0, last=LAST)


@pytest.fixture(scope="module")
def bids():
    df = nexmark_events("bid", W0, LAST, **SOURCE)
    df["k"] = pd.Series([None if b % 5 == 0 else b for b in df["bidder"]], index=df.index, dtype=object)
    return df


def null_as_str(v):
    return "<null>" if pd.isna(v) else v


def test_running_aggregate(client, run, bids):
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
    spec = {name: (a.kind, a.column) for name, a in TOTALS.items()}
    parts = []
    for w in range(W0, LAST + 1):
        so_far = bids[bids["cycle"] <= w]
        touched = set(bids.loc[bids["cycle"] == w, "k"].map(null_as_str))
        totals = aggregate(so_far, ["k"], spec)
        totals = totals[totals["k"].map(null_as_str).isin(touched)]
        parts.append(totals.assign(as_of=(w + 1) * CYCLE_US, lg_window=w))
    expected = pd.concat(parts, ignore_index=True)
    result = read_sink(client, "op_keyed", "totals")
    assert_same_rows(result, expected, ["k", "lg_window"], approx=["mean"], hll=["auctions"], what="running")

    # the last emitted row of every key is the group-by over everything
    final = result.sort_values("lg_window").groupby("k", dropna=False).tail(1)
    assert_same_rows(
        final, aggregate(bids, ["k"], spec), ["k"], approx=["mean"], hll=["auctions"], what="final totals"
    )
    assert result["k"].isna().any()
    assert len(result) < len(set(bids["k"])) * (LAST - W0 + 1), "only touched keys are emitted"


def test_global_running_aggregate_emits_only_in_cycles_with_records(client, run):
    bids = nexmark_events("bid", W0, LAST, **FEW)
    assert set(bids["cycle"]) == {W0, W0 + 1}
    expected = pd.DataFrame(
        [
            {"n": int((bids["cycle"] <= w).sum()), "total": int(bids.loc[bids["cycle"] <= w, "price"].sum()),
             "as_of": (w + 1) * CYCLE_US, "lg_window": w}
            for w in (W0, W0 + 1)
        ]
    )  # fmt: skip
    result = read_sink(client, "op_keyed", "global_totals")
    assert_same_rows(result, expected, ["lg_window"], what="global running aggregate")


def dedup_reference(bids, key, within_us=None):
    """Replays the cycles: the earliest record of a key not in the state is kept; with
    ``within_us``, keys whose kept record is older than watermark - within are forgotten."""
    seen: dict = {}
    kept = []
    cols = ["date_time", "auction", "bidder", "price", "channel", "url", "extra"]
    for w in range(W0, LAST + 1):
        cycle = bids[bids["cycle"] == w].sort_values(cols, kind="stable")
        firsts: dict = {}
        for rec in cycle.to_dict("records"):
            firsts.setdefault(rec[key], rec)  # None is the null key
        for k, rec in firsts.items():
            if k not in seen:
                seen[k] = rec["ts_us"]
                kept.append({**rec, "lg_window": w})
        if within_us is not None:
            watermark = (w + 1) * CYCLE_US
            seen = {k: t for k, t in seen.items() if t >= watermark - within_us}
    return pd.DataFrame(kept)


def test_deduplicate_forever(client, run, bids):
    result = read_sink(client, "op_keyed", "first_seen")
    expected = dedup_reference(bids, "k")
    assert len(expected) == bids["k"].nunique(dropna=False)
    cols = ["k", "auction", "bidder", "price", "date_time", "lg_window"]
    expected["date_time"] = expected["ts_us"]
    assert_same_rows(result, expected[cols], ["k"], what="deduplicate")


def test_deduplicate_within(client, run, bids):
    result = read_sink(client, "op_keyed", "recent")
    expected = dedup_reference(bids, "bidder", WITHIN_S * S)
    expected["date_time"] = expected["ts_us"]
    cols = ["auction", "bidder", "price", "date_time", "lg_window"]
    assert_same_rows(result, expected[cols], ["bidder", "lg_window"], what="deduplicate within")
    # some keys were forgotten and kept again: more rows than keys
    assert len(expected) > bids["bidder"].nunique()
