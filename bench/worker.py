"""One contender run (or, for the smoke run, several in one process): ``python -m
bench.worker SPEC.json``.

The orchestrator (:mod:`bench.run`) starts each run in its own process group, so every
run gets a fresh JVM with the same settings, and watches the memory of the process tree.
A run writes its result as JSON to ``spec["result"]``: session start-up, set-up, the time
from the first read to the last commit, per-cycle phase timings (Lockgate's catalog, or
Structured Streaming's ``durationMs``), Spark jobs and Py4J round trips, bytes written
to checkpoints.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import pstats
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from . import jvm_profile
from .config import HDFS_PROVIDER, LG_DETAIL, MASTER, REPO, ROCKSDB_CONF
from .task_metrics import event_log_conf, task_totals
from .workloads import PIPELINE_FILE, WORKLOADS, spark_output

# -- Py4J round trips --------------------------------------------------------------------
#: calls, seconds blocked, and calls/seconds of the short ones (< 10 ms: round trips that
#: ran no Spark job: analysis, schema look-ups, plan building, conf and file-system calls)
_PY4J: dict[str, float] = {"calls": 0, "seconds": 0.0, "short_calls": 0, "short_seconds": 0.0}
#: with SITES on: (Lockgate call site, PySpark API) -> [calls, seconds]
_SITES: dict[tuple[str, str], list[float]] = {}
_TRACE_SITES = {"on": False}
SHORT_CALL_S = 0.010


def _call_site() -> tuple[str, str]:
    """The innermost Lockgate frame and the outermost PySpark frame above a Py4J call."""
    f = sys._getframe(2)
    api, site = "?", "?"
    while f is not None:
        name = f.f_code.co_filename
        if "/pyspark/" in name:
            api = f"{f.f_code.co_name} ({name[name.rfind('/pyspark/') + 1:]})"
        elif "/lockgate/" in name:
            site = f"{f.f_code.co_qualname} ({name[name.rfind('/lockgate/') + 1:]}:{f.f_lineno})"
            break
        f = f.f_back
    return site, api


def _count_py4j() -> None:
    """Count every Python -> JVM call (and the time spent waiting for it)."""
    from py4j.java_gateway import GatewayClient

    if getattr(GatewayClient.send_command, "_bench", False):
        return
    original = GatewayClient.send_command

    def send_command(self: Any, command: Any, retry: bool = True, binary: bool = False) -> Any:
        t = time.perf_counter()
        try:
            return original(self, command, retry, binary)
        finally:
            dt = time.perf_counter() - t
            _PY4J["calls"] += 1
            _PY4J["seconds"] += dt
            if dt < SHORT_CALL_S:
                _PY4J["short_calls"] += 1
                _PY4J["short_seconds"] += dt
            if _TRACE_SITES["on"]:
                entry = _SITES.setdefault(_call_site(), [0, 0.0])
                entry[0] += 1
                entry[1] += dt

    send_command._bench = True  # type: ignore[attr-defined]
    GatewayClient.send_command = send_command  # type: ignore[method-assign]


def _py4j_snapshot() -> dict[str, float]:
    return dict(_PY4J)


def _py4j_delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {
        "py4j_calls": b["calls"] - a["calls"],
        "py4j_s": b["seconds"] - a["seconds"],
        "py4j_short_calls": b["short_calls"] - a["short_calls"],
        "py4j_short_s": b["short_seconds"] - a["short_seconds"],
    }


def tree_cpu_s() -> float:
    """CPU seconds (user + system) used so far by this process and its children: the Spark
    JVM and its Python workers. Unlike wall time, it barely moves when other processes
    compete for the cores."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            c = p.cpu_times()
            total += c.user + c.system
    return total


def _spark_jobs(spark: Any) -> int:
    """Spark jobs submitted so far in this driver."""
    sc = spark.sparkContext
    try:
        return int(sc._jsc.sc().dagScheduler().nextJobId())
    except Exception:  # the tracker keeps the last spark.ui.retainedJobs ids
        ids = list(sc.statusTracker().getJobIdsForGroup(None))
        return max(ids) + 1 if ids else 0


# -- bytes written under a folder ---------------------------------------------------------
class BytesWatcher:
    """Polls folders and records the largest size seen of every file, so files deleted
    later (expired checkpoints, compacted logs) still count as written."""

    def __init__(self, roots: list[Path], files: list[Path] | None = None, interval: float = 0.2):
        self.roots, self.files, self.interval = roots, files or [], interval
        self.sizes: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-bytes", daemon=True)

    def sweep(self) -> None:
        for root in self.roots:
            for dirpath, _dirs, names in os.walk(root):
                for n in names:
                    p = os.path.join(dirpath, n)
                    with contextlib.suppress(OSError):
                        self.sizes[p] = max(self.sizes.get(p, 0), os.stat(p).st_size)
        for f in self.files:
            with contextlib.suppress(OSError):
                self.sizes[str(f)] = max(self.sizes.get(str(f), 0), f.stat().st_size)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sweep()

    def __enter__(self) -> BytesWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sweep()

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


def _kill_when(path: Path) -> None:
    """kill -9 of this process group (Python and JVM) as soon as ``path`` exists."""

    def loop() -> None:
        while not path.exists():
            time.sleep(0.005)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=loop, name="bench-killer", daemon=True).start()


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- contenders ----------------------------------------------------------------------------
def run_lockgate(spec: dict[str, Any], spark: Any) -> dict[str, Any]:
    import lockgate

    work = Path(spec["work"])
    home = work / "home"
    job = spec["job"]
    kwargs = {
        "workload": spec["workload"],
        "data": spec["data"],
        "out": spec["out"],
        "cycle_s": spec["cycle_s"],
        "origin": spec["origin"],
        "name": job,
    }
    pipe = work / "pipeline.py"
    pipe.write_text(PIPELINE_FILE.format(repo=str(REPO), kwargs=kwargs))
    if os.environ.get("LOCKGATE_BENCH_METRICS"):  # metrics on (their overhead, issue 64): recorded and served
        from lockgate import metrics

        metrics.serve(0)
    client = lockgate.connect("embedded", home=str(home))
    jobs0, py0 = _spark_jobs(spark), _py4j_snapshot()
    profiler = cProfile.Profile() if spec.get("profile") else None
    catalog_files = [home / "catalog.db", home / "catalog.db-wal"]
    catalog_sizes: list[int] = []

    def on_event(e: Any) -> None:
        # the catalog's size after each committed window: its growth is what a checkpoint adds
        if e.kind == "cycle_done":
            catalog_sizes.append(sum(f.stat().st_size for f in catalog_files if f.exists()))

    t0 = time.time()
    with BytesWatcher([home / "snapshots"]) as watcher:
        if profiler:
            _TRACE_SITES["on"] = True
            profiler.enable()
        res = client.run(f"{pipe}:pipeline", job=job, first=0, last=spec["cut"] - 1, on_event=on_event)
        if profiler:
            profiler.disable()
            _TRACE_SITES["on"] = False
    t1 = time.time()
    catalog_growth = (catalog_sizes[-1] - catalog_sizes[0]) / (len(catalog_sizes) - 1) if len(catalog_sizes) > 1 else 0
    jobs1, py1 = _spark_jobs(spark), _py4j_snapshot()
    cycles = sorted(
        (c for c in client.catalog.list_cycles(job, limit=1_000_000) if c.state.value == "COMMITTED"),
        key=lambda c: c.window,
    )
    if len(cycles) != spec["cut"]:
        raise RuntimeError(f"lockgate committed {len(cycles)} windows of {spec['cut']}")
    phases: dict[str, float] = {}
    snapshot_bytes = 0
    per_cycle = []
    for c in cycles:
        for k, v in c.timings.items():
            phases[k] = phases.get(k, 0.0) + float(v)
        sm = (c.manifest or {}).get("snapshot_manifest") or {}
        snapshot_bytes += sum(f["size"] for op in sm.values() for f in op.get("files", []))
        per_cycle.append(
            {"window": c.window, "start": c.started.timestamp(), "end": c.finished.timestamp(), **c.timings}
        )
    first, last = cycles[0].started.timestamp(), cycles[-1].finished.timestamp()
    process_s = last - first
    # details of other phases (snapshot and stage inside write, snapshot_io inside snapshot,
    # state_load inside read): not part of the sum
    phases["other"] = process_s * 1000 - sum(v for k, v in phases.items() if k not in LG_DETAIL)
    out: dict[str, Any] = {
        "setup_s": first - t0,
        "process_s": process_s,
        "end_to_end_s": t1 - t0,
        "cycles": len(cycles),
        "phases_ms": phases,
        "per_cycle": per_cycle,
        "rows_in": res.rows_in,
        "rows_out": res.rows_out,
        "spark_jobs": jobs1 - jobs0,
        **_py4j_delta(py0, py1),
        # per run: every snapshot file written, plus the catalog's growth per window times windows
        "checkpoint_bytes": watcher.total + catalog_growth * len(cycles),
        "snapshot_bytes_written": snapshot_bytes,
        "catalog_bytes_per_window": catalog_growth,
        "first_commit_at": cycles[0].finished.timestamp(),
    }
    if profiler:
        prof = work / "lockgate.prof"
        profiler.dump_stats(str(prof))
        out["profile"] = str(prof)
        if spec.get("event_log"):  # Spark's own count of the run's tasks and what they spent
            out["spark_tasks"] = task_totals(Path(spec["event_log"]), after_job=jobs0)
        out["py4j_sites"] = sorted(
            ({"site": site, "api": api, "calls": n, "seconds": sec} for (site, api), (n, sec) in _SITES.items()),
            key=lambda r: -r["calls"],
        )
        with open(work / "lockgate-profile.txt", "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(80)
    if spec.get("jfr"):  # the driver JVM's recording, dumped while the JVM still runs
        jvm_profile.dump(spark, Path(spec["jfr"]))
    client.close()
    return out


def _sss_writer(df: Any, workload: str, out: str) -> Any:
    """The query's sink: the Parquet file sink in append mode, or, for an updating result
    (which needs update mode, refused by the file sink), ``foreachBatch`` writing each
    micro-batch's updated rows to ``<out>/batch=<id>/`` (overwritten on a replay, so exactly once)."""
    if not WORKLOADS[workload].updating:
        return df.writeStream.format("parquet").option("path", out).outputMode("append")

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    return df.writeStream.outputMode("update").foreachBatch(write)


def unsupported_reason(err: Exception) -> str:
    """Spark's one-line reason for refusing a streaming query (its message's first line)."""
    text = str(err).strip()
    return text.splitlines()[0].strip() if text else type(err).__name__


def run_sss(spec: dict[str, Any], spark: Any) -> dict[str, Any]:
    """One Structured Streaming run; ``{"unsupported": reason}`` where Spark refuses the query."""
    from pyspark.errors import AnalysisException

    work = Path(spec["work"])
    ckpt = work / "checkpoint"
    provider = dict(ROCKSDB_CONF) if spec["contender"] == "sss_rocksdb" else {
        "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
    }
    for k, v in provider.items():
        spark.conf.set(k, v)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    if spec.get("kill_after") is not None:
        _kill_when(ckpt / "commits" / str(spec["kill_after"]))
    jobs0, py0 = _spark_jobs(spark), _py4j_snapshot()
    t0 = time.time()
    with BytesWatcher([ckpt]) as watcher:
        df = spark_output(spark, spec["workload"], spec["data"], streaming=True, max_files=spec["files_per_trigger"])
        writer = _sss_writer(df, spec["workload"], spec["out"]).option("checkpointLocation", str(ckpt))
        try:
            query = writer.trigger(availableNow=True).start()
        except AnalysisException as err:  # Spark refuses the query (its operators or output mode)
            return {"unsupported": unsupported_reason(err), "setup_s": time.time() - t0}
        query.awaitTermination()
    t1 = time.time()
    jobs1, py1 = _spark_jobs(spark), _py4j_snapshot()
    progress = list(query.recentProgress)
    if not progress:
        raise RuntimeError("structured streaming ran no batch")
    phases: dict[str, float] = {}
    state_commit_ms = 0.0
    per_batch = []
    rows_in = 0
    for p in progress:
        for k, v in (p.durationMs or {}).items():
            phases[k] = phases.get(k, 0.0) + float(v)
        commit = sum(float(s.commitTimeMs) for s in p.stateOperators)
        state_commit_ms += commit
        rows_in += int(p.numInputRows)
        per_batch.append({"batch": p.batchId, "start": _ts(p.timestamp), "rows": int(p.numInputRows),
                          "state_commit": commit, **(p.durationMs or {})})
    first = per_batch[0]["start"]
    ends = [b["start"] + b.get("triggerExecution", 0) / 1000 for b in per_batch]
    return {
        "setup_s": first - t0,
        "process_s": max(ends) - first,
        "end_to_end_s": t1 - t0,
        "cycles": len(progress),
        "data_batches": sum(1 for b in per_batch if b["rows"] > 0),
        "phases_ms": phases,
        "state_commit_ms": state_commit_ms,
        "per_cycle": per_batch,
        "rows_in": rows_in,
        "spark_jobs": jobs1 - jobs0,
        **_py4j_delta(py0, py1),
        "checkpoint_bytes": watcher.total,
        "first_commit_at": ends[0],
        "first_batch_id": per_batch[0]["batch"],
    }


def run_batch(spec: dict[str, Any], spark: Any) -> dict[str, Any]:
    jobs0, py0 = _spark_jobs(spark), _py4j_snapshot()
    t0 = time.time()
    df = spark_output(spark, spec["workload"], spec["data"], streaming=False)
    t1 = time.time()
    df.write.mode("overwrite").parquet(spec["out"])
    t2 = time.time()
    jobs1, py1 = _spark_jobs(spark), _py4j_snapshot()
    return {
        "setup_s": t1 - t0,
        "process_s": t2 - t1,
        "end_to_end_s": t2 - t0,
        "cycles": 1,
        "phases_ms": {},
        "spark_jobs": jobs1 - jobs0,
        **_py4j_delta(py0, py1),
        "checkpoint_bytes": 0,
    }


RUNNERS = {"lockgate": run_lockgate, "sss": run_sss, "sss_rocksdb": run_sss, "batch": run_batch}


def run_specs(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``specs`` in order on one SparkSession; each result is also written to its
    ``result`` file as soon as it is known."""
    import psutil

    launched = psutil.Process().create_time()
    _count_py4j()
    from lockgate.runtime.session import get_spark

    t0 = time.time()
    logs = [spec["event_log"] for spec in specs if spec.get("event_log")]
    spark = get_spark(MASTER, conf=event_log_conf(Path(logs[0])) if logs else None)
    session_s = time.time() - t0
    results = []
    for spec in specs:
        Path(spec["work"]).mkdir(parents=True, exist_ok=True)
        cpu0 = tree_cpu_s()
        res = RUNNERS[spec["contender"]](spec, spark)
        res["cpu_s"] = tree_cpu_s() - cpu0  # set-up and processing, session start-up apart
        res.update(
            contender=spec["contender"],
            workload=spec["workload"],
            cut=spec["cut"],
            launched_at=launched,
            startup_s=t0 - launched + session_s,
            session_s=session_s,
            driver_memory=spark.sparkContext.getConf().get("spark.driver.memory", "default"),
            jvm_max_heap_mb=int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()) // 2**20,
            shuffle_partitions=spark.conf.get("spark.sql.shuffle.partitions"),
        )
        Path(spec["result"]).write_text(json.dumps(res, default=str))
        results.append(res)
    return results


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.worker SPEC.json", file=sys.stderr)
        return 2
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    spec = json.loads(Path(args[0]).read_text())
    if "runs" in spec:
        results = run_specs(spec["runs"])
        Path(spec["result"]).write_text(json.dumps(results, default=str))
    else:
        run_specs([spec])
    return 0


if __name__ == "__main__":
    sys.exit(main())
