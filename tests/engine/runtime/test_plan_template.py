"""PlanTemplate: a plan built and analysed once, bound to each round's files and bounds, gives
what pandas gives over those files; bad templates and binds are refused with what to change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from lockgate.runtime.plan_template import FIRST_SENTINEL, PlanTemplate, TemplateError

SCHEMA = "k long, v long"
STATE = "k long, total long"


def _write(folder: Path, frame: pd.DataFrame) -> str:
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / "part-0.parquet")
    return str(folder)


def _round(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({"k": rng.integers(0, 40, n), "v": rng.integers(-50, 1000, n)})


def _merge(inputs, params):
    """A round of a running sum: the window's rows at or above the bound, summed per key, merged
    with the state's rows of the keys it touched (a self-join of the window: its keys)."""
    rows = inputs["rows"].filter(F.col("v") >= params["low"])
    new = rows.groupBy("k").agg(F.sum("v").alias("total"))
    touched = inputs["state"].join(rows.select("k").distinct(), "k", "left_semi")
    merged = touched.unionByName(new).groupBy("k").agg(F.sum("total").alias("total"))
    # a parameter in a projection as well as in a filter, and the file a row came from
    return merged.withColumn("as_of", params["as_of"] + F.lit(0)).join(
        inputs["rows"].select("k", F.col("_metadata.file_path").alias("file")).distinct(), "k")


def _expected(rows: pd.DataFrame, state: pd.DataFrame, low: int, as_of: int, file: str) -> pd.DataFrame:
    kept = rows[rows.v >= low]
    new = kept.groupby("k", as_index=False).v.sum().rename(columns={"v": "total"})
    touched = state[state.k.isin(kept.k)]
    merged = pd.concat([touched, new]).groupby("k", as_index=False).total.sum()
    merged = merged[merged.k.isin(rows.k)]
    return merged.assign(as_of=as_of, file=file).sort_values("k").reset_index(drop=True)


def _got(df) -> pd.DataFrame:
    got = df.toPandas().sort_values("k").reset_index(drop=True)
    got["file"] = got["file"].str.replace("file:", "", regex=False)
    return got[["k", "total", "as_of", "file"]].astype({"k": "int64", "total": "int64", "as_of": "int64"})


def test_a_template_bound_to_each_rounds_files_and_bounds_equals_pandas(spark, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    reads = lambda folder, schema: spark.read.schema(schema).parquet(folder)  # noqa: E731
    rounds = []
    for i in range(4):
        rows, state = _round(rng, 300), pd.DataFrame({"k": np.arange(0, 40, 2), "total": rng.integers(0, 99, 20)})
        rounds.append((rows, state, _write(tmp_path / f"rows{i}", rows), _write(tmp_path / f"state{i}", state)))
    rows0, state0, rows_dir, state_dir = rounds[0]
    template = PlanTemplate.build(spark, _merge, {"rows": reads(rows_dir, SCHEMA), "state": reads(state_dir, STATE)},
                                  ["low", "as_of"])
    # every read of the window is rebound: its rows, its keys and its files (a self-join's copy)
    assert sorted(name for _, name, _ in template.reads[0]) == ["rows", "rows", "rows", "state"]
    for i, (rows, state, rows_dir, state_dir) in enumerate(rounds):
        low, as_of = 100 * i, 1_767_225_600_000_000 + i  # a small bound (an INT in Py4J) and a timestamp
        bound = template.bind({"rows": reads(rows_dir, SCHEMA), "state": reads(state_dir, STATE)},
                              {"low": low, "as_of": as_of})
        want = _expected(rows, state, low, as_of, f"{rows_dir}/part-0.parquet")
        pd.testing.assert_frame_equal(_got(bound), want, check_dtype=False)
        assert str(FIRST_SENTINEL) not in bound._jdf.queryExecution().optimizedPlan().toString()
    # the template's own frame is untouched: a second bind of round 0 gives round 0 again
    again = template.bind({"rows": reads(rounds[0][2], SCHEMA), "state": reads(rounds[0][3], STATE)},
                          {"low": 0, "as_of": 1})
    pd.testing.assert_frame_equal(_got(again), _expected(rows0, state0, 0, 1, f"{rounds[0][2]}/part-0.parquet"),
                                  check_dtype=False)


def test_bad_templates_and_binds_say_what_to_change(spark, tmp_path: Path) -> None:
    folder = _write(tmp_path / "rows", _round(np.random.default_rng(1), 20))
    read = spark.read.schema(SCHEMA).parquet(folder)
    with pytest.raises(TemplateError, match="plain file read"):
        PlanTemplate.build(spark, lambda i, p: i["rows"], {"rows": read.filter("v > 0")})
    with pytest.raises(TemplateError, match="read the same files"):
        PlanTemplate.build(spark, lambda i, p: i["a"], {"a": read, "b": read})
    with pytest.raises(TemplateError, match="'other' is not read"):
        other = spark.read.schema(SCHEMA).parquet(_write(tmp_path / "other", _round(np.random.default_rng(2), 5)))
        PlanTemplate.build(spark, lambda i, p: i["rows"], {"rows": read, "other": other})
    with pytest.raises(TemplateError, match="parameter 'low' is not in"):
        PlanTemplate.build(spark, lambda i, p: i["rows"].filter(F.col("v") > 0), {"rows": read}, ["low"])
    template = PlanTemplate.build(spark, lambda i, p: i["rows"].filter(F.col("v") >= p["low"]), {"rows": read}, ["low"])
    with pytest.raises(TemplateError, match="bind needs inputs"):
        template.bind({"rows": read}, {})
    with pytest.raises(TemplateError, match="is not a plain file read of the schema"):
        template.bind({"rows": spark.read.schema("k long, v string").parquet(folder)}, {"low": 1})
    assert template.bind({"rows": read}, {"low": 500}).count() == int((pq.read_table(folder).to_pandas().v >= 500).sum())
