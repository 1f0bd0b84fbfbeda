"""Session windows, run through the embedded client, checked against a pandas
sessionization per key: a new session starts when the gap since the key's previous record
is more than gap (sessions that touch merge, as in Spark's ``session_window``), and a session is [first record, last record + gap).

Sessions are merged from spans carried in the snapshots and the new cycle's records, so
a session may span many cycles; one test drives that with Nexmark bids, the other with
hand-made records arriving late (within the allowed lateness) that bridge two sessions
already in the state, or extend one backwards.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    CYCLE_US,
    T0_ISO,
    T0_US,
    W0,
    S,
    aggregate,
    assert_same_rows,
    embedded_client,
    nexmark_events,
    read_sink,
    session_emit_cycle,
    sessions,
)

SOURCE = {"events_per_second": 101, "seed": 5}
LAST = W0 + 4
GAP_US = 3 * S
AGGS = {
    "n": lg.count(),
    "total": lg.sum("price"),
    "lo": lg.min("price"),
    "hi": lg.max("price"),
    "mean": lg.avg("price"),
    "auctions": lg.collect("auction"),
    "distinct": lg.approx_distinct("auction"),
}


def nexmark_sessions() -> lg.Pipeline:
    p = lg.Pipeline("op_sessions", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    (
        bids.key_by("bidder")
        .window(lg.Session(timedelta(seconds=3)))
        .aggregate(name="sessions", **AGGS)
        .sink(lg.CollectSink("sessions"), name="sessions_out")
    )
    return p


# -- hand-made records: (key, event time s, arrival time s, value), seconds after T0 -------
LATENESS_S = 8
EVENTS = [
    ("a", 1.0, 1.0, 1), ("a", 5.0, 5.0, 2),  # two spans in the state after cycle 0 ...
    ("a", 3.5, 12.0, 3),  # ... bridged by a record arriving in cycle 1: one session [1, 8)
    ("b", 0.0, 0.0, 10), ("b", 3.0, 3.0, 11),  # exactly `gap` apart: touching, one session
    ("b", 1.5, 14.0, 12),  # below the watermark at the start of cycle 1 (2 s): late, dropped
    ("e", 7.0, 7.0, 20), ("e", 4.5, 15.0, 21),  # extends e's span in the state backwards
    (None, 6.0, 6.0, 30), (None, 8.0, 8.0, 31),  # a null key is a key
    ("c", 9.0, 9.0, 40), ("c", 11.0, 11.0, 41), ("c", 13.5, 13.5, 42),  # spans cycles 0 and 1
    ("c", 22.0, 22.0, 43),  # a new session in cycle 2
    ("d", 31.0, 31.0, 50),  # still open after the last cycle
    ("f", 9.0, 9.0, 60),  # [9, 12) ends exactly at the watermark after cycle 1 (12 s): kept open ...
    ("f", 12.0, 21.0, 61),  # ... for a record at the watermark, on time in cycle 2, that touches it
]  # fmt: skip
EXPECTED = [  # (key, start s, end s, n, values, cycle emitted in)
    ("a", 1.0, 8.0, 3, (1, 2, 3), 1),
    ("b", 0.0, 6.0, 2, (10, 11), 1),
    ("e", 4.5, 10.0, 2, (20, 21), 1),
    (None, 6.0, 11.0, 2, (30, 31), 1),
    ("c", 9.0, 16.5, 3, (40, 41, 42), 2),
    ("c", 22.0, 25.0, 1, (43,), 3),
    ("f", 9.0, 15.0, 2, (60, 61), 2),
]


def arrival_sessions() -> lg.Pipeline:
    p = lg.Pipeline(
        "op_sessions_arrival",
        cycle_window=timedelta(seconds=10),
        watermark=lg.Watermark(lateness=timedelta(seconds=LATENESS_S), late=lg.CollectSink("late")),
        parallelism=2,
    )
    events = p.source(
        lg.FileSource(os.environ["LG_TEST_SESSION_FILES"], format="parquet", event_time="ts", arrival="arr"),
        name="events",
    )
    (
        events.key_by("k")
        .window(lg.Session(timedelta(seconds=3)))
        .aggregate(name="sessions", n=lg.count(), total=lg.sum("v"), values=lg.collect("v"))
        .sink(lg.CollectSink("sessions"), name="sessions_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_sessions"))


def test_sessions_across_cycles_match_pandas(client):
    run = client.run(f"{__file__}:nexmark_sessions", first=W0, last=LAST)
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
    bids = nexmark_events("bid", W0, LAST, **SOURCE)
    expected = aggregate(
        sessions(bids, ["bidder"], GAP_US),
        ["window_start", "window_end", "bidder"],
        {name: (a.kind, a.column) for name, a in AGGS.items()},
    )
    expected["lg_window"] = session_emit_cycle(expected["window_end"].to_numpy())
    open_sessions = expected[expected["lg_window"] > LAST]
    expected = expected[expected["lg_window"] <= LAST]
    result = read_sink(client, "op_sessions", "sessions")
    assert_same_rows(
        result, expected, ["bidder", "window_start"], approx=["mean"], hll=["distinct"], what="sessions"
    )
    # the data exercises what matters: sessions whose records lie in several cycles,
    # sessions still open (kept in the state, not emitted), several sessions of one key
    first_cycle = expected["window_start"] // CYCLE_US
    last_cycle = (expected["window_end"] - GAP_US) // CYCLE_US
    assert (last_cycle > first_cycle).sum() >= 3
    assert len(open_sessions) >= 1
    assert expected.groupby("bidder").size().max() >= 3
    assert not result.merge(open_sessions[["bidder", "window_start"]]).shape[0]


def test_sessions_merge_state_spans_with_late_records(client, tmp_path, monkeypatch):
    frame = pd.DataFrame(EVENTS, columns=["k", "t", "a", "v"])
    table = pa.table(
        {
            "k": pa.array(frame["k"], pa.string()),
            "v": pa.array(frame["v"], pa.int64()),
            "ts": pa.array((T0_US + frame["t"] * S).astype("int64"), pa.timestamp("us", tz="UTC")),
            "arr": pa.array((T0_US + frame["a"] * S).astype("int64"), pa.timestamp("us", tz="UTC")),
        }
    )
    folder = tmp_path / "events"
    folder.mkdir()
    # two files, each with records of several cycle windows, in no particular order
    pq.write_table(table.take(list(range(0, len(table), 2))), folder / "part-0.parquet")
    pq.write_table(table.take(list(range(1, len(table), 2))), folder / "part-1.parquet")
    monkeypatch.setenv("LG_TEST_SESSION_FILES", str(folder))

    run = client.run(f"{__file__}:arrival_sessions", first=W0, last=W0 + 3)
    assert run.state == "FINISHED" and run.late_rows == 1

    result = read_sink(client, "op_sessions_arrival", "sessions")
    want = pd.DataFrame(
        [
            (k, T0_US + int(s * S), T0_US + int(e * S), n, n_sum, vals, W0 + w)
            for k, s, e, n, vals, w in EXPECTED
            for n_sum in [sum(vals)]
        ],
        columns=["k", "window_start", "window_end", "n", "total", "values", "lg_window"],
    )
    assert_same_rows(result, want, ["k", "window_start"], what="sessions from hand-made records")

    # the same through the pandas reference: sessionize the records that were not late
    late = (frame["t"] * S) < (frame["a"] * S // CYCLE_US * CYCLE_US - LATENESS_S * S)
    on_time = frame[~late].assign(ts_us=lambda f: (T0_US + f["t"] * S).astype("int64"))
    ref = aggregate(
        sessions(on_time, ["k"], GAP_US),
        ["k", "window_start", "window_end"],
        {"n": ("count", None), "total": ("sum", "v"), "values": ("collect", "v")},
    )
    ref["lg_window"] = session_emit_cycle(ref["window_end"].to_numpy(), LATENESS_S * S)
    assert_same_rows(result, ref[ref["lg_window"] <= W0 + 3], ["k", "window_start"], what="vs pandas")

    late_rows = read_sink(client, "op_sessions_arrival", "late.events")
    assert late_rows[["k", "v", "lg_window"]].values.tolist() == [["b", 12, W0 + 1]]


def test_session_bounds_match_spark_session_window(client, spark):
    """The on-time hand-made records sessionized by a plain PySpark batch (``session_window``)
    give the same sessions Lockgate emitted: touching sessions merge in both."""
    from pyspark.sql import functions as F

    frame = pd.DataFrame(EVENTS, columns=["k", "t", "a", "v"])
    late = (frame["t"] * S) < (frame["a"] * S // CYCLE_US * CYCLE_US - LATENESS_S * S)
    on_time = frame[~late]
    df = spark.createDataFrame(
        [(k if isinstance(k, str) else None, int(T0_US + t * S), v)
         for k, t, v in zip(on_time["k"], on_time["t"], on_time["v"], strict=True)],
        "k string, us long, v long",
    ).withColumn("ts", F.timestamp_micros("us"))
    batch = (
        df.groupBy("k", F.session_window("ts", f"{GAP_US} microseconds").alias("s"))
        .agg(F.count("*").alias("n"))
        .select("k", F.unix_micros("s.start").alias("start"), F.unix_micros("s.end").alias("end"), "n")
        .collect()
    )
    spark_sessions = sorted((r["k"] or "", r["start"], r["end"], r["n"]) for r in batch)
    emitted = read_sink(client, "op_sessions_arrival", "sessions")
    still_open = [("d", T0_US + 31 * S, T0_US + 31 * S + GAP_US, 1)]  # not emitted by the last cycle
    mine = sorted([(k if isinstance(k, str) else "", int(s), int(e), int(n)) for k, s, e, n in zip(
        emitted["k"], emitted["window_start"], emitted["window_end"], emitted["n"], strict=True)] + still_open)
    assert mine == spark_sessions
    assert ("b", T0_US, T0_US + 6 * S, 2) in mine  # records exactly `gap` apart: one session
