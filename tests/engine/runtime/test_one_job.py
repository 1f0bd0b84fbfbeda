"""collect_together: several DataFrames from one Spark job, each unpacked into exactly the
table its own ``toArrow`` gives (columns, types, nullability, values)."""

from __future__ import annotations

from pyspark.sql import functions as F

from lockgate.runtime.one_job import collect_together, packable

ROWS = """
select id, cast(id as string) as `a.b`, timestamp_micros(id * 1000000) as ts,
       date_add(date'2026-01-01', cast(id as int)) as d, cast(id / 3 as decimal(10, 2)) as dec,
       array(id, null) as arr, map('k', id) as m, named_struct('x', id, 't', timestamp_micros(id)) as st,
       array(named_struct('y', id)) as structs, cast(null as string) as nothing,
       cast(cast(id as string) as binary) as bin, id % 2 = 0 as even, cast(id as double) / 7 as ratio,
       named_struct('x.y', id, 'a`b', map(cast(id as string), array(id))) as `odd``name`
from range(5)
"""


def test_each_frame_comes_back_as_its_own_to_arrow(spark):
    wide = spark.sql(ROWS)  # nested, non-nullable fields beside nullable ones, names to quote
    keys = spark.range(3).select(F.col("id").alias("k"), F.lit("z").alias("v"))
    none = keys.filter("k > 10")
    frames = [wide, keys, none, wide.filter("id >= 3")]
    got = collect_together(frames)
    for frame, table in zip(frames, got, strict=True):
        want = frame.toArrow()
        assert table.schema.equals(want.schema), (table.schema, want.schema)
        assert table.equals(want)
    assert [t.num_rows for t in got] == [5, 3, 0, 2]


def test_frames_sharing_a_cached_frame_are_computed_once_in_one_job(spark):
    sc = spark.sparkContext
    counted = spark.range(1000).groupBy((F.col("id") % 10).alias("g")).count().persist()
    try:
        frames = [counted.filter("g < 5"), counted.select("g", (F.col("count") * 2).alias("twice"))]
        sc.setJobGroup("collect-together", "one collect")
        try:
            small, doubled = collect_together(frames)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        assert len(sc.statusTracker().getJobIdsForGroup("collect-together")) == 1
        assert sorted(small["g"].to_pylist()) == [0, 1, 2, 3, 4] and set(small["count"].to_pylist()) == {100}
        assert set(doubled["twice"].to_pylist()) == {200} and doubled.num_rows == 10
    finally:
        counted.unpersist()


def test_only_frames_with_distinct_column_names_are_packable(spark):
    a = spark.range(2)
    assert packable(a)
    assert not packable(a.select("id", F.col("id")))
    assert not packable(a.select())


def test_the_union_runs_its_last_stage_in_at_most_tasks_tasks(spark):
    """Every task of the union's last stage deserialises the whole union's plan: a round of many
    operators (dozens of frames, a partition or two each) ran one such task per partition."""
    sc = spark.sparkContext
    frames = [spark.range(0, 40, 1, 4).select((F.col("id") * i).alias(f"c{i}")) for i in range(6)]
    sc.setJobGroup("collect-coalesced", "one collect in two tasks")
    try:
        got = collect_together(frames, tasks=2)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    (job,) = sc.statusTracker().getJobIdsForGroup("collect-coalesced")
    stages = [sc.statusTracker().getStageInfo(s) for s in sc.statusTracker().getJobInfo(job).stageIds]
    assert [s.numTasks for s in stages if s is not None] == [2]  # 24 partitions, two tasks
    for i, (frame, table) in enumerate(zip(frames, got, strict=True)):
        assert table.equals(frame.toArrow()), i  # same rows, same order
        assert table[f"c{i}"].to_pylist() == [n * i for n in range(40)]
