"""Frames with no rows that Spark knows are empty, and rounds whose window brought no records.

An empty frame is an empty ``LocalRelation`` of exactly the schema asked for, which Spark's
optimizer prunes from what reads it (a join, an aggregation by key). A round whose window has no
file builds its frames on such reads and holds none of those Spark proves empty, so it runs a
fraction of a full round's Spark jobs; its outputs, and the rounds' after it, equal pandas'."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lockgate.api.loader import load_pipeline
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.runtime.compiler import compile_pipeline
from lockgate.runtime.cycle import CycleRunner
from lockgate.runtime.empty import empty_frame, known_empty
from lockgate.runtime.plan_template import PlanTemplate
from lockgate.runtime.results import RestorePoint

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import CYCLE_US, W0, aggregate, assert_same_rows, tumbling

SCHEMA = StructType([
    StructField("k", LongType(), False), StructField("v", LongType()),
    StructField("s", StructType([StructField("a", IntegerType()), StructField("b", ArrayType(StringType()))])),
    StructField("ts", TimestampType()),
])


def test_an_empty_frame_has_its_schema_and_spark_prunes_what_reads_it(spark, tmp_path):
    empty = empty_frame(spark, SCHEMA)
    assert empty.schema == SCHEMA  # nullability and nested fields as given
    assert empty.count() == 0
    assert empty.toArrow().schema.equals(spark.createDataFrame([], SCHEMA).toArrow().schema)

    spark.range(20).selectExpr("id as k", "id * 2 as w").write.parquet(str(tmp_path / "t"))
    table = spark.read.parquet(str(tmp_path / "t"))
    joined = table.join(empty.select("k", "v"), "k")
    by_key = empty.groupBy("k").agg(F.sum("v").alias("total"))
    assert known_empty(empty) and known_empty(joined) and known_empty(by_key)
    assert joined._jdf.queryExecution().optimizedPlan().nodeName() == "LocalRelation"
    # the scan of an empty RDD (createDataFrame's) is not known to be empty, nor is a held frame
    assert not known_empty(table.join(spark.createDataFrame([], SCHEMA).select("k", "v"), "k"))
    held = empty.persist()
    try:
        assert not known_empty(held.groupBy("k").count())
    finally:
        held.unpersist()
    assert not known_empty(table) and not known_empty(empty.groupBy().count())  # a global count has a row
    # a round template keeps it as a constant of its plan
    template = PlanTemplate.of_frames(spark, [table.join(empty.select("k"), "k")], {"t": table}, {})
    assert template.bind({"t": spark.read.parquet(str(tmp_path / "t"))}, {}).count() == 0


PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("sparse", cycle_window=timedelta(seconds=10), parallelism=2)
events = pipeline.source(lg.FileSource({root!r}, event_time="ts"), name="events")
keyed = events.key_by("k")
keyed.aggregate(n=lg.count(), total=lg.sum("v"), name="running").sink(lg.CollectSink("running"), name="running_out")
keyed.window(lg.Tumbling(timedelta(seconds=20))).aggregate(n=lg.count(), total=lg.sum("v"), name="tumbling") \\
    .sink(lg.CollectSink("tumbling"), name="tumbling_out")
events.deduplicate("k", name="dedup").sink(lg.CollectSink("dedup"), name="dedup_out")
'''
#: windows (from W0) with a file; 2 and 3 have none
DATA = (0, 1, 4)
ROUNDS = 5


@pytest.fixture(autouse=True)
def one_window_per_round(monkeypatch):
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")


def _records(root: Path) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    parts = []
    for i in DATA:
        n = 30
        ts = (W0 + i) * CYCLE_US + np.sort(rng.choice(CYCLE_US, n, replace=False))
        part = pd.DataFrame({"k": rng.integers(0, 8, n), "v": rng.integers(1, 100, n), "ts_us": ts, "cycle": W0 + i})
        pq.write_table(pa.table({"k": part["k"], "v": part["v"], "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}),
                       root / f"part-{i}.parquet")
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("after", ["2", "0"], ids=["built-step-by-step", "bound-from-templates"])
def test_a_round_with_no_records_runs_few_jobs_and_its_outputs_equal_pandas(spark, tmp_path, monkeypatch, after):
    """Windows 2 and 3 are built step by step by default; with templates kept from a shape's first
    round, window 3 is bound from the template window 2 made."""
    monkeypatch.setenv("LOCKGATE_ROUND_TEMPLATE_AFTER", after)
    root = tmp_path / "events"
    root.mkdir()
    records = _records(root)
    path = tmp_path / "sparse.py"
    path.write_text(PIPELINE.replace("{root!r}", repr(str(root))))
    plan = compile_pipeline(load_pipeline(f"{path}:pipeline"), spark)
    runner = CycleRunner(spark, plan, "sparse", str(tmp_path / "run"), SnapshotStore(tmp_path / "snapshots"))
    sc = spark.sparkContext
    restore, jobs, staged = None, {}, {}
    for window in range(W0, W0 + ROUNDS):
        group = f"sparse-{after}-{window}"
        sc.setJobGroup(group, "a round")
        try:
            result = runner.run(window, 1, restore)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        restore = RestorePoint(window, result.snapshot_uri, result.snapshot_manifest, result.positions)
        jobs[window] = len(sc.statusTracker().getJobIdsForGroup(group))
        staged[window] = {name: pq.read_table(s["uri"]).to_pandas().assign(lg_window=window)
                          for name, s in result.staged.items() if s["rows"]}

    def got(sink: str) -> pd.DataFrame:
        parts = [s[sink] for s in staged.values() if sink in s]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    # running totals of the keys each window touched (none in the windows with no file)
    running = []
    for w in range(W0, W0 + ROUNDS):
        touched = set(records.loc[records["cycle"] == w, "k"])
        totals = aggregate(records[records["cycle"] <= w], ["k"], {"n": ("count", None), "total": ("sum", "v")})
        running.append(totals[totals["k"].isin(touched)].assign(lg_window=w))
    assert_same_rows(got("running_out"), pd.concat(running), ["k", "lg_window"], what="running totals")
    # the first record of each key, in the window it came
    first = records.sort_values("ts_us").drop_duplicates("k")
    assert sorted(zip(got("dedup_out")["k"], got("dedup_out")["lg_window"], strict=True)) == sorted(
        zip(first["k"], first["cycle"], strict=True))
    # 20 s windows, each emitted in the round whose watermark reaches its end: [W0+0, W0+2) in
    # window 1, [W0+2, W0+4) (no records) nowhere, [W0+4, ...) not yet
    closed = aggregate(tumbling(records, 2 * CYCLE_US), ["k", "window_start"], {"n": ("count", None),
                                                                              "total": ("sum", "v")})
    closed = closed[closed["window_start"] < (W0 + 2) * CYCLE_US]
    tumbled = got("tumbling_out")
    assert sorted(tumbled["lg_window"].unique()) == [W0 + 1]
    assert sorted(zip(tumbled["k"], tumbled["n"], tumbled["total"], strict=True)) == sorted(
        zip(closed["k"], closed["n"], closed["total"], strict=True))
    # a window with no file runs a fraction of a full round's jobs: nothing it holds is computed
    assert jobs[W0 + 2] <= 2 and jobs[W0 + 3] <= 2, jobs
    assert jobs[W0 + 2] < jobs[W0 + 1], jobs
