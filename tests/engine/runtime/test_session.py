"""The Spark session: a whole pyspark (Python UDFs, through Arrow), Java 17+, UTC, a silent start.

test_python_udfs is the test that catches the pyspark-client trap (pyspark-client's files
overwriting pyspark's: Python UDFs then fail in the JVM). Fix: scripts/setup.sh.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.functions import pandas_udf, udf

from lockgate.runtime.session import check_java


def test_python_udfs(spark):
    @udf("long")
    def plus_one(x):
        return x + 1

    @pandas_udf("long")
    def times_two(s):
        return s * 2

    def times_three(batches):
        for b in batches:
            yield pa.RecordBatch.from_arrays([pc.multiply(b.column(0), 3)], names=["id"])

    df = spark.range(10)
    rows = df.select(plus_one("id").alias("a"), times_two("id").alias("b")).orderBy("a").collect()
    assert [(r.a, r.b) for r in rows] == [(i + 1, 2 * i) for i in range(10)]
    assert sorted(r.id for r in df.mapInArrow(times_three, "id long").collect()) == [3 * i for i in range(10)]


def test_java_17_or_newer():
    version = check_java()
    assert int(version.split(".")[0].split("-")[0].split("+")[0]) >= 17, version


def test_session_time_zone_is_utc(spark):
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    row = spark.sql("SELECT unix_timestamp(TIMESTAMP '2024-01-01 00:00:00') AS t").first()
    assert row.t == 1704067200


def test_memory_pages_are_small_and_a_window_sized_aggregate_still_runs(spark):
    """1 MB pages (not the ~16 MB Spark sizes from a 2 GiB heap); an aggregate and a sort over
    more rows than one page holds still give every row."""
    assert spark.sparkContext.getConf().get("spark.buffer.pageSize") == "1m"
    df = spark.range(200_000).selectExpr("id % 50000 AS k", "repeat('x', 40) AS pad")
    rows = df.groupBy("k").agg({"pad": "count"}).orderBy("k").collect()
    assert len(rows) == 50_000 and all(r[1] == 4 for r in rows)


def test_startup_prints_nothing_about_logging(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_SPARK_LOG_LEVEL", "PYTHONPATH")}
    code = "from lockgate.runtime.session import get_spark; s=get_spark(); s.range(3).count()"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    noisy = [
        line
        for line in proc.stderr.splitlines()
        if "WARN" in line or "Setting default log level" in line or "log4j" in line
    ]
    assert noisy == [], proc.stderr


RPC_RACE = """
import lockgate
client = lockgate.connect("embedded", home={home!r})
jvm = client.spark._jvm
err = jvm.org.apache.spark.rpc.RpcEndpointNotFoundException("spark://CoarseGrainedScheduler@127.0.0.1:1")
jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.rpc.netty.Inbox").error("Ignoring error", err)
jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.SparkContext").error("a real error")
client.spark.range(3).count()
client.close()
"""


def test_spark_rpc_races_go_to_the_log_file_not_the_terminal(tmp_path):
    """What Spark's RPC layer logs at start-up and shutdown on a loaded machine ("ERROR Inbox:
    Ignoring error ... RpcEndpointNotFoundException", a stack trace) is kept in the embedded
    run's ``logs/spark-driver.log``, off the terminal; another error still reaches the terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_SPARK_LOG_LEVEL", "PYTHONPATH")}
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-c", RPC_RACE.format(home=str(home))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Ignoring error" not in proc.stderr and "RpcEndpointNotFoundException" not in proc.stderr, proc.stderr
    assert "a real error" in proc.stderr
    kept = (home / "logs" / "spark-driver.log").read_text()
    assert "ERROR Inbox: Ignoring error" in kept and "RpcEndpointNotFoundException" in kept


def test_a_jvm_that_dies_at_start_says_why(tmp_path):
    """PySpark says only "Java gateway process exited"; the error carries what the JVM printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_SPARK_LOG_LEVEL", "PYTHONPATH")}
    code = ("from lockgate.runtime.session import get_spark\n"
            "from lockgate.errors import SparkStartError\n"
            "try:\n"
            "    get_spark(conf={'spark.driver.memory': '1k'})\n"
            "except SparkStartError as err:\n"
            "    print(err)\n")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "the Spark driver JVM exited before it started" in proc.stdout, proc.stdout + proc.stderr
    # the JVM's own words (it prints them on stdout), in the error
    assert "it printed:\nError occurred during initialization of VM" in proc.stdout, proc.stdout
