"""A class-data archive of the Spark driver's classes, for the test command's many JVMs.

Every Spark driver JVM the tests start (each test process's session, every ``lockgate run``,
worker and restart after a kill) loads and verifies the same few thousand Spark classes, which
is most of its start-up. Java 17 writes the classes one JVM loaded into an archive at its exit
(``-XX:ArchiveClassesAtExit``); a JVM started with ``-XX:SharedArchiveFile`` maps them instead.
On this 2-core machine a local session and its first query took 8.6 s instead of 15.2 s.

Prints the archive's path (made once, kept under ``.venv/cache/``, named by the Java and PySpark
versions and the JVM options), or nothing when none could be made: the tests then run without
it. A JVM whose class path differs from the archive's (another ``SPARK_CONF_DIR``, Spark Connect's
server) ignores it, silently with the ``-Xlog`` options the test command adds.

    python scripts/spark_class_archive.py      # -> .venv/cache/spark-classes-<key>.jsa
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".venv" / "cache"

#: a round's worth of Spark: a session, a grouped aggregate, a window, a broadcast join,
#: Parquet written and read, Arrow both ways: the classes a Lockgate round loads
_WARM_UP = """
import tempfile
import pyarrow as pa
from pyspark.sql import SparkSession, Window, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = spark.createDataFrame(pa.table({"k": [1, 2, 2, 3], "v": [1.0, 2.0, 3.0, 4.0]}))
agg = df.groupBy("k").agg(F.sum("v").alias("s"), F.count(F.lit(1)).alias("n"))
ranked = df.withColumn("r", F.row_number().over(Window.partitionBy("k").orderBy(F.col("v").desc())))
joined = ranked.join(F.broadcast(agg), "k", "left_semi").unionByName(ranked)
with tempfile.TemporaryDirectory() as d:
    agg.write.mode("overwrite").parquet(d + "/agg")
    back = spark.read.parquet(d + "/agg").select("k", F.col("_metadata.file_path").alias("p"))
    joined.toArrow(); back.toArrow(); joined.collect()
print(spark.sparkContext._gateway.proc.pid, flush=True)
spark.stop()
"""


def _key(opts: str) -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    import pyspark

    return hashlib.sha256(f"{java}|{pyspark.__version__}|{sys.executable}|{opts}".encode()).hexdigest()[:16]


def archive(opts: str) -> Path | None:
    """The archive for JVMs started with ``opts``: made now if it is not there yet."""
    path = CACHE / f"spark-classes-{_key(opts)}.jsa"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}.part")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env["SPARK_SUBMIT_OPTS"] = f"{opts} -XX:ArchiveClassesAtExit={part} -Xlog:cds=off -Xlog:cds+dynamic=off"
    run = subprocess.run([sys.executable, "-c", _WARM_UP], env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        print(f"spark_class_archive: the warm-up failed, tests run without an archive:\n{run.stderr[-2000:]}",
              file=sys.stderr)
        return None
    try:  # the JVM writes the archive as it exits, after the warm-up's Python has gone
        psutil.Process(int(run.stdout.split()[-1])).wait(180)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        part.unlink(missing_ok=True)
    if not part.exists():
        print("spark_class_archive: no archive was written; tests run without one", file=sys.stderr)
        return None
    part.replace(path)
    return path


def main() -> int:
    try:
        path = archive(os.environ.get("SPARK_SUBMIT_OPTS", ""))
    except (OSError, subprocess.SubprocessError, psutil.Error, ValueError, IndexError) as err:
        print(f"spark_class_archive: {err}; tests run without an archive", file=sys.stderr)
        return 0
    if path is not None:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
