"""bench.jvm_profile: a real driver JVM recorded by Java Flight Recorder from its start, dumped
while it runs, and its samples summed by what Spark was doing (a job that builds a cached frame
shows in the executor tasks and in the caching of persisted frames)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.jvm_profile import CATEGORIES, PY4J_PHASES, PY4J_THREAD, jfr_options, markdown, summary

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (shutil.which("jfr") and shutil.which("jcmd")), reason="needs the JDK's jfr and jcmd")]

SESSION = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pyspark.sql import SparkSession, functions as F
    from bench.jvm_profile import dump
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.range(0, 1_000_000, 1, 2).select((F.col("id") % 1000).alias("k"), F.col("id").cast("string").alias("v"))
    for _ in range(3):                       # each round caches its frame and reads it twice
        cached = df.persist()
        cached.groupBy("k").count().collect()
        cached.agg(F.countDistinct("v")).collect()
        cached.unpersist(blocking=True)
    print("dumped" if dump(spark, Path(sys.argv[1])) else "not dumped")
    spark.stop()
""")


def test_a_recorded_session_is_summed_by_what_spark_did(repo_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "jvm.jfr"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {jfr_options()}"}
    proc = subprocess.run([sys.executable, "-c", SESSION, str(path)], cwd=repo_root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "dumped" and path.stat().st_size > 0
    s = summary(path)
    cats = s["categories"]
    assert s["samples"] > 50, s
    assert list(cats) == list(CATEGORIES)
    assert cats["executor tasks (all)"] > 20, s  # the jobs' tasks are most of what the JVM did
    cached = cats["  computing and caching persisted frames"]
    assert 0 < cats["    of it, writing the rows into cached columns"] <= cached <= cats["executor tasks (all)"], s
    # each share is rounded to 0.1 %, so together they may pass 100 by half of that each
    assert 0 < sum(s["threads"].values()) <= 100.0 + 0.05 * len(s["threads"]) + 1e-6, s
    assert "executor tasks" in s["threads"]
    # the recording keeps whole stacks: JFR's default depth (64) cut 40 % of a W5 run's samples,
    # losing the outer frames (a task's TaskRunner.run) that the categories look for
    assert s["truncated_pct"] < 1, s
    # the Py4J thread built the DataFrames: its samples by phase, each counted once
    assert PY4J_THREAD in s["threads"], s
    assert list(s["py4j_thread"]) == [*PY4J_PHASES, "other"]
    assert 99.0 <= sum(s["py4j_thread"].values()) <= 100.0 + 0.05 * len(s["py4j_thread"]) + 1e-6, s
    page = markdown(s)
    assert page.startswith("## The driver JVM") and "caching&nbsp;persisted" not in page
    assert "| &nbsp;&nbsp;computing and caching persisted frames |" in page, page
    assert "| the Py4J thread (the round's DataFrames are built there) was |" in page, page
