"""Layered state read back: a base and a chain of deltas merge to each identity's newest row
(a tombstone hides it, the horizon drops old rows), checked against pandas applying the same
layers in order; every delta of the chain is one Parquet read in the plan, however many."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from lockgate.runtime.state.layers import DELETED, LayeredState

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType()), StructField("t", LongType())])
WITH_FLAG = StructType([*SCHEMA.fields, StructField(DELETED, BooleanType())])
#: a tombstone's horizon column: above every horizon (in the operators' tables the horizon
#: column is part of the identity, which a tombstone carries)
TOMBSTONE_T = 1000

#: (rows (k, v, t), tombstoned keys) per layer, oldest first; the first is the base
LAYERS = [
    ([(k, f"base{k}", k) for k in range(10)], []),
    ([(1, "d1", 20), (2, "d1", 20), (10, "d1", 20)], []),
    ([(2, "d2", 30)], [3, 10]),
    ([(3, "d3", 40), (4, "d3", 1)], [5]),
    ([(10, "d4", 50)], [1]),
]


def _write(spark, tmp_path: Path) -> list[tuple[str, bool]]:
    folders = []
    for i, (rows, dead) in enumerate(LAYERS):
        uri = str(tmp_path / f"w={i:010d}-a1" / "op.main")
        if i == 0:
            spark.createDataFrame(rows, SCHEMA).write.parquet(uri)
        else:
            flagged = [(*r, False) for r in rows] + [(k, None, TOMBSTONE_T, True) for k in dead]
            spark.createDataFrame(flagged, WITH_FLAG).coalesce(1).write.parquet(uri)
        folders.append((f"file://{uri}", i > 0))
    return folders


def _expected(horizon: int | None) -> pd.DataFrame:
    live: dict[int, tuple] = {}
    for rows, dead in LAYERS:
        for r in rows:
            live[r[0]] = r
        for k in dead:
            live.pop(k, None)
    df = pd.DataFrame(list(live.values()), columns=["k", "v", "t"])
    if horizon is not None:
        df = df[df["t"] >= horizon]
    return df.sort_values("k").reset_index(drop=True)


def _rows(df) -> pd.DataFrame:
    return df.toPandas().sort_values("k").reset_index(drop=True).astype({"k": "int64", "t": "int64"})


@pytest.mark.parametrize("horizon", [None, 10])
def test_the_chain_merges_to_each_identitys_newest_row(spark, tmp_path, horizon):
    layers = _write(spark, tmp_path)
    state = LayeredState(spark, SCHEMA, layers, None if horizon is None else ("t", horizon))
    expected = _expected(horizon)
    pd.testing.assert_frame_equal(_rows(state.select(("k",))), expected)
    keys = spark.createDataFrame([(1,), (2,), (3,), (5,), (10,), (99,)], "k long")
    looked_up = _rows(state.lookup(("k",), keys, ["k"]))
    pd.testing.assert_frame_equal(looked_up, expected[expected["k"].isin([1, 2, 3, 5, 10, 99])].reset_index(drop=True))


def test_every_delta_is_one_read(spark, tmp_path):
    state = LayeredState(spark, SCHEMA, _write(spark, tmp_path), None)
    plan = state.select(("k",))._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("Relation [") == 2, plan  # the base, and the four deltas together


def test_a_chain_of_deltas_alone_and_in_memory_layers_on_top(spark, tmp_path):
    layers = _write(spark, tmp_path)[1:]  # a chain without a base (a folded delta's inputs)
    state = LayeredState(spark, SCHEMA, layers, None)
    live: dict[int, tuple] = {}
    for rows, dead in LAYERS[1:]:
        live.update({r[0]: r for r in rows})
        for k in dead:
            live.pop(k, None)
    expected = pd.DataFrame(sorted(live.values()), columns=["k", "v", "t"])
    pd.testing.assert_frame_equal(_rows(state.select(("k",))), expected)


def test_a_chain_under_a_folder_whose_name_spark_encodes(spark, tmp_path):
    # Spark reports a file's path URL-encoded (a space as %20, '%' as %25); a row's layer is found
    # from the last two folders alone, so a home folder named like this still ranks every row
    layers = _write(spark, tmp_path / "Jane Doe's 100% home")
    state = LayeredState(spark, SCHEMA, layers, None)
    pd.testing.assert_frame_equal(_rows(state.select(("k",))), _expected(None))


def test_lookups_by_the_same_keys_under_other_names_broadcast_them_once(spark, tmp_path):
    """Two tables looked up by one keys frame, each under its own column name (``keys_on``:
    the keys' columns, ``on``: the table's), find the same rows as a lookup by keys of the
    table's own names, and their round's plan broadcasts the keys once and reuses the broadcast:
    what lets an interval join's two state lookups and the aggregate over it share one job."""
    layers = _write(spark, tmp_path / "a")
    left = LayeredState(spark, SCHEMA, layers, None)
    right = LayeredState(spark, StructType([StructField("id", LongType()), *SCHEMA.fields[1:]]),
                         _renamed_layers(spark, tmp_path / "b"), None)
    keys = spark.createDataFrame([(1,), (2,), (3,), (5,), (10,), (99,)], "key long")
    from_left = left.lookup(("k",), keys, ["k"], keys_on=["key"])
    from_right = right.lookup(("id",), keys, ["id"], keys_on=["key"])
    expected = _expected(None)
    expected = expected[expected["k"].isin([1, 2, 3, 5, 10, 99])].reset_index(drop=True)
    pd.testing.assert_frame_equal(_rows(from_left), expected)
    pd.testing.assert_frame_equal(_rows(from_right.withColumnRenamed("id", "k")), expected)
    both = from_left.unionByName(from_right.withColumnRenamed("id", "k"))
    plan = both._jdf.queryExecution().executedPlan().toString()
    lines = plan.splitlines()
    # each table's base and deltas are semi-joined with the keys: four uses, one broadcast
    assert sum("BroadcastExchange" in ln and "ReusedExchange" not in ln for ln in lines) == 1, plan
    assert sum("ReusedExchange" in ln for ln in lines) == 3, plan


def _renamed_layers(spark, tmp_path: Path) -> list[tuple[str, bool]]:
    """The layers of :data:`LAYERS` with the key column named ``id``."""
    folders = []
    for i, (uri, is_delta) in enumerate(_write(spark, tmp_path)):
        out = str(tmp_path / "renamed" / f"w={i:010d}-a1" / "op.main")
        spark.read.parquet(uri).withColumnRenamed("k", "id").coalesce(1).write.parquet(out)
        folders.append((f"file://{out}", is_delta))
    return folders


@pytest.mark.parametrize("split", [True, False], ids=["equality-and-nulls-apart", "null-safe"])
def test_a_lookup_matches_null_keys_to_null_keys_joined_either_way(spark, tmp_path, split):
    """A large table's lookups, its base warm, join rows without a null key by equality and the
    rows with one null-safely (``_split_semi``); a small table's join null-safely throughout. Both give the
    same rows, nulls matching nulls, over a base and a delta that replaces a null-keyed row."""
    schema = StructType([StructField("a", LongType()), StructField("b", StringType()), StructField("v", LongType())])
    base = [(1, "x", 10), (1, None, 11), (None, "y", 12), (None, None, 13), (2, "x", 14)]
    delta = [(None, None, 23, False), (2, "x", None, True)]
    base_uri, delta_uri = str(tmp_path / "w=0000000001-a1" / "op.main"), str(tmp_path / "w=0000000002-a1" / "op.main")
    spark.createDataFrame(base, schema).write.parquet(base_uri)
    spark.createDataFrame(delta, StructType([*schema.fields, StructField(DELETED, BooleanType())])).write.parquet(
        delta_uri)
    state = LayeredState(spark, schema, [(f"file://{base_uri}", False), (f"file://{delta_uri}", True)], None,
                         rows=len(base) + len(delta), split=split)
    keys = spark.createDataFrame([(None, None), (1, None), (2, "x"), (3, "z")], "a long, b string")
    plan = state.lookup(("a", "b"), keys, ["a", "b"])
    got = sorted(((r.a, r.b, r.v) for r in plan.collect()), key=repr)
    assert got == sorted([(None, None, 23), (1, None, 11)], key=repr)
    joins = plan._jdf.queryExecution().optimizedPlan().toString().count("LeftSemi")
    assert joins == (4 if split else 2), plan._jdf.queryExecution().optimizedPlan().toString()
