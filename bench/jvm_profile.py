"""Where the driver JVM spends a profiled run's CPU: Java Flight Recorder's execution samples,
summed by what Spark was doing.

The Python profile (cProfile, py-spy, Py4J call counts) sees a Spark job as time blocked on
the JVM. This sees inside it: a recording started with the JVM (:func:`jfr_options`, through
``SPARK_SUBMIT_OPTS``), dumped by the worker before Spark stops (:func:`dump`), and read back
with the JDK's ``jfr`` tool (:func:`summary`). Each category is the share of all samples whose
stack holds one of its frames (a sample can count in several: cache building inside a task).

    >>> opts = jfr_options()                                      # doctest: +SKIP
    >>> dump(spark, Path("/tmp/run/jvm.jfr"))                     # doctest: +SKIP
    >>> summary(Path("/tmp/run/jvm.jfr"))["categories"]           # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

RECORDING = "lockgate-bench"
#: the thread group of Py4J's request threads (PySpark's calls land there)
PY4J_THREAD = "Py4J requests (the round's DataFrames, actions)"
# the frames each kind of driver work is found by, shared by the categories and the Py4J phases
_ANALYSIS = ("Analyzer.execute", "CheckAnalysis")
_RESOLVE_READ = ("ResolveDataSource",)
# the optimizer's and planner's frames are RuleExecutor's and QueryPlanner's: found by the
# QueryExecution step that calls them
_OPTIMIZER = ("$anonfun$optimizedPlan", "QueryExecution.optimizedPlan")
_PLANNING = ("$anonfun$sparkPlan", "$anonfun$executedPlan", "QueryExecution$.prepareForExecution")
_PERSIST = ("CacheManager.cacheQuery",)
_ARROW = ("collectAsArrowToPython", "ArrowConverters")
#: what a sample was doing, by the frames its stack holds (class or method name fragments)
CATEGORIES: dict[str, tuple[str, ...]] = {
    "executor tasks (all)": ("Executor$TaskRunner.run",),
    "  computing and caching persisted frames": ("CachedRDDBuilder",),
    "    of it, writing the rows into cached columns": ("ColumnBuilder",),
    "      of it, choosing each column's compression": ("gatherCompressibilityStats",),
    "  deserialising tasks": ("ObjectInputStream",),
    "  reading Parquet": ("ParquetFileFormat", "VectorizedParquetRecordReader"),
    "  shuffle writes and sorts": ("ShuffleWriter", "ExternalSorter", "UnsafeExternalSorter"),
    "driver: analysis (each DataFrame step)": _ANALYSIS,
    "  of it, resolving each read's data source (file index, Hadoop settings)": _RESOLVE_READ,
    "driver: optimizer": _OPTIMIZER,
    "driver: physical planning": _PLANNING,
    "driver: plan description for the listener": ("explainString", "SparkPlanInfo"),
    "driver: persist (caching a plan)": _PERSIST,
    "driver: Arrow results to Python": _ARROW,
    "driver: scheduler": ("DAGScheduler", "TaskSchedulerImpl", "TaskSetManager"),
    "driver: status listeners": ("AppStatusListener", "SQLAppStatusListener"),
}


#: what the thread that serves Python's Py4J calls was doing (the round's DataFrames are built
#: there, one call after another: the plan phase's critical path), first match wins
PY4J_PHASES: dict[str, tuple[str, ...]] = {
    "resolving each read's data source": _RESOLVE_READ,
    "analysis (each DataFrame step)": (*_ANALYSIS, "QueryExecution.analyzed", "$anonfun$lazyAnalyzed"),
    "persist (caching a plan)": _PERSIST,
    "unpersist": ("CacheManager.uncacheQuery",),
    "optimizer": _OPTIMIZER,
    "physical planning": _PLANNING,
    "Arrow results to Python": _ARROW,
    "schema as JSON for Python": ("StructType.json", "DataType.json"),
    "parsing SQL text (selectExpr, DDL)": ("AbstractParser.parse", "AbstractSqlParser.parse"),
    "starting the session": ("SparkSession.<init>", "SparkContext.<init>"),
}
#: frames JFR keeps per sample; its default, 64, cuts a deep stack's outer frames (the thread's
#: root, where a task's or an API call's frames are), so categories found there were undercounted
STACK_DEPTH = 512


def jfr_options() -> str:
    """The JVM options that start the recording (profile settings: 20 ms samples, stacks kept
    to :data:`STACK_DEPTH` frames)."""
    return (f"-XX:FlightRecorderOptions=stackdepth={STACK_DEPTH} "
            f"-XX:StartFlightRecording=name={RECORDING},settings=profile")


def dump(spark: Any, path: Path) -> bool:
    """Write the running recording of ``spark``'s driver JVM to ``path`` (``jcmd``); False
    when the JDK's tools are not there or the JVM has no recording."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return False
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    done = subprocess.run([jcmd, str(pid), "JFR.dump", f"name={RECORDING}", f"filename={path}"],
                          capture_output=True, text=True, timeout=120)
    return done.returncode == 0 and path.exists() and path.stat().st_size > 0


def summary(path: Path) -> dict[str, Any]:
    """Shares of the recording's execution samples: per category (:data:`CATEGORIES`) and per
    thread group (executor tasks, Py4J's request threads, the Arrow server, the scheduler...);
    with the seconds the JIT's threads spent compiling (off the samples) and the GC pauses;
    the Py4J thread's samples by phase (:data:`PY4J_PHASES`); the share of samples whose stack
    the recording cut short. The recording is read once."""
    out = subprocess.run(["jfr", "print", "--stack-depth", str(STACK_DEPTH), "--json", "--events",
                          "jdk.ExecutionSample,jdk.Compilation,jdk.GarbageCollection", str(path)],
                         capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    samples = [e for e in events if e["type"] == "jdk.ExecutionSample"]
    compilations = [e for e in events if e["type"] == "jdk.Compilation"]
    hits: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    py4j: Counter[str] = Counter()
    truncated = 0
    for e in samples:
        v = e["values"]
        group = _thread_group(v["sampledThread"].get("javaName") or v["sampledThread"].get("osName") or "?")
        threads[group] += 1
        truncated += bool(v["stackTrace"].get("truncated"))
        names = [f"{f['method']['type']['name'].rsplit('/', 1)[-1]}.{f['method']['name']}"
                 for f in v["stackTrace"]["frames"]]
        for cat, marks in CATEGORIES.items():
            if any(m in n for n in names for m in marks):
                hits[cat] += 1
        if group == PY4J_THREAD:
            py4j[next((phase for phase, marks in PY4J_PHASES.items()
                       if any(m in n for n in names for m in marks)), "other")] += 1
    total = max(1, len(samples))
    py4j_total = max(1, threads[PY4J_THREAD])
    return {
        "samples": len(samples),
        "truncated_pct": round(100 * truncated / total, 1),
        "categories": {cat: round(100 * hits[cat] / total, 1) for cat in CATEGORIES},
        "threads": {t: round(100 * n / total, 1) for t, n in threads.most_common(8)},
        "py4j_thread": {p: round(100 * py4j[p] / py4j_total, 1) for p in [*PY4J_PHASES, "other"]},
        "jit_compile_s": round(sum(_seconds(e["values"]["duration"]) for e in compilations), 2),
        "gc_pause_s": round(sum(_seconds(e["values"]["sumOfPauses"]) for e in events
                                if e["type"] == "jdk.GarbageCollection"), 2),
        "compilations": len(compilations),
    }


def _seconds(value: str) -> float:
    """A JFR duration (``PT0.25S``, ``PT1M2.5S``) in seconds."""
    m = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", value or "")
    if not m:
        return 0.0
    h, mi, sec = m.groups()
    return int(h or 0) * 3600 + int(mi or 0) * 60 + float(sec or 0)


def _thread_group(name: str) -> str:
    if name.startswith("Executor task"):
        return "executor tasks"
    if name.startswith("Thread-"):
        return PY4J_THREAD
    for prefix in ("serve-Arrow", "dag-scheduler", "spark-listener", "broadcast-exchange", "task-result-getter",
                   "dispatcher"):
        if name.startswith(prefix):
            return prefix
    return "other"


def markdown(s: dict[str, Any]) -> str:
    """The summary as the profile page's section."""
    lines = [f"## The driver JVM ({s['samples']} execution samples, Java Flight Recorder)", "",
             "| what the JVM was doing | share of samples |", "|---|---:|"]
    lines += [f"| {cat.replace(' ', '&nbsp;', len(cat) - len(cat.lstrip()))} | {pct:.1f} % |"
              for cat, pct in s["categories"].items()]
    lines += ["", "| thread | share of samples |", "|---|---:|"]
    lines += [f"| {t} | {pct:.1f} % |" for t, pct in s["threads"].items()]
    lines += ["", "| the Py4J thread (the round's DataFrames are built there) was | share of its samples |",
              "|---|---:|"]
    lines += [f"| {p} | {pct:.1f} % |" for p, pct in s["py4j_thread"].items()]
    lines += ["", f"{s['truncated_pct']:.1f} % of the samples' stacks were cut at {STACK_DEPTH} frames.",
              "", f"Off the samples: the JIT compiled {s['compilations']} methods in {s['jit_compile_s']:.1f} s of its "
              f"threads' time; garbage collection paused the JVM for {s['gc_pause_s']:.1f} s."]
    return "\n".join(lines) + "\n"


__all__ = ["CATEGORIES", "PY4J_PHASES", "PY4J_THREAD", "STACK_DEPTH", "dump", "jfr_options", "markdown", "summary"]
