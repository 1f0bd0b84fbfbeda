"""The driver's Py4J view keeps the classes and static methods it found: a Column costs one round
trip to the JVM, not three, and nothing else behaves differently (fields, packages, misses)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.sql import functions as F


@contextmanager
def round_trips(sc: SparkContext) -> Iterator[list[str]]:
    """The Py4J commands sent to the JVM inside the block (command, target, member), but for the
    object deletes Py4J's finalizer sends whenever Python collects a Java object's proxy."""
    client = sc._gateway._gateway_client
    sent: list[str] = []
    original = client.send_command

    def counted(command: str, *args, **kwargs):
        if not command.startswith("m\n"):
            sent.append(" ".join(command.split("\n")[:3]))
        return original(command, *args, **kwargs)

    client.send_command = counted
    try:
        yield sent
    finally:
        del client.send_command


def test_a_column_is_one_round_trip(spark) -> None:
    sc = spark.sparkContext
    F.col("v")  # the first time, functions, col, lit and PythonUtils.toSeq are each found once
    spark.range(3).select("id", F.lit(7).alias("seven"))
    with round_trips(sc) as sent:
        column = F.col("v")
        names = spark.range(3).select("id", F.lit(7).alias("seven")).columns
    lookups = [c for c in sent if c.startswith("r ")]
    assert lookups == [], lookups
    assert str(column) == "Column<'v'>"
    assert names == ["id", "seven"]
    with round_trips(sc) as sent:
        F.col("w")
    assert sent == ["c z:org.apache.spark.sql.functions col"]


def test_what_is_kept_and_what_is_not(spark) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm.PythonUtils is jvm.PythonUtils  # a class, kept
    assert jvm.functions.col is jvm.functions.col  # a static method, kept
    # reached through its packages the class is not kept, and still works
    assert jvm.org.apache.spark.sql.functions.col("x").toString() == "x"
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1  # a static field's value is read each time
    for _ in range(2):  # a miss is never kept: each lookup fails again, with Py4J's own error
        with pytest.raises(Py4JError, match="does not exist"):
            jvm.functions.no_such_function  # noqa: B018
