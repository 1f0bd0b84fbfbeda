"""The cycle runner's write paths: a round's small output and state go through the driver
(collected with ``toArrow``, one Parquet file each), sized by the last round's rows or, in a
runner's first round, by the round's input when the driver counted it (else that first round
measures them through Spark); large ones, and every round with the driver paths off, through
Spark's writers. Both paths give the same committed output. And a round runs the ExecutionGraph
(the plan ``explain`` prints), in its order, or refuses one it cannot run."""

from __future__ import annotations

import copy
import dataclasses
import glob
import re
from datetime import timedelta

import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.client.embedded import EmbeddedClient
from lockgate.errors import CompileError, InvalidArgumentError
from lockgate.plan import CompiledPlan, explain
from lockgate.runtime.compiler import compile_pipeline
from lockgate.runtime.cycle import CycleRunner, driver_rows, packed
from lockgate.runtime.sinks import driver_writable

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
WINDOWS = 4
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"  # only Spark's writer adds it

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("paths", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=300, seed=5, start="2026-01-01T00:00:00"), name="bids"
)
(bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))  # spans two cycles
     .aggregate(bids=lg.count(), top=lg.max("price"), name="per_auction")  # state carried
     .sink(lg.FileSink({out!r}), name="out"))
'''


@pytest.fixture(autouse=True)
def one_window_per_round(monkeypatch):
    """These tests watch how each single round stages its output; a catch-up group (several
    windows in one Spark job) stages differently by design, so it is off here."""
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")


def _run(tmp_path, name: str, windows: int = WINDOWS) -> str:
    out = tmp_path / name / "out"
    path = tmp_path / name / "paths.py"
    path.parent.mkdir(parents=True)
    path.write_text(PIPELINE.format(out=str(out)))
    client = EmbeddedClient(home=str(tmp_path / name / "home"))
    try:
        assert client.run(f"{path}:pipeline", first=FIRST, last=FIRST + windows - 1).state == "FINISHED"
    finally:
        client.close()
    return str(out)


def _written_by_spark(out: str, window: int) -> bool:
    files = glob.glob(f"{out}/lg_window={window}/*.parquet")
    assert len(files) >= 1
    return all(SPARK_SCHEMA_KEY in (pq.read_schema(f).metadata or {}) for f in files)


def _emitting(out: str) -> list[int]:
    return sorted({int(p.rsplit("=", 1)[1]) for p in glob.glob(f"{out}/lg_window=*")})


def _rows(out: str) -> list[tuple]:
    t = pq.read_table(out)
    return sorted(zip(*(t[c].to_pylist() for c in ("lg_window", "auction", "bids", "top")), strict=True))


def test_small_rounds_stage_from_the_driver_from_the_first_when_the_driver_counted_its_input(tmp_path, spark):
    out = _run(tmp_path, "driver")  # the generator's records are made, and counted, on the driver
    windows = _emitting(out)
    assert windows == list(range(FIRST, FIRST + WINDOWS))  # every round commits (maybe no rows)
    assert not any(_written_by_spark(out, w) for w in windows)
    snapshots = glob.glob(f"{tmp_path}/driver/home/**/per_auction.main/*.parquet", recursive=True)
    assert snapshots and all(f.endswith("part-00000-driver.parquet") for f in snapshots)


CSV_PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("csv_paths", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(lg.FileSource({src!r}, format="csv", schema="auction BIGINT, price BIGINT, ts TIMESTAMP",
                                     event_time="ts"), name="bids")
(bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))
     .aggregate(bids=lg.count(), top=lg.max("price"), name="per_auction")
     .sink(lg.FileSink({out!r}), name="out"))
'''


def test_a_first_round_whose_input_spark_counts_measures_through_spark(tmp_path, spark):
    """A CSV file's records are counted by the round's own Spark job, so the runner's first round
    has no size to go by: it goes through Spark's writers, and the rounds after it through the
    driver. The output is the aggregate pandas computes over the same file."""
    import pandas as pd

    start = pd.Timestamp(FIRST * 5, unit="s")
    rows = [(a % 7, (a * 37) % 101, start + pd.Timedelta(milliseconds=a * 97)) for a in range(200)]  # 19.4 s
    src = tmp_path / "bids"
    src.mkdir()
    frame = pd.DataFrame(rows, columns=["auction", "price", "ts"])
    frame.assign(ts=frame.ts.dt.strftime("%Y-%m-%d %H:%M:%S.%f")).to_csv(src / "bids.csv", index=False)
    out = tmp_path / "out"
    path = tmp_path / "csv_paths.py"
    path.write_text(CSV_PIPELINE.format(src=str(src), out=str(out)))
    client = EmbeddedClient(home=str(tmp_path / "home"))
    try:
        assert client.run(f"{path}:pipeline", first=FIRST, last=FIRST + WINDOWS - 1).state == "FINISHED"
    finally:
        client.close()
    windows = _emitting(str(out))
    assert windows == list(range(FIRST, FIRST + WINDOWS))
    assert _written_by_spark(str(out), FIRST)
    assert not any(_written_by_spark(str(out), w) for w in windows[1:])
    got = pq.read_table(str(out)).to_pandas()
    frame["window_start"] = frame.ts.dt.floor("10s")
    want = frame.groupby(["window_start", "auction"]).agg(bids=("price", "size"), top=("price", "max")).reset_index()
    assert len(want) == 14  # two 10 s windows, each with all 7 auctions
    got_rows = sorted((pd.Timestamp(r.window_start).tz_localize(None), r.auction, r.bids, r.top)
                      for r in got.itertuples())
    assert got_rows == sorted((r.window_start, r.auction, r.bids, r.top) for r in want.itertuples())


def test_driver_paths_off_give_the_same_output(tmp_path, spark, monkeypatch):
    driver_out = _run(tmp_path, "driver")
    monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", "0")
    monkeypatch.setenv("LOCKGATE_DRIVER_SNAPSHOT_ROWS", "0")
    spark_out = _run(tmp_path, "spark")
    assert all(_written_by_spark(spark_out, w) for w in _emitting(spark_out))
    assert not glob.glob(f"{tmp_path}/spark/home/**/part-00000-driver.parquet", recursive=True)
    expected = _rows(spark_out)
    assert len(expected) > 50
    assert _rows(driver_out) == expected


def test_a_sink_over_the_limit_stays_on_spark(tmp_path, spark, monkeypatch):
    monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", "1")
    out = _run(tmp_path, "big")
    assert _written_by_spark(out, FIRST)  # a first round whose counted input is over the limit too
    rows = {w: pq.read_table(f"{out}/lg_window={w}").num_rows for w in _emitting(out)}
    after_big = [w for w in rows if rows.get(w - 1, 0) > 1]  # the round before staged over the limit
    assert after_big and all(_written_by_spark(out, w) for w in after_big)


def test_a_group_too_large_for_one_collect_stages_in_packs_from_the_driver(tmp_path, spark, monkeypatch):
    # reference: one window per round, every output written by Spark
    monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", "0")
    monkeypatch.setenv("LOCKGATE_DRIVER_SNAPSHOT_ROWS", "0")
    windows = 12
    spark_out = _run(tmp_path, "spark", windows)
    per_window = [pq.read_table(f"{spark_out}/lg_window={w}").num_rows for w in range(FIRST, FIRST + windows)]
    limit = max(per_window) * 3 // 2
    # every window fits the driver path on its own, no group of 4 does: the first group counts
    # each window's rows, the next ones pack by the last group's largest window
    assert all(sum(per_window[i:i + 4]) > limit for i in range(0, windows, 4)), per_window
    monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", str(limit))
    monkeypatch.delenv("LOCKGATE_DRIVER_SNAPSHOT_ROWS")
    monkeypatch.setenv("LOCKGATE_CATCHUP", "4")
    packed_out = _run(tmp_path, "packs", windows)
    assert _emitting(packed_out) == list(range(FIRST, FIRST + windows))
    assert not any(_written_by_spark(packed_out, w) for w in _emitting(packed_out))
    assert _rows(packed_out) == _rows(spark_out)


def test_packs_of_windows_for_the_driver():
    assert packed([1, 2, 3, 4, 5], [40, 40, 30, 500, 10], 100) == [[1, 2], [3], [5]]
    assert packed([7, 8, 9], [0, 0, 0], 1) == [[7, 8, 9]]  # empty windows cost nothing
    assert packed([1, 2], [101, 101], 100) == []  # each window is Spark's to write
    assert packed([1, 2, 3], [100, 1, 100], 100) == [[1], [2], [3]]


def test_driver_row_settings_are_checked(monkeypatch):
    monkeypatch.delenv("LOCKGATE_DRIVER_STAGE_ROWS", raising=False)
    assert driver_rows("LOCKGATE_DRIVER_STAGE_ROWS") == 200_000
    monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", " 5000 ")
    assert driver_rows("LOCKGATE_DRIVER_STAGE_ROWS") == 5000
    for bad in ("lots", "-1", "1e5"):
        monkeypatch.setenv("LOCKGATE_DRIVER_STAGE_ROWS", bad)
        with pytest.raises(InvalidArgumentError, match="LOCKGATE_DRIVER_STAGE_ROWS=.*whole number of rows"):
            driver_rows("LOCKGATE_DRIVER_STAGE_ROWS")


def test_driver_writable_types():
    from pyspark.sql.types import StructType

    plain = StructType.fromDDL(
        "a BIGINT, b DECIMAL(20, 4), c STRING, d TIMESTAMP, e TIMESTAMP_NTZ, f ARRAY<STRUCT<x: DATE, y: BINARY>>, "
        "g MAP<STRING, DOUBLE>, h TINYINT, i BOOLEAN"
    )
    assert driver_writable(plain)
    for ddl in ("v VARIANT", "a ARRAY<VARIANT>", "i INTERVAL DAY TO SECOND", "s STRUCT<m: MAP<STRING, VARIANT>>"):
        assert not driver_writable(StructType.fromDDL(ddl)), ddl


VARIANT_PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("variants", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=50, seed=5, start="2026-01-01T00:00:00"), name="bids"
)
(bids.select("auction", "parse_json(to_json(named_struct('price', price))) AS doc", name="docs")
     .sink(lg.FileSink({out!r}), name="out"))
'''


def test_a_variant_sink_stays_on_spark_and_reads_back_as_variant(tmp_path, spark):
    out = tmp_path / "out"
    path = tmp_path / "variants.py"
    path.write_text(VARIANT_PIPELINE.format(out=str(out)))
    client = EmbeddedClient(home=str(tmp_path / "home"))
    try:
        assert client.run(f"{path}:pipeline", first=FIRST, last=FIRST + 2).state == "FINISHED"
    finally:
        client.close()
    windows = _emitting(str(out))
    assert len(windows) == 3 and all(_written_by_spark(str(out), w) for w in windows)
    back = spark.read.parquet(str(out))
    assert back.schema["doc"].dataType.typeName() == "variant"
    assert back.count() == 3 * 5 * 50 * 46 // 50  # every bid once (46 of 50 events are bids)


# -- the ExecutionGraph is what runs ------------------------------------------------------

def _fan_out() -> lg.Pipeline:
    """One source read by two branches, each with its sink: three groups, the source's
    output materialised for the round."""
    p = lg.Pipeline("fanout", cycle_window=timedelta(seconds=5), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", events_per_second=200, seed=5, start="2026-01-01T00:00:00"), name="bids")
    bids.filter("price > 1000", name="big").sink(lg.CollectSink("big"), name="big_out")
    bids.filter("price <= 1000", name="small").sink(lg.CollectSink("small"), name="small_out")
    return p


def _explained_order(text: str) -> list[str]:
    """The operators in the order ``explain`` prints the physical plan."""
    physical = text.split("Physical plan (ExecutionGraph)")[1].split("State layout")[0]
    ops: list[str] = []
    for line in physical.splitlines():
        m = re.match(r"\s+chain_\d+\s+p=\d+: (.+)$", line)
        if m:
            ops += m.group(1).split(" -> ")
    return ops


def _runner(spark, plan: CompiledPlan, tmp_path, name: str) -> CycleRunner:
    return CycleRunner(spark, plan, name, str(tmp_path / name), SnapshotStore(tmp_path / name / "snapshots"))


def _with_groups(plan: CompiledPlan, groups: list[str], tails: list[str] | None = None) -> CompiledPlan:
    """``plan`` with its cycle's groups (and tails) replaced: a hand-modified ExecutionGraph."""
    execution = copy.deepcopy(plan.execution)
    execution.cycles[0].groups = groups
    execution.cycles[0].tails = tails or execution.cycles[0].tails
    return dataclasses.replace(plan, execution=execution)


def test_a_round_runs_the_execution_graph_explain_prints(tmp_path, spark):
    plan = compile_pipeline(_fan_out(), spark)
    assert plan.execution.cycles[0].groups == ["group_1", "group_2", "group_3"]
    assert plan.execution.groups["group_1"].materialized == ["bids"]
    runner = _runner(spark, plan, tmp_path, "planned")
    result = runner.run(FIRST, 1, None)
    assert runner.run_order == ["bids", "big", "big_out", "small", "small_out"]
    assert runner.run_order == _explained_order(explain(plan)) == plan.execution.execution_order()
    assert list(result.staged) == ["big_out", "small_out"]  # the tails, in the order they ran

    # the same plan with its two branch groups swapped (still a topological order) and its
    # tails reordered: the round runs, and stages, in the new order, with the same output
    swapped = _with_groups(plan, ["group_1", "group_3", "group_2"], tails=["small_out", "big_out"])
    assert "tails: small_out (stage output), big_out (stage output)" in explain(swapped)
    runner = _runner(spark, swapped, tmp_path, "swapped")
    again = runner.run(FIRST, 1, None)
    assert runner.run_order == ["bids", "small", "small_out", "big", "big_out"]
    assert runner.run_order == _explained_order(explain(swapped))
    assert list(again.staged) == ["small_out", "big_out"]
    assert {k: v["rows"] for k, v in again.staged.items()} == {k: v["rows"] for k, v in result.staged.items()}
    assert again.rows_in == result.rows_in > 0


def test_a_runner_refuses_an_execution_graph_it_cannot_run(tmp_path, spark):
    plan = compile_pipeline(_fan_out(), spark)
    with pytest.raises(CompileError, match=r"group_2 of cycle_1 runs 'big' before its input 'bids'.*topological"):
        _runner(spark, _with_groups(plan, ["group_2", "group_1", "group_3"]), tmp_path, "early")
    with pytest.raises(CompileError, match=r"operators small, small_out are in no group"):
        _runner(spark, _with_groups(plan, ["group_1", "group_2"]), tmp_path, "dropped")
    streamless = copy.deepcopy(plan.execution)
    streamless.cycles[0].mode = "iterator"
    with pytest.raises(CompileError, match=r"cycle_1 is a top-level 'iterator' cycle: only 'stream' cycles run rounds"):
        _runner(spark, dataclasses.replace(plan, execution=streamless), tmp_path, "iterator")


def test_a_small_round_collects_its_state_and_output_in_one_spark_job(tmp_path, spark):
    """A round whose state delta and sink output both go through the driver (from the first
    round: the generator's records are counted on the driver) computes and collects them with one Spark action
    (its jobs: the broadcasts its plan needs, then the collect), not one action each. The
    round's jobs are found by their job group, and the action that started each by the call
    site Spark names its stages after."""
    from lockgate.api.loader import load_pipeline
    from lockgate.runtime.results import RestorePoint

    path = tmp_path / "paths.py"
    path.write_text(PIPELINE.format(out=str(tmp_path / "out")))
    runner = _runner(spark, compile_pipeline(load_pipeline(f"{path}:pipeline"), spark), tmp_path, "one_job")
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    actions, rows, restore = [], [], None
    for i, window in enumerate(range(FIRST, FIRST + WINDOWS)):
        sc.setJobGroup(f"one-job-{i}", "a round")
        try:
            result = runner.run(window, 1, restore)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(f"one-job-{i}")
                  for s in tracker.getJobInfo(j).stageIds]
        actions.append({s.name for s in stages if s is not None})
        restore = RestorePoint(window, result.snapshot_uri, result.snapshot_manifest, result.positions)
        rows.append(result.staged["out"]["rows"])
        assert result.snapshot_manifest["per_auction.main"]["layers"]
    assert sum(rows[1:]) > 0
    for names in actions:
        assert len(names) == 1 and re.search(r"^toArrow at .*lockgate/runtime/one_job\.py:\d+$", *names), names
