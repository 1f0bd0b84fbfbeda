"""State that grows: a round's cost against the size of the keyed state it carries.

Two workloads, each over ``--keys`` distinct keys: first one window holding every key once,
then ``--windows`` windows of ``--rows`` records each over random keys of that set, so the
state holds ``--keys`` rows throughout while each window touches a few of them:

- ``aggregate``: a running aggregate, ``key_by(key).aggregate(count, sum)``;
- ``dedup``: ``key_by(key).deduplicate()`` (every key kept forever: no ``within``).

Three contenders run the same data, in one process and one SparkSession, one window (one
file) per round or micro-batch:

- ``incremental``: Lockgate with incremental state (deltas, ``LOCKGATE_STATE_MAX_DELTAS=8``);
- ``full``: Lockgate writing a full snapshot every round (``LOCKGATE_STATE_MAX_DELTAS=0``, how
  rounds worked before deltas);
- ``sss_rocksdb``: Spark Structured Streaming with the RocksDB state store and changelog
  checkpointing (``groupBy().agg()`` in update mode, ``dropDuplicates()`` in append mode),
  ``maxFilesPerTrigger=1``, each micro-batch written to Parquet by ``foreachBatch``.

It prints and writes (``--out``, JSON) each contender's peak memory (the driver JVM's used heap
against its maximum, the default; the process tree's resident memory), its median round (Lockgate: from the
cycle's start to its checkpoint; Structured Streaming: a micro-batch's ``triggerExecution``)
and the bytes its checkpoint gained per round, after the first window; and checks every
contender's result against pandas over the same data (the aggregate's totals per key, the
dedup's set of keys and one output row per key).

    python -m bench.state_growth --keys 10000,100000,1000000 --workloads aggregate,dedup
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.config import ROCKSDB_CONF
from bench.procmon import tree_rss

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CYCLE = timedelta(seconds=10)
WORKLOADS = ("aggregate", "dedup")
CONTENDERS = ("full", "incremental", "sss_rocksdb")
#: a Lockgate round's phases (ms, from the catalog's cycle timings): reading the window's records,
#: building its DataFrames, computing the state change and writing it, staging the sinks' output
PHASES = ("read", "plan", "snapshot", "stage", "commit", "checkpoint")

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("growth", cycle_window=timedelta(seconds=10), parallelism=2)
events = pipeline.source(lg.FileSource({path!r}, format="parquet", event_time="ts"), name="events")
{body}
'''
BODIES = {
    "aggregate": 'events.key_by("key").aggregate(n=lg.count(), total=lg.sum("value"), name="state")'
                 '.sink(lg.CollectSink("out"), name="out")',
    "dedup": 'events.key_by("key").deduplicate(name="state").sink(lg.CollectSink("out"), name="out")',
}


def write_data(folder: Path, keys: int, rows: int, windows: int, seed: int = 7) -> pd.DataFrame:
    """One Parquet file per 10 s window; returns every record (for the reference)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t0_us = int(T0.timestamp() * 1_000_000)
    parts = []
    for w in range(windows + 1):
        n = keys if w == 0 else rows
        key = np.arange(keys, dtype=np.int64) if w == 0 else rng.integers(0, keys, n, dtype=np.int64)
        ts = t0_us + w * 10_000_000 + rng.integers(0, 10_000_000, n, dtype=np.int64)
        value = rng.integers(1, 1000, n, dtype=np.int64)
        table = pa.table({"key": key, "value": value, "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, folder / f"w{w:04d}.parquet")
        os.utime(folder / f"w{w:04d}.parquet", (t0_us / 1e6 + w, t0_us / 1e6 + w))  # file streams read in this order
        parts.append(pd.DataFrame({"key": key, "value": value}))
    return pd.concat(parts, ignore_index=True)


def _folder_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _check(workload: str, data: pd.DataFrame, state: pd.DataFrame | None, out: pd.DataFrame, who: str) -> None:
    """The contender's result against pandas over the same records."""
    if workload == "aggregate":
        want = data.groupby("key").agg(n=("value", "size"), total=("value", "sum")).sort_index()
        got = (state if state is not None else out).set_index("key").sort_index()[["n", "total"]]
        assert got.equals(want.astype(got.dtypes.to_dict())), f"{who}: the totals differ from pandas"
    else:
        keys = np.sort(data["key"].unique())
        assert len(out) == len(keys) and np.array_equal(np.sort(out["key"].to_numpy()), keys), \
            f"{who}: not one output row per key"
        if state is not None:
            assert np.array_equal(np.sort(state["key"].to_numpy()), keys), f"{who}: the kept keys differ"


def run_lockgate(work: Path, ref: str, workload: str, max_deltas: int, first: int, last: int,
                 data: pd.DataFrame) -> dict[str, Any]:
    import lockgate as lg

    os.environ["LOCKGATE_STATE_MAX_DELTAS"] = str(max_deltas)
    home = work / f"home-{max_deltas}"
    client = lg.connect("embedded", home=str(home), keep_checkpoints=100)
    try:
        t = time.perf_counter()
        res = client.run(ref, first=first, last=last, catchup="off")
        assert res.state == "FINISHED", res
        print(f"    max_deltas={max_deltas}: {res.windows_run} windows in {time.perf_counter() - t:.1f} s", flush=True)
        cycles = [c for c in client.catalog.list_cycles("growth") if c.state.value == "COMMITTED"]
        cycles.sort(key=lambda c: c.window)
        # a round: from its cycle's start to its checkpoint (read, merge, snapshot, stage, commit)
        rounds = [(c.finished - c.started).total_seconds() for c in cycles]
        phases = [{k: float(c.timings.get(k, 0.0)) for k in PHASES} for c in cycles]
        cps = sorted(client.catalog.list_checkpoints("growth"), key=lambda c: c.window)
        gained = [_folder_bytes(cp.snapshot_uri) for cp in cps]
        state = client.read_state("growth", "state").to_pandas()
        out = client.read_sink("growth", "out").to_pandas()
    finally:
        client.close()
    if workload == "aggregate":
        out = out.sort_values("as_of").groupby("key").tail(1)
    _check(workload, data, state, out, f"lockgate max_deltas={max_deltas}")
    return {"round_s": rounds, "bytes": gained, "phases": phases}


def run_sss(work: Path, data_dir: Path, workload: str, data: pd.DataFrame) -> dict[str, Any]:
    """Structured Streaming, RocksDB with changelog checkpointing, one file per micro-batch."""
    from pyspark.sql import functions as F

    from lockgate.runtime.session import get_spark

    spark = get_spark()
    for k, v in ROCKSDB_CONF.items():
        spark.conf.set(k, v)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    ckpt, sink = work / "sss_checkpoint", work / "sss_out"
    src = (spark.readStream.schema("key bigint, value bigint, ts timestamp")
           .option("maxFilesPerTrigger", 1).parquet(str(data_dir)))
    if workload == "aggregate":
        df, mode = src.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total")), "update"
    else:
        df, mode = src.dropDuplicates(["key"]).select("key", "value"), "append"

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(str(sink))

    t = time.perf_counter()
    query = (df.writeStream.foreachBatch(write).option("checkpointLocation", str(ckpt))
             .outputMode(mode).trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [p for p in query.recentProgress if int(p.numInputRows) > 0]
    print(f"    sss_rocksdb: {len(batches)} batches in {time.perf_counter() - t:.1f} s", flush=True)
    rounds = [float(p.durationMs["triggerExecution"]) / 1000 for p in batches]
    # the checkpoint's bytes written by each batch after the first: files newer than its start
    starts = [datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() for p in batches]
    files = [(f.stat().st_mtime, f.stat().st_size) for f in ckpt.rglob("*") if f.is_file()]
    gained = [sum(size for mtime, size in files if a <= mtime < b)
              for a, b in zip(starts, [*starts[1:], float("inf")], strict=True)]
    out = pd.read_parquet(sink)
    if workload == "aggregate":
        out = out.sort_values("batch").groupby("key").tail(1)
    _check(workload, data, None, out, "sss_rocksdb")
    return {"round_s": rounds, "bytes": gained}


class PeakMemory:
    """The peak of the driver JVM's used heap and of this process tree's resident memory (the
    JVM's off-heap and RocksDB's native memory included) while a contender runs, sampled."""

    def __init__(self, every_s: float = 0.25):
        self.every_s = every_s
        self.heap = self.rss = 0
        self.heap_max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        from lockgate.runtime import session

        me = psutil.Process()
        runtime = None
        while not self._stop.is_set():
            if runtime is None and session._session is not None:  # the contender's session, once it started
                runtime = session._session._jvm.java.lang.Runtime.getRuntime()
                self.heap_max = int(runtime.maxMemory())
            if runtime is not None:
                self.heap = max(self.heap, int(runtime.totalMemory()) - int(runtime.freeMemory()))
            self.rss = max(self.rss, tree_rss(me))
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, int]:
        mb = 1024 * 1024
        return {"peak_heap_mb": self.heap // mb, "heap_max_mb": self.heap_max // mb, "peak_rss_mb": self.rss // mb}


def _median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:]) if len(values) > 1 else float("nan")


def measure(work: Path, workload: str, keys: int, rows: int, windows: int, contenders: list[str]) -> dict[str, Any]:
    """Every contender over one data set of ``keys`` keys; their summaries."""
    print(f"{workload}: state of {keys:,} keys, {windows} windows of {rows:,} rows", flush=True)
    data_dir = work / "data"
    data = write_data(data_dir, keys, rows, windows)
    path = work / "growth_pipe.py"
    path.write_text(PIPELINE.format(path=str(data_dir), body=BODIES[workload]))
    ref = f"{path}:pipeline"
    first = int(T0.timestamp()) // 10
    summary: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, local[2]",
        "date": datetime.now(UTC).date().isoformat(),
        "workload": workload,
        "keys": keys,
        "rows_per_window": rows,
        "windows": windows,
        "checked": "every contender's result equals pandas over the same records",
    }
    for name in contenders:  # Lockgate's full snapshots first: the JVM is then warm for the others
        with PeakMemory() as memory:
            if name == "sss_rocksdb":
                res = run_sss(work, data_dir, workload, data)
            else:
                res = run_lockgate(work, ref, workload, 0 if name == "full" else 8, first, first + windows, data)
        summary[name] = {
            "median_round_s": round(_median_after_first(res["round_s"]), 3),
            "median_bytes_per_round": int(_median_after_first(res["bytes"])),
            "rounds_s": [round(x, 3) for x in res["round_s"]],
            **memory.summary(),
        }
        if "phases" in res:
            summary[name]["median_phase_ms"] = {
                k: round(_median_after_first([p[k] for p in res["phases"]]), 1) for k in PHASES}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", default="10000,100000,1000000", help="state sizes (keys), comma-separated")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    p.add_argument("--contenders", default=",".join(CONTENDERS), help=f"of {', '.join(CONTENDERS)}")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--windows", type=int, default=8)
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", default="bench/results/state_growth.json")
    args = p.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    contenders = [c for c in CONTENDERS if c in args.contenders.split(",")]
    unknown = (set(workloads) - set(WORKLOADS)) | (set(args.contenders.split(",")) - set(CONTENDERS))
    if unknown or not workloads or not contenders:
        p.error(f"unknown or no workloads/contenders: {sorted(unknown)}")

    from lockgate.logs import configure

    configure()
    root = Path(args.work or tempfile.mkdtemp(prefix="lockgate-growth-"))
    summaries = []
    for workload in workloads:
        for keys in (int(k) for k in args.keys.split(",")):
            summaries.append(measure(root / f"{workload}-{keys}", workload, keys, args.rows, args.windows, contenders))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(summaries, indent=2) + "\n")  # kept as it goes
    print(f"{'workload':<10} {'keys':>11}  " + "  ".join(f"{c + ' s / bytes':>28}" for c in contenders))
    for m in summaries:
        cells = [f"{m[c]['median_round_s']:>10.2f} s / {m[c]['median_bytes_per_round']:>12,}" for c in contenders]
        print(f"{m['workload']:<10} {m['keys']:>11,}  " + "  ".join(f"{cell:>28}" for cell in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
