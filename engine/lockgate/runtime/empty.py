"""Frames with no rows that Spark's optimizer knows are empty.

``spark.createDataFrame([], schema)`` in a classic session is a scan of an empty RDD (a
``LogicalRDD``): Spark cannot tell it holds no rows, so a round whose window brought no records
still ran every join, broadcast and aggregation over it, and a round template cannot keep a plan
with such a leaf. :func:`empty_frame` is an empty ``LocalRelation`` instead: the optimizer prunes
what reads it (a join with it, an aggregation by key over it, a union branch), and a template
keeps it as a constant.

    >>> empty_frame(spark, StructType.fromDDL("k long, v long")).count()   # doctest: +SKIP
    0
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """A frame of ``schema`` with no rows, as an empty ``LocalRelation`` (on Spark Connect, whose
    client already sends an empty frame as local rows: ``createDataFrame``)."""
    jss = getattr(spark, "_jsparkSession", None)
    if jss is None:
        return spark.createDataFrame([], schema)
    jvm = spark._jvm
    attributes = jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttributes(
        jss.parseDataType(schema.json()))
    relation = jvm.org.apache.spark.sql.catalyst.plans.logical.LocalRelation(
        attributes, attributes.take(0), False, jvm.scala.Option.empty())
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(jss, relation), spark)


def known_empty(df: DataFrame) -> bool:
    """Whether Spark's optimizer proves ``df`` holds no rows (its optimised plan is an empty
    ``LocalRelation``): such a frame is not worth persisting, and persisting it would hide its
    emptiness from the plans that read it."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # Spark Connect: the plan is the server's
        return False
    plan = jdf.queryExecution().optimizedPlan()
    return plan.nodeName() == "LocalRelation" and plan.data().isEmpty()
