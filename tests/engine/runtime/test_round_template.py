"""Rounds bound from their templates (:mod:`lockgate.runtime.round_template`) give what pandas
gives over the same records, round after round, as the state's layers grow from nothing to a
base and a chain of deltas; a round whose shape cannot be kept (a window without files) is
built step by step, and the next rounds are bound again. A shape's first rounds are built step
by step (``LOCKGATE_ROUND_TEMPLATE_AFTER``, 2 by default: in these nine windows no shape has a
third round, so none is bound); with ``0`` every round of a shape is bound, from its first. With ``LOCKGATE_ROUND_TEMPLATES=0`` no round is bound and the output
is the same.

Rounds run one window each (``LOCKGATE_CATCHUP=off``): a catch-up group builds its windows in
one pass and keeps no template.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
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
    W0,
    aggregate,
    assert_same_rows,
    nexmark_events,
    read_sink,
    running_totals,
    tumbling,
)

WINDOWS = 9
#: a window with no file: its round cannot be bound (no read to swap), it is built step by step
GAP = W0 + 5
SOURCE = {"events_per_second": 60, "seed": 3}


def files_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("templated", cycle_window=timedelta(seconds=10), parallelism=2)
    src = p.source(lg.FileSource(os.environ["LG_TEST_TEMPLATE_ROOT"], format="parquet", event_time="ts"),
                   name="records")
    src.key_by("k").aggregate(name="totals", n=lg.count(), total=lg.sum("v"), hi=lg.max("v")).sink(
        lg.CollectSink("totals"), name="totals_out")
    src.key_by("k").window(lg.Tumbling(timedelta(seconds=20))).aggregate(name="per_window", n=lg.count(),
                                                                        total=lg.sum("v")).sink(
        lg.CollectSink("per_window"), name="per_window_out")
    return p


def nexmark_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("templated_rows", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    bids.key_by("auction").aggregate(name="per_auction", n=lg.count(), hi=lg.max("price")).sink(
        lg.CollectSink("per_auction"), name="per_auction_out")
    return p


def _records(root: Path) -> pd.DataFrame:
    """One Parquet file per window (each holds exactly its window's records), none for GAP."""
    rng = np.random.default_rng(7)
    parts = []
    for w in range(W0, W0 + WINDOWS):
        if w == GAP:
            continue
        n = 40 + 10 * (w - W0)
        ts = w * CYCLE_US + np.sort(rng.integers(0, CYCLE_US, n))
        part = pd.DataFrame({"k": [f"k{x}" for x in rng.integers(0, 25, n)], "v": rng.integers(0, 1000, n),
                             "ts_us": ts})
        table = pa.table({"k": part["k"], "v": pa.array(part["v"], pa.int64()),
                          "ts": pa.array(part["ts_us"], pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, root / f"w{w}.parquet")
        parts.append(part.assign(cycle=w))
    return pd.concat(parts, ignore_index=True)


def _run(path: str, job: str, home: Path, last: int) -> lg.Client:
    client = lg.connect("embedded", home=str(home))
    run = client.run(path, first=W0, last=last)
    assert run.state == "FINISHED", run
    return client


def _bound(client, job: str) -> dict[int, bool]:
    """Per window: whether its round was bound from a template."""
    return {c.window: "template_bind" in c.timings for c in client.list_cycles(job, limit=100).cycles}


@pytest.fixture
def one_window_rounds(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "4")  # a fold in the middle: base, then deltas again
    root = tmp_path / "files"
    root.mkdir()
    monkeypatch.setenv("LG_TEST_TEMPLATE_ROOT", str(root))
    return _records(root)


@pytest.mark.parametrize("templates, after", [("1", "0"), ("1", "1"), ("0", None)],
                         ids=["from-the-first-round", "from-the-second-round", "off"])
def test_bound_rounds_equal_pandas_as_the_state_grows(spark, tmp_path, monkeypatch, one_window_rounds, templates,
                                                      after):
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATES", templates)
    if after is not None:
        monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", after)
    records = one_window_rounds
    last = W0 + WINDOWS - 1
    client = _run(f"{__file__}:files_pipeline", "templated", tmp_path / "home", last)
    try:
        bound = _bound(client, "templated")
        assert sorted(bound) == list(range(W0, last + 1))
        if templates == "0":
            assert not any(bound.values())
        elif after == "0":
            # a template from each shape's first round: every round is bound, the window with no
            # file too (its empty read is an empty LocalRelation, a constant of its shape's template)
            assert all(bound.values()), bound
        else:
            # a shape's first round is built step by step (the first round of all has no state,
            # the second one delta: two shapes), its later rounds are bound
            assert not bound[GAP] and not bound[W0] and not bound[W0 + 1], bound
            assert any(bound.values()), bound
            assert sum(bound.values()) < WINDOWS - 1

        spec = {"n": ("count", None), "total": ("sum", "v"), "hi": ("max", "v")}
        expected = running_totals(records, "k", spec, last)
        totals = read_sink(client, "templated", "totals")
        assert_same_rows(totals, expected, ["k", "lg_window"], what="running totals")

        windows = tumbling(records, 20 * 1_000_000)
        closed = aggregate(windows, ["k", "window_start", "window_end"], {"n": ("count", None), "total": ("sum", "v")})
        closed = closed[closed["window_end"] <= (last + 1) * CYCLE_US]
        per_window = read_sink(client, "templated", "per_window")
        assert_same_rows(per_window, closed, ["k", "window_start"], what="tumbling windows")
    finally:
        client.close()


def test_rows_made_on_the_driver_are_bound_too(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", "0")
    last = W0 + 4
    client = _run(f"{__file__}:nexmark_pipeline", "templated_rows", tmp_path / "home", last)
    try:
        assert all(_bound(client, "templated_rows").values())
        bids = nexmark_events("bid", W0, last, **SOURCE)
        expected = running_totals(bids, "auction", {"n": ("count", None), "hi": ("max", "price")}, last)
        result = read_sink(client, "templated_rows", "per_auction")
        assert_same_rows(result, expected, ["auction", "lg_window"], what="running aggregate of generated bids")
    finally:
        client.close()


def test_layers_not_named_by_rising_windows_are_never_kept(spark):
    """A chain whose deltas are ranked by a map of folder names (folders not named by rising cycle
    windows) cannot be read again with other files, so its rounds are built step by step."""
    from pyspark.sql.types import LongType, StructField, StructType

    from lockgate.runtime.state.layers import LayeredState

    schema = StructType([StructField("k", LongType())])

    def chain(*folders: str) -> LayeredState:
        layers = [("/s/base/t", False)] + [(f"/s/{f}/t", True) for f in folders]
        return LayeredState(spark, schema, layers, None)

    assert chain("w=0000000003-a1", "w=0000000004-a2").templatable
    assert chain("w=0000000003-a1").templatable  # one delta: read on its own, ranked by position
    assert not chain("w=0000000004-a1", "w=0000000003-a1").templatable  # not rising
    assert not chain("snap-a", "snap-b").templatable  # not named by windows
    assert chain("w=0000000003-a1", "w=0000000004-a2").shape() != chain("snap-a", "snap-b").shape()


def test_a_shape_keeps_its_template_after_two_rounds_by_default(monkeypatch):
    from lockgate.runtime import round_template

    monkeypatch.delenv("LOCKGATE_ROUND_TEMPLATE_AFTER", raising=False)
    assert round_template.build_after() == 2
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", "0")
    assert round_template.build_after() == 0
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", "two")
    with pytest.raises(ValueError, match="LOCKGATE_ROUND_TEMPLATE_AFTER='two' is not a number of rounds"):
        round_template.build_after()


def test_a_frame_derived_from_the_round_is_kept_once_and_bound_each_round(spark, tmp_path):
    """What a bound round collects its tails by (``RoundTemplate.derived``): built once over the
    template's own frames, then bound to each round's reads and bounds, equal to pandas."""
    from pyspark.sql import functions as F

    from lockgate.runtime.one_job import pack, unpack
    from lockgate.runtime.round_template import RoundFrames, RoundTemplate, parameters

    schema = "k string, v long, t long"
    frames = {}
    for w in range(3):
        part = pd.DataFrame({"k": [f"k{i % 3}" for i in range(10)], "v": [w * 100 + i for i in range(10)],
                             "t": list(range(10))})
        part.to_parquet(tmp_path / f"w{w}.parquet")
        frames[w] = part

    def read(w):
        return spark.read.schema(schema).parquet(str(tmp_path / f"w{w}.parquet"))

    sentinels = parameters([])
    first = read(0)
    kept = first.filter(F.col("t") >= F.lit(sentinels["watermark_us"]))
    totals = kept.groupBy("k").agg(F.sum("v").alias("total"))
    template = RoundTemplate.of_round(spark, RoundFrames([("low", kept, {}), ("totals", totals, {})], {}, [], []),
                                      {"source:x": first}, sentinels, [])
    made = []

    def make(parts):
        made.append(len(parts))
        return pack(parts)

    def parts(built):
        return [df for _name, df, _cfg in built.sinks]

    for w, low in ((1, 4), (2, 7)):
        values = {name: 0 for name in sentinels} | {"watermark_us": low}
        union, schemas = template.derived(("tails",), parts, make, {"source:x": read(w)}, values)
        rows, sums = unpack(union.toArrow(), schemas)
        expected = frames[w][frames[w]["t"] >= low]
        assert sorted(rows.column("v").to_pylist()) == sorted(expected["v"].tolist())
        got = dict(zip(sums.column("k").to_pylist(), sums.column("total").to_pylist(), strict=True))
        assert got == expected.groupby("k")["v"].sum().to_dict()
    assert made == [2], "the union is built once, then bound"


@pytest.mark.parametrize("value, on", [("0", False), ("OFF", False), ("False", False), (" off ", False), ("1", True)])
def test_the_templates_switch_reads_any_case(monkeypatch, value, on):
    from lockgate.runtime import round_template

    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATES", value)
    assert round_template.enabled() is on
