"""bench.task_metrics: Spark's event log of a real session (its own JVM, as the bench's profile
run starts one), summed into jobs, stages, tasks and what the tasks spent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.task_metrics import event_log_conf, task_totals

pytestmark = pytest.mark.slow

SESSION = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.range(0, 100, 1, 3).count()                      # 3 tasks, then 1
    sc = spark.sparkContext
    sc.setJobGroup("last", "the last job")
    sc.parallelize(range(10), 4).map(lambda x: x).count()   # one job, one stage of 4 tasks
    print(json.dumps(list(sc.statusTracker().getJobIdsForGroup("last"))))
    spark.stop()
""")


def test_a_real_sessions_event_log_sums_to_its_jobs_and_tasks(repo_root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "spark-events"
    conf = event_log_conf(folder)
    assert conf["spark.eventLog.dir"].startswith("file:")
    proc = subprocess.run([sys.executable, "-c", SESSION, json.dumps(conf)], cwd=repo_root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (last,) = json.loads(proc.stdout.strip().splitlines()[-1])
    totals = task_totals(folder)
    assert totals["jobs"] == last + 1, totals
    assert totals["stages"] == 3 and totals["tasks"] == 3 + 1 + 4, totals
    assert totals["run_ms"] > 0 and totals["deserialize_ms"] >= 0 and totals["gc_ms"] >= 0
    later = task_totals(folder, after_job=last)  # only the last job: one stage of four tasks
    assert (later["jobs"], later["stages"], later["tasks"]) == (1, 1, 4), later
