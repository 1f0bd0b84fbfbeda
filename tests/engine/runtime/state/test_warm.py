"""Warm state (:mod:`lockgate.runtime.state.warm`): each state table's base is kept in Spark's
cache between rounds, rounds read it from there, a fold swaps it, a second run of the job starts
from it, and the results equal pandas and a run with warm state off. A folder written again
is read again, never answered from the cache; the rows kept are bounded.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

import lockgate as lg
from lockgate.checkpoint.layers import table_layers
from lockgate.errors import InvalidArgumentError
from lockgate.runtime.state.layers import LayeredState
from lockgate.runtime.state.warm import WarmBases

if str(Path(__file__).resolve().parent.parent) not in sys.path:  # reference.py, in the runtime tests
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reference import T0_ISO, W0, assert_same_rows, nexmark_events, read_sink, running_totals

SOURCE = {"events_per_second": 60, "seed": 5}
LAST = W0 + 9
TABLE = "totals.main"
SCHEMA = StructType([StructField("key", LongType()), StructField("n", LongType())])


def totals_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("warm", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    bids.key_by("bidder").aggregate(n=lg.count(), total=lg.sum("price"), name="totals").sink(
        lg.CollectSink("totals"), name="totals_out")
    return p


REF = f"{__file__}:totals_pipeline"


def _reference(last: int) -> pd.DataFrame:
    bids = nexmark_events("bid", W0, last, **SOURCE)
    return running_totals(bids, "bidder", {"n": ("count", None), "total": ("sum", "price")}, last)


def _cached(spark, schema: StructType, uri: str) -> bool:
    """Whether Spark answers a round's read of the layer folder ``uri`` (a table of ``schema``)
    from its cache."""
    from lockgate.runtime.file_reads import FileReads

    df = FileReads.of(spark).parquet(schema, [uri])
    return "InMemoryRelation" in df._jdf.queryExecution().withCachedData().toString()


def _base_at(client, job: str, window: int) -> str:
    """The base folder of ``job``'s state table at the checkpoint of ``window``."""
    cp = next(c for c in client.catalog.list_checkpoints(job, include_inactive=True) if c.window == window)
    layers = table_layers(cp.snapshot_uri, cp.snapshot_manifest[TABLE])
    assert layers[0]["kind"] == "base"
    return client.snapshots.operator_uri(layers[0]["snapshot"], TABLE)


def _expected_warm(client, job: str, last: int) -> dict:
    """What a run through ``last`` leaves warm: the base round ``last`` started from, when the
    round before it started from that base too (a base is kept from its second round on)."""
    if last - 2 >= W0 and _base_at(client, job, last - 1) == _base_at(client, job, last - 2):
        return {(job, TABLE): _base_at(client, job, last - 1)}
    return {}


def test_rounds_keep_the_base_warm_swap_it_after_a_fold_and_equal_pandas_and_a_cold_run(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "3")  # folds into a new base every few rounds
    held = WarmBases.of(spark)
    client = lg.connect("embedded", home=str(tmp_path / "home"), keep_checkpoints=20)
    try:
        res = client.run(REF, first=W0, last=W0 + 5)
        assert res.state == "FINISHED"
        bases = [_base_at(client, "warm", w) for w in range(W0, W0 + 6)]
        assert len(set(bases)) >= 2, "no fold into a new base happened: the swap is not tested"
        assert any(a == b for a, b in zip(bases, bases[1:], strict=False)), "no base read by two rounds"
        assert held.held("warm") == _expected_warm(client, "warm", W0 + 5)
        schema = held._held[("warm", TABLE)].schema  # the table's schema, as the rounds read it
        for uri in held.held("warm").values():
            assert _cached(spark, schema, uri)
        # a second run of the job (a new runner) starts from its checkpoint and swaps as it folds
        res = client.run(REF, first=W0 + 6, last=LAST)
        assert res.state == "FINISHED"
        now = _expected_warm(client, "warm", LAST)
        assert held.held("warm") == now
        for stale in set(bases) - set(now.values()):
            assert not _cached(spark, schema, stale), f"a base no round reads any more is still cached: {stale}"
        assert_same_rows(read_sink(client, "warm", "totals"), _reference(LAST), ["bidder", "lg_window"],
                         what="running totals, warm")

        # the same job with warm state off gives the same rows, and holds nothing
        monkeypatch.setenv("LOCKGATE_WARM_STATE", "0")
        res = client.run(REF, job="cold", first=W0, last=LAST)
        assert res.state == "FINISHED" and held.held("cold") == {}
        assert_same_rows(read_sink(client, "cold", "totals"), _reference(LAST), ["bidder", "lg_window"],
                         what="running totals, cold")
    finally:
        client.close()
        held.release("warm")


def _write_base(folder: Path, keys: np.ndarray, n: np.ndarray) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": keys, "n": n}), folder / "part-0.parquet")
    return {"files": [{"path": "part-0.parquet", "size": (folder / "part-0.parquet").stat().st_size}],
            "rows": len(keys)}


def _lookup_sum(spark, uri: str) -> int:
    state = LayeredState(spark, SCHEMA, [(uri, False)], None)
    keys = spark.createDataFrame(pa.table({"key": np.arange(0, 100, dtype=np.int64)}))
    return state.lookup(("key",), keys, ["key"]).agg(F.sum("n")).first()[0]


def test_a_folder_written_again_is_read_again_not_answered_from_the_cache(spark, tmp_path):
    warm = WarmBases(spark)
    folder = tmp_path / "w=0000000001-a1" / TABLE
    keys = np.arange(100, dtype=np.int64)
    entry = _write_base(folder, keys, np.ones(100, dtype=np.int64))
    uri = str(folder)
    try:
        assert warm.hold("j", TABLE, uri, entry, SCHEMA) == "seen"  # a first round reads the files
        assert warm.held() == {}
        assert warm.hold("j", TABLE, uri, entry, SCHEMA) == "held"  # the second fills the cache
        assert _lookup_sum(spark, uri) == 100
        assert warm.hold("j", TABLE, uri, entry, SCHEMA) == "kept"
        # the same folder, file name, size and rows, other values (a folder written again after a reset)
        time.sleep(0.01)
        entry2 = _write_base(folder, keys, np.full(100, 2, dtype=np.int64))
        os.utime(folder / "part-0.parquet", ns=(time.time_ns(), time.time_ns() + 1_000_000))
        assert entry2 == entry
        assert warm.hold("j", TABLE, uri, entry2, SCHEMA) == "swapped"  # the old rows released
        assert warm.held() == {}
        assert _lookup_sum(spark, uri) == 200
        assert warm.hold("j", TABLE, uri, entry2, SCHEMA) == "held"
        assert _lookup_sum(spark, uri) == 200
    finally:
        warm.release("j")
    assert warm.held() == {}


def test_the_rows_kept_are_bounded_least_recently_used_released_first(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGATE_WARM_STATE_MAX_ROWS", "250")
    monkeypatch.setenv("LOCKGATE_WARM_STATE_MIN_ROWS", "20")
    warm = WarmBases(spark)
    entries = {}
    for name, rows in (("a", 100), ("b", 100), ("c", 100), ("tiny", 10)):
        folder = tmp_path / name / TABLE
        entries[name] = (str(folder), _write_base(folder, np.arange(rows, dtype=np.int64),
                                                  np.ones(rows, dtype=np.int64)))
    try:
        for job in ("a", "b"):
            assert warm.hold(job, TABLE, *entries[job], SCHEMA) == "seen"
            assert warm.hold(job, TABLE, *entries[job], SCHEMA) == "held"
        assert warm.hold("a", TABLE, *entries["a"], SCHEMA) == "kept"  # a used after b
        assert warm.hold("c", TABLE, *entries["c"], SCHEMA) == "seen"
        assert warm.hold("c", TABLE, *entries["c"], SCHEMA) == "held"  # 300 rows > 250: b goes
        assert set(warm.held()) == {("a", TABLE), ("c", TABLE)}
        assert warm.hold("tiny", TABLE, *entries["tiny"], SCHEMA) == "seen"
        assert warm.hold("tiny", TABLE, *entries["tiny"], SCHEMA) == ""  # below the smallest kept
        assert ("tiny", TABLE) not in warm.held()
    finally:
        for job in ("a", "b", "c"):
            warm.release(job)


def test_a_bad_setting_names_itself(spark, monkeypatch):
    monkeypatch.setenv("LOCKGATE_WARM_STATE_MAX_ROWS", "lots")
    with pytest.raises(InvalidArgumentError, match="LOCKGATE_WARM_STATE_MAX_ROWS='lots'"):
        WarmBases(spark)
