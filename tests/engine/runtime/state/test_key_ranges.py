"""Key ranges (:mod:`lockgate.runtime.state.key_ranges`): the driver's (min, max) of a round's integer
keys, from Parquet footers or driver-made rows, filter every state layer before the lookup.

Checked against independent references: the footer ranges against numpy over the same values; a
lookup over sorted layers of many row groups against pandas applying the layers in order, while
Spark's scan returns fewer rows than the layers hold (row groups skipped); whole runs, bound from
round templates round after round, whose keys move and come back to old ranges, against pandas
(running aggregate and deduplication), with ranges on and off and both layer writers.
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
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

import lockgate as lg
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.runtime.availability import _integer_ranges
from lockgate.runtime.state import key_ranges
from lockgate.runtime.state.layers import DELETED, LayeredState

if str(Path(__file__).resolve().parent.parent) not in sys.path:  # reference.py, in the runtime tests
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reference import CYCLE_US, W0, aggregate, assert_same_rows, read_sink

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])
WITH_FLAG = StructType([*SCHEMA.fields, StructField(DELETED, BooleanType())])
WINDOWS = 8


# -- the ranges themselves --------------------------------------------------------------------
def test_footer_ranges_are_each_integer_columns_min_and_max_over_every_row_group(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    k = rng.integers(-5_000, 5_000, 1_000)
    small = rng.integers(0, 100, 1_000).astype(np.int32)
    with_nulls = pa.array([None if i % 7 == 0 else int(x) for i, x in enumerate(k)], pa.int64())
    table = pa.table({"K": k, "small": small, "with_nulls": with_nulls, "name": [f"n{x}" for x in k],
                      "nulls_only": pa.nulls(1_000, pa.int64()), "u": pa.array(small, pa.uint32())})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=97)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups > 5
    got = _integer_ranges(meta)
    present = [x for x in with_nulls.to_pylist() if x is not None]
    assert got == {"k": (int(k.min()), int(k.max())), "small": (int(small.min()), int(small.max())),
                   "with_nulls": (min(present), max(present))}
    assert key_ranges.of_table(table) == got  # the driver's rows give the same


def test_union_passed_and_sort_columns() -> None:
    assert key_ranges.union([{"a": (1, 5), "b": (0, 0)}, {"a": (-3, 2)}]) == {"a": (-3, 5)}
    assert key_ranges.union([{"a": (1, 5)}, None]) == {}
    assert key_ranges.passed("filter", {}, {"a": (1, 2)}) == {"a": (1, 2)}
    assert key_ranges.passed("with_column", {"column": "A"}, {"a": (1, 2), "b": (3, 4)}) == {"b": (3, 4)}
    assert key_ranges.passed("select", {}, {"a": (1, 2)}) == {}
    schema = pa.schema([("k", pa.int64()), ("s", pa.string()), ("m", pa.map_(pa.string(), pa.int64())),
                        ("t", pa.int64())])
    assert key_ranges.sort_columns(("k", "s", "m", "t"), schema) == ["k", "s"]
    assert key_ranges.sort_columns(None, schema) == []
    assert key_ranges.on({"k": (1, 2)}, ["K", "x"]) == {"K": (1, 2)}


# -- a lookup over sorted layers ----------------------------------------------------------------
def _layers(tmp_path: Path) -> tuple[list[tuple[str, bool]], list[tuple[list[tuple], list[int]]], int]:
    """A base and three deltas written as rounds write them (sorted by the key, row groups of 16
    rows): each layer's keys in a band of its own, a few old keys updated or removed later."""
    store = SnapshotStore(tmp_path / "snapshots")
    rng = np.random.default_rng(5)
    spec: list[tuple[list[tuple], list[int]]] = [([(k, f"base{k}") for k in range(0, 400)] + [(None, "null-base")], [])]
    for i in range(1, 4):
        band = rng.choice(np.arange(400 * i, 400 * i + 300), 120, replace=False)
        old = rng.choice(np.arange(0, 400 * i), 10, replace=False)
        rows = [(int(k), f"d{i}:{k}") for k in band] + [(int(k), f"d{i}:{k}") for k in old[:6]]
        spec.append((rows, [int(k) for k in old[6:]]))
    folders, total = [], 0
    for i, (rows, dead) in enumerate(spec):
        uri = store.snapshot_uri("job", W0 + i, 1)
        if i == 0:
            table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "v": [r[1] for r in rows]})
        else:
            table = pa.table({"k": pa.array([r[0] for r in rows] + dead, pa.int64()),
                              "v": [r[1] for r in rows] + [None] * len(dead),
                              DELETED: [False] * len(rows) + [True] * len(dead)})
        table = table.take(np.random.default_rng(i).permutation(table.num_rows))  # unsorted as computed
        store.write_table(uri, "op.main", table, ["k"], 16)
        total += table.num_rows
        folders.append((store.operator_uri(uri, "op.main"), i > 0))
    return folders, spec, total


def _expected(spec: list[tuple[list[tuple], list[int]]], keys: list[int | None]) -> pd.DataFrame:
    live: dict = {}
    for rows, dead in spec:
        for r in rows:
            live[r[0]] = r
        for k in dead:
            live.pop(k, None)
    found = [live[k] for k in keys if k in live]
    return pd.DataFrame(found, columns=["k", "v"])


def _scan_rows(df) -> int:
    """Rows Spark's file scans returned in ``df``'s last run (before any filter)."""
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName().startswith("AdaptiveSparkPlan"):
        plan = plan.finalPhysicalPlan()
    total = 0
    it = plan.collectLeaves().iterator()
    while it.hasNext():
        leaf = it.next()
        if leaf.getClass().getSimpleName() == "FileSourceScanExec":
            total += int(leaf.metrics().apply("numOutputRows").value())
    return total


def test_a_ranged_lookup_skips_row_groups_and_finds_what_pandas_finds(spark, tmp_path: Path) -> None:
    layers, spec, total = _layers(tmp_path)
    assert pq.ParquetFile(layers[0][0].removeprefix("file://") + "/part-00000-driver.parquet").num_row_groups > 20
    state = LayeredState(spark, SCHEMA, layers, None)
    # the newest band's keys, one old key updated there, one removed, one never seen, and null
    keys = [1_250, 1_251, 1_260, 1_499, 1_555, None]
    keys += [k for k, _v in spec[3][0][-2:]] + spec[3][1][:1] + [k for k, _v in spec[1][0][:1]]
    frame = spark.createDataFrame([(k,) for k in keys], "k long")
    present = [k for k in keys if k is not None]
    ranges = {"k": (min(present), max(present))}

    plain = state.lookup(("k",), frame, ["k"])
    ranged = state.lookup(("k",), frame, ["k"], ranges)
    expected = _expected(spec, keys)
    for df in (plain, ranged):
        got = df.toPandas()
        assert_same_rows(got, expected, ["k"], what="lookup")
    assert _scan_rows(plain) == total  # every row of every layer read
    # the range spans old keys too (one of the first delta's), so not every row group is skipped
    assert 0 < _scan_rows(ranged) < total


# -- whole runs ------------------------------------------------------------------------------------
def ranged_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("ranged", cycle_window=timedelta(seconds=10), parallelism=2)
    src = p.source(lg.FileSource(os.environ["LG_TEST_RANGES_ROOT"], format="parquet", event_time="ts"),
                   name="records")
    src.key_by("k").aggregate(name="totals", n=lg.count(), total=lg.sum("v")).sink(
        lg.CollectSink("totals"), name="totals_out")
    src.filter("v >= 0").key_by("k").deduplicate(name="first_seen").sink(lg.CollectSink("first"), name="first_out")
    return p


def _records(root: Path) -> pd.DataFrame:
    """One file per window: keys in a band that moves up each window, and some of every earlier
    band's keys again (their state lies in older layers, outside a window's own band)."""
    rng = np.random.default_rng(11)
    parts = []
    for w in range(W0, W0 + WINDOWS):
        i = w - W0
        band = rng.integers(100 * i, 100 * i + 60, 30)
        back = rng.integers(0, 100 * i + 1, 6) if i else np.array([], dtype=np.int64)
        k = np.concatenate([band, back])
        ts = w * CYCLE_US + np.sort(rng.integers(0, CYCLE_US, k.size))
        part = pd.DataFrame({"k": k, "v": rng.integers(-20, 1000, k.size), "ts_us": ts})
        pq.write_table(pa.table({"k": pa.array(part["k"], pa.int64()), "v": pa.array(part["v"], pa.int64()),
                                 "ts": pa.array(part["ts_us"], pa.timestamp("us", tz="UTC"))}),
                       root / f"w{w}.parquet")
        parts.append(part.assign(cycle=w))
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("ranges, driver_rows", [("1", None), ("1", "0"), ("0", None)],
                         ids=["ranged", "ranged-spark-writes", "off"])
def test_bound_rounds_with_moving_ranges_equal_pandas(spark, tmp_path, monkeypatch, ranges, driver_rows):
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", "0")  # every round of a shape bound
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "3")  # folds in the middle
    monkeypatch.setenv("LOCKGATE_KEY_RANGES", ranges)
    if driver_rows is not None:
        monkeypatch.setenv("LOCKGATE_DRIVER_SNAPSHOT_ROWS", driver_rows)
    root = tmp_path / "files"
    root.mkdir()
    monkeypatch.setenv("LG_TEST_RANGES_ROOT", str(root))
    records = _records(root)
    last = W0 + WINDOWS - 1
    client = lg.connect("embedded", home=str(tmp_path / "home"))
    try:
        run = client.run(f"{__file__}:ranged_pipeline", first=W0, last=last)
        assert run.state == "FINISHED", run
        bound = {c.window: "template_bind" in c.timings for c in client.list_cycles("ranged", limit=100).cycles}
        assert sum(bound.values()) >= WINDOWS // 2, bound  # most rounds bound, the ranges their parameters

        parts = []
        for w in range(W0, last + 1):
            touched = set(records.loc[records["cycle"] == w, "k"])
            totals = aggregate(records[records["cycle"] <= w], ["k"], {"n": ("count", None), "total": ("sum", "v")})
            parts.append(totals[totals["k"].isin(touched)].assign(lg_window=w))
        assert_same_rows(read_sink(client, "ranged", "totals"), pd.concat(parts, ignore_index=True),
                         ["k", "lg_window"], what="running totals")

        kept = records[records["v"] >= 0].sort_values(["ts_us", "v"])
        first = kept.drop_duplicates("k", keep="first")
        got = read_sink(client, "ranged", "first")
        assert sorted(got["k"]) == sorted(first["k"]), "each key exactly once, in the window of its first record"
        assert_same_rows(got[["k", "v"]], first[["k", "v"]], ["k"], what="deduplicated")
    finally:
        client.close()


def test_a_joins_key_ranges_are_both_sides_and_template_ends_stay_apart() -> None:
    left, right = {"a": (10, 20), "x": (0, 1)}, {"b": (15, 40)}
    out = key_ranges.join_output(left, right, ["a"], ["b"], {"b": "b"})
    assert out == {"a": ((10, 15), (20, 40)), "b": ((10, 15), (20, 40))}  # each side's end kept
    assert key_ranges.join_output(left, None, ["a"], ["b"], {"b": "b"}) == {}
    assert key_ranges.renamed(left, ["a"], ["id"]) == {"id": (10, 20)}
    assert key_ranges.union([{"a": (1, 5)}, {"a": (-3, 2)}, {"a": (4, 9)}]) == {"a": (-3, 9)}


def joined_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("ranged_join", cycle_window=timedelta(seconds=10), parallelism=2)
    root = Path(os.environ["LG_TEST_RANGES_ROOT"])
    orders = p.source(lg.FileSource(str(root / "orders"), format="parquet", event_time="ts"), name="orders")
    items = p.source(lg.FileSource(str(root / "items"), format="parquet", event_time="ts"), name="items")
    pairs = orders.join(items, left_on=["k"], right_on=["item"], between=(timedelta(seconds=-15),
                                                                          timedelta(seconds=15)), name="pairs")
    pairs.sink(lg.CollectSink("pairs"), name="pairs_out")
    pairs.key_by("item").aggregate(name="per_item", n=lg.count(), total=lg.sum("v")).sink(
        lg.CollectSink("per_item"), name="per_item_out")
    return p


def _join_records(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Orders and items whose keys move up window by window, items a little ahead of orders."""
    rng = np.random.default_rng(23)
    sides: dict[str, list[pd.DataFrame]] = {"orders": [], "items": []}
    for name, shift in (("orders", 0), ("items", 20)):
        (root / name).mkdir()
        for w in range(W0, W0 + WINDOWS):
            i = w - W0
            k = rng.integers(50 * i + shift, 50 * i + shift + 70, 25)
            ts = w * CYCLE_US + np.sort(rng.integers(0, CYCLE_US, k.size))
            key = "k" if name == "orders" else "item"
            part = pd.DataFrame({key: k, "v": rng.integers(0, 100, k.size), "ts_us": ts})
            pq.write_table(pa.table({key: pa.array(part[key], pa.int64()), "v": pa.array(part["v"], pa.int64()),
                                     "ts": pa.array(part["ts_us"], pa.timestamp("us", tz="UTC"))}),
                           root / name / f"w{w}.parquet")
            sides[name].append(part)
    return pd.concat(sides["orders"], ignore_index=True), pd.concat(sides["items"], ignore_index=True)


@pytest.mark.parametrize("ranges", ["1", "0"], ids=["ranged", "off"])
def test_an_interval_join_and_its_aggregate_with_ranges_equal_pandas(spark, tmp_path, monkeypatch, ranges):
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", "0")
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "3")
    monkeypatch.setenv("LOCKGATE_KEY_RANGES", ranges)
    root = tmp_path / "files"
    root.mkdir()
    monkeypatch.setenv("LG_TEST_RANGES_ROOT", str(root))
    orders, items = _join_records(root)
    last = W0 + WINDOWS - 1
    client = lg.connect("embedded", home=str(tmp_path / "home"))
    try:
        run = client.run(f"{__file__}:joined_pipeline", first=W0, last=last)
        assert run.state == "FINISHED", run
        bound = {c.window: "template_bind" in c.timings for c in client.list_cycles("ranged_join", limit=100).cycles}
        assert sum(bound.values()) >= WINDOWS // 2, bound

        both = orders.merge(items, left_on="k", right_on="item", suffixes=("", "_right"))
        both = both[(both["ts_us"] - both["ts_us_right"]).abs() <= 15 * 1_000_000]
        got = read_sink(client, "ranged_join", "pairs")
        want = both.rename(columns={"ts_us": "ts", "ts_us_right": "ts_right"})[["k", "v", "ts", "item", "v_right",
                                                                                 "ts_right"]]
        from reference import rows

        assert rows(got, want.columns) == rows(want, want.columns), "every pair once"

        # the running aggregate's last row per item: every pair of that item so far
        per_item = read_sink(client, "ranged_join", "per_item").sort_values("lg_window").drop_duplicates(
            "item", keep="last")
        totals = aggregate(both, ["item"], {"n": ("count", None), "total": ("sum", "v")})
        assert_same_rows(per_item[["item", "n", "total"]], totals, ["item"], what="per item")
    finally:
        client.close()
