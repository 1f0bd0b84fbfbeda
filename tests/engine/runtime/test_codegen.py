"""Code generation per round: small rounds run interpreted (no Java compiled for them), the
session's settings come back after the round, and the setting's bad values are refused."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from lockgate.errors import InvalidArgumentError
from lockgate.runtime.codegen import DEFAULT_CODEGEN_ROWS, codegen_rows, round_codegen
from lockgate.runtime.settings import within as interpreted


def _compiled(spark) -> int:
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


def _round(spark, bound: int) -> list:
    # a new bound is a new literal in the generated code: a query Spark must compile again
    df = spark.range(2000).withColumn("k", F.col("id") % 7)
    return sorted(df.filter(F.col("id") > F.lit(bound)).groupBy("k").agg(F.max("id").alias("m")).collect())


def test_a_small_round_compiles_nothing_and_gives_the_same_rows(spark):
    with_codegen = _round(spark, 1000)
    before = _compiled(spark)
    assert _round(spark, 1001)
    compiled_per_bound = _compiled(spark) - before
    assert compiled_per_bound >= 2  # Spark compiles each new bound's stages again
    before = _compiled(spark)
    with round_codegen(spark, interpret=True):
        without = _round(spark, 1000)
        assert _round(spark, 1002) and _round(spark, 1003)
    # the result's conversion to Python rows may still compile one projection, once
    assert _compiled(spark) - before <= 1 < compiled_per_bound, (_compiled(spark) - before, compiled_per_bound)
    assert without == with_codegen


def test_the_session_settings_come_back_after_the_round(spark):
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    with round_codegen(spark, interpret=True):
        assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
        assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    with pytest.raises(RuntimeError, match="inside"), round_codegen(spark, interpret=True):
        raise RuntimeError("a failure inside the round")
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"


def test_which_rounds_run_interpreted(monkeypatch):
    assert interpreted(10, 100) and interpreted(100, 100)
    assert not interpreted(101, 100)
    assert not interpreted(None, 100)  # a runner's first round: its size is not known
    assert not interpreted(0, 0)  # 0: code generation for every round
    monkeypatch.delenv("LOCKGATE_CODEGEN_ROWS", raising=False)
    assert codegen_rows() == DEFAULT_CODEGEN_ROWS
    monkeypatch.setenv("LOCKGATE_CODEGEN_ROWS", "5000")
    assert codegen_rows() == 5000
    monkeypatch.setenv("LOCKGATE_CODEGEN_ROWS", "lots")
    with pytest.raises(InvalidArgumentError, match="LOCKGATE_CODEGEN_ROWS='lots'.*whole number"):
        codegen_rows()
