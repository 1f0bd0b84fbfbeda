"""Staging sink output with Spark, then committing it: every sink kind, end to end."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql import functions as F

from lockgate.api.sinks import CollectSink, FileSink, PostgresSink
from lockgate.errors import CompileError
from lockgate.runtime.committers import committer_for, read_collected
from lockgate.runtime.sinks import driver_stageable, stage_sink, stage_table

JOB = "bids"
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def window_df(spark, window: int, n: int = 5):
    """``n`` rows of window ``window``: id, name, a UTC instant ts, a price."""
    start = int((T0 + timedelta(minutes=window)).timestamp())
    return spark.range(window * 100, window * 100 + n).select(
        F.col("id"),
        F.concat(F.lit("b"), F.col("id").cast("string")).alias("name"),
        F.timestamp_seconds(F.lit(start) + F.col("id") % 100).alias("ts"),
        (F.col("id") * 0.5).alias("price"),
    )


def jobs_in_group(spark, fn) -> int:
    """Run ``fn`` and count the Spark jobs it started."""
    sc = spark.sparkContext
    group = f"lg-test-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "count jobs")
    try:
        fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def stage(df, sink, *, window, attempt=1, home, name="out", job=JOB):
    return stage_sink(
        df, sink.to_config(), job=job, sink_name=name, window=window, attempt=attempt, home=home
    )


def test_file_parquet_stage_then_commit(spark, tmp_path, lockgate_home):
    out = tmp_path / "out"
    sink = FileSink(str(out))
    holder = {}

    def run():
        holder["staged"] = stage(window_df(spark, 3), sink, window=3, attempt=2, home=lockgate_home)

    assert jobs_in_group(spark, run) == 1  # one write action; the row count rides along
    staged = holder["staged"]
    assert staged == {
        "kind": "file",
        "uri": f"{out}/_staging/{JOB}/w=0000000003-a2",
        "rows": 5,
        "format": "parquet",
        "job": JOB,
        "sink": "out",
        "window": 3,
        "attempt": 2,
        "columns": ["id", "name", "ts", "price"],
    }
    json.dumps(staged)
    assert (Path(staged["uri"]) / "_SUCCESS").exists()

    c = committer_for(sink.to_config(), lockgate_home)
    assert c.commit(JOB, "out", 3, staged)["replayed"] is False
    assert c.commit(JOB, "out", 3, staged)["replayed"] is True
    assert not Path(staged["uri"]).exists()

    # Spark reads the sink path as a data set partitioned by lg_window, skipping _staging
    leftover = stage(window_df(spark, 4), sink, window=4, home=lockgate_home)
    back = spark.read.parquet(str(out))
    assert sorted(r.id for r in back.collect()) == [300, 301, 302, 303, 304]
    assert {r.lg_window for r in back.select("lg_window").collect()} == {3}
    # pyarrow too, with instants kept as UTC microseconds
    t = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert t.num_rows == 5
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert min(t.column("ts").to_pylist()) == T0 + timedelta(minutes=3)
    c.discard(leftover)


def test_stage_overwrites_leftover_of_same_attempt(spark, tmp_path, lockgate_home):
    out = tmp_path / "out"
    sink = FileSink(str(out))
    stage(window_df(spark, 0, n=50), sink, window=0, home=lockgate_home)
    staged = stage(window_df(spark, 0, n=4), sink, window=0, home=lockgate_home)
    assert staged["rows"] == 4
    committer_for(sink.to_config(), lockgate_home).commit(JOB, "out", 0, staged)
    assert spark.read.parquet(str(out)).count() == 4


def test_file_csv_with_header_and_options(spark, tmp_path, lockgate_home):
    out = tmp_path / "csv"
    sink = FileSink(str(out), format="csv", options={"sep": "|"})
    c = committer_for(sink.to_config(), lockgate_home)
    for w in (0, 1):
        staged = stage(window_df(spark, w, n=3), sink, window=w, home=lockgate_home)
        assert staged["format"] == "csv" and staged["rows"] == 3
        c.commit(JOB, "out", w, staged)
    files = sorted((out / "lg_window=1").glob("part-*.csv"))
    assert files
    lines = [ln for f in files for ln in f.read_text().splitlines()]
    assert lines[0] == "id|name|ts|price"
    back = spark.read.option("header", "true").option("sep", "|").csv(str(out))
    assert back.count() == 6
    assert sorted(r.name for r in back.filter("lg_window = 1").collect()) == ["b100", "b101", "b102"]


def test_file_json(spark, tmp_path, lockgate_home):
    out = tmp_path / "json"
    sink = FileSink(str(out), format="json")
    staged = stage(window_df(spark, 2, n=3), sink, window=2, home=lockgate_home)
    assert staged["format"] == "json"
    committer_for(sink.to_config(), lockgate_home).commit(JOB, "out", 2, staged)
    records = [
        json.loads(ln)
        for f in sorted((out / "lg_window=2").glob("part-*.json"))
        for ln in f.read_text().splitlines()
    ]
    assert sorted(r["id"] for r in records) == [200, 201, 202]
    assert spark.read.json(str(out)).filter("lg_window = 2").count() == 3


def test_file_retract_after_restore(spark, tmp_path, lockgate_home):
    out = tmp_path / "out"
    sink = FileSink(str(out))
    c = committer_for(sink.to_config(), lockgate_home)
    for w in range(3):
        c.commit(JOB, "out", w, stage(window_df(spark, w, n=2), sink, window=w, home=lockgate_home))
    assert c.retract_after(JOB, "out", 0) == [1, 2]
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == [0, 1]


def test_collect_stage_commit_read(spark, lockgate_home):
    sink = CollectSink("top")
    c = committer_for(sink.to_config(), lockgate_home)
    for w in (1, 0):
        staged = stage(window_df(spark, w, n=2), sink, window=w, home=lockgate_home, name="sink_1")
        assert staged["uri"] == f"{lockgate_home}/staging/{JOB}/sink_1/w={w:010d}-a1"
        assert staged["format"] == "parquet" and staged["kind"] == "collect"
        c.commit(JOB, "sink_1", w, staged)
        c.commit(JOB, "sink_1", w, staged)
    t = read_collected(lockgate_home, JOB, "top")
    assert t.column("id").to_pylist() == [0, 1, 100, 101]
    assert t.column("lg_window").to_pylist() == [0, 0, 1, 1]
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_collect_empty_and_column_less_frames(spark, lockgate_home):
    sink = CollectSink("e")
    c = committer_for(sink.to_config(), lockgate_home)
    empty = stage(window_df(spark, 0).limit(0), sink, window=0, home=lockgate_home)
    assert empty["rows"] == 0
    c.commit(JOB, "out", 0, empty)
    t = read_collected(lockgate_home, JOB, "e")
    assert t.num_rows == 0 and t.column_names == ["id", "name", "ts", "price", "lg_window"]

    nocols = CollectSink("z")
    staged = stage(spark.range(7).select(), nocols, window=0, home=lockgate_home, name="z")
    assert staged["rows"] == 7 and staged["columns"] == []
    committer_for(nocols.to_config(), lockgate_home).commit(JOB, "z", 0, staged)
    assert read_collected(lockgate_home, JOB, "z").num_rows == 0


def test_postgres_stage_then_commit(spark, pg_url, lockgate_home):
    # the database is shared by the test session: a job and a table of this test's own
    job, table = f"bids_{uuid.uuid4().hex[:8]}", f"bids_out_{uuid.uuid4().hex[:8]}"
    sink = PostgresSink(pg_url, table)
    c = committer_for(sink.to_config(), lockgate_home)
    for w in (0, 1):
        staged = stage(window_df(spark, w, n=4), sink, window=w, home=lockgate_home, name="pg", job=job)
        assert staged["uri"] == f"{lockgate_home}/staging/{job}/pg/w={w:010d}-a1"
        assert staged["rows"] == 4
        assert c.commit(job, "pg", w, staged) == {"target": f"postgres:{table}", "rows": 4, "replayed": False}
        assert c.commit(job, "pg", w, staged)["replayed"] is True
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(f"SELECT id, ts, lg_window FROM {table} ORDER BY id").fetchall()
        ts_type = conn.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = %s AND column_name = 'ts'",
            (table,),
        ).fetchone()[0]
    assert ts_type == "timestamp with time zone"
    assert [r[0] for r in rows] == [0, 1, 2, 3, 100, 101, 102, 103]
    assert rows[0][1] == T0 and rows[4][1] == T0 + timedelta(minutes=1)
    assert [r[2] for r in rows] == [0] * 4 + [1] * 4
    assert c.retract_after(job, "pg", 0) == [1]
    assert c.is_committed(job, "pg", 0) and not c.is_committed(job, "pg", 1)


def test_postgres_window_column_clash_fails_at_stage(spark, pg_url, lockgate_home):
    df = window_df(spark, 0).withColumn("lg_window", F.lit(1))
    with pytest.raises(CompileError, match="already has a column 'lg_window'"):
        stage(df, PostgresSink(pg_url, "t"), window=0, home=lockgate_home, name="pg")


def test_unknown_kind_and_format(spark, tmp_path, lockgate_home):
    with pytest.raises(CompileError, match="format 'orc'"):
        stage_sink(
            window_df(spark, 0),
            {"kind": "file", "path": str(tmp_path), "format": "orc"},
            job=JOB,
            sink_name="o",
            window=0,
            attempt=1,
            home=lockgate_home,
        )
    with pytest.raises(CompileError, match="unknown sink kind 'kafka'"):
        stage_sink(
            window_df(spark, 0),
            {"kind": "kafka"},
            job=JOB,
            sink_name="k",
            window=0,
            attempt=1,
            home=lockgate_home,
        )


# -- staging from the driver ---------------------------------------------------------------
def stage_driver(df, sink, *, window, attempt=1, home, name="out", job=JOB):
    return stage_table(
        df.toArrow(), sink.to_config(), job=job, sink_name=name, window=window, attempt=attempt, home=home
    )


def test_driver_stage_reads_back_like_spark_stage(spark, tmp_path, lockgate_home):
    """A window staged from the driver and one staged by Spark sit in one sink folder and
    read back alike with Spark and pyarrow: same columns, types, nullability, rows."""
    out = tmp_path / "out"
    sink = FileSink(str(out))
    c = committer_for(sink.to_config(), lockgate_home)
    by_spark = stage(window_df(spark, 0), sink, window=0, home=lockgate_home)
    by_driver = stage_driver(window_df(spark, 1), sink, window=1, home=lockgate_home)
    assert {k: v for k, v in by_driver.items() if k not in ("uri", "window")} == {
        k: v for k, v in by_spark.items() if k not in ("uri", "window")
    }
    assert by_driver["uri"] == f"{out}/_staging/{JOB}/w=0000000001-a1"
    assert (Path(by_driver["uri"]) / "_SUCCESS").exists()
    c.commit(JOB, "out", 0, by_spark)
    c.commit(JOB, "out", 1, by_driver)

    back = spark.read.parquet(str(out))
    assert spark.read.parquet(f"{out}/lg_window=0").schema == spark.read.parquet(f"{out}/lg_window=1").schema
    assert back.columns == ["id", "name", "ts", "price", "lg_window"]
    assert sorted(r.id for r in back.collect()) == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]
    secs = {r.id: r.s for r in back.select("id", F.unix_seconds("ts").alias("s")).collect()}
    assert secs[0] == T0.timestamp() and secs[100] == (T0 + timedelta(minutes=1)).timestamp()  # both paths
    part_schemas = {str(w): ds.dataset(f"{out}/lg_window={w}").schema.remove_metadata() for w in (0, 1)}
    assert part_schemas["0"] == part_schemas["1"]


def test_driver_stage_replaces_leftover_and_refuses_other_formats(spark, tmp_path, lockgate_home):
    sink = FileSink(str(tmp_path / "out"))
    stage_driver(window_df(spark, 2, n=9), sink, window=2, home=lockgate_home)
    again = stage_driver(window_df(spark, 2, n=3), sink, window=2, home=lockgate_home)
    assert ds.dataset(again["uri"]).count_rows() == 3 and again["rows"] == 3
    assert not driver_stageable(FileSink(str(tmp_path / "csv"), format="csv").to_config())
    assert not driver_stageable(FileSink(str(tmp_path / "z"), options={"compression": "zstd"}).to_config())
    with pytest.raises(ValueError, match="cannot be staged from the driver"):
        stage_driver(window_df(spark, 0), FileSink(str(tmp_path / "csv"), format="csv"), window=0, home=lockgate_home)


def test_driver_stage_postgres_and_empty(spark, pg_url, lockgate_home):
    job, table = f"bids_{uuid.uuid4().hex[:8]}", f"bids_out_{uuid.uuid4().hex[:8]}"
    sink = PostgresSink(pg_url, table)
    c = committer_for(sink.to_config(), lockgate_home)
    staged = stage_driver(window_df(spark, 0, n=4), sink, window=0, home=lockgate_home, name="pg", job=job)
    empty = stage_driver(window_df(spark, 1).limit(0), sink, window=1, home=lockgate_home, name="pg", job=job)
    assert staged["rows"] == 4 and empty["rows"] == 0
    c.commit(job, "pg", 0, staged)
    c.commit(job, "pg", 1, empty)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(f"SELECT id, ts FROM {table} ORDER BY id").fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3] and rows[0][1] == T0
    with pytest.raises(CompileError, match="already has a column 'lg_window'"):
        stage_driver(window_df(spark, 0).withColumn("lg_window", F.lit(1)), sink, window=0, home=lockgate_home)
