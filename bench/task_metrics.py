"""Spark's own account of a run's tasks, read from its event log.

The profile counts Spark jobs from the driver, but a job's cost is its tasks: how many there
are and what each spends before it touches a row. Every task deserialises its stage's whole
plan (``Executor Deserialize Time``); a round whose last stage unions many operators' outputs
paid that once per partition (a profile run of 2026-11, in git's history of bench/results). A profile run turns Spark's
event log on (:func:`event_log_conf`) and sums its task-end events (:func:`task_totals`).

    >>> conf = event_log_conf(Path("/tmp/run/spark-events"))   # doctest: +SKIP
    >>> task_totals(Path("/tmp/run/spark-events"))             # doctest: +SKIP
    {'jobs': 21, 'stages': 40, 'tasks': 103, 'deserialize_ms': 1037, 'run_ms': 29093, 'gc_ms': 2530}
"""

from __future__ import annotations

import json
from pathlib import Path

#: the task-end metrics summed, by the name they get in the totals
_METRICS = {"deserialize_ms": "Executor Deserialize Time", "run_ms": "Executor Run Time", "gc_ms": "JVM GC Time"}


def event_log_conf(folder: Path) -> dict[str, str]:
    """Spark settings that write the session's event log, uncompressed, into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": folder.resolve().as_uri(),
    }


def task_totals(folder: Path, after_job: int = 0) -> dict[str, int]:
    """Jobs, stages and tasks in the event logs under ``folder``, and what the tasks spent
    (ms): deserialising their stage's plan, running, in the JVM's garbage collector. Only jobs
    numbered ``after_job`` and up count (the run's own, not the session's warm-up), and the
    tasks of their stages. A log still open is read as far as Spark has flushed it (it does so
    at every job's end)."""
    jobs: set[int] = set()
    stages: set[int] = set()
    ran: set[int] = set()
    totals = dict.fromkeys(["tasks", *_METRICS], 0)
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # the last line of a log still being written
                    continue
                kind = event.get("Event")
                if kind == "SparkListenerJobStart" and event["Job ID"] >= after_job:
                    jobs.add(event["Job ID"])
                    stages.update(event["Stage IDs"])
                elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stages:
                    # a job's start is logged before any of its tasks end
                    ran.add(event["Stage ID"])
                    metrics = event.get("Task Metrics") or {}
                    totals["tasks"] += 1
                    for name, key in _METRICS.items():
                        totals[name] += int(metrics.get(key, 0))
    return {"jobs": len(jobs), "stages": len(ran), **totals}


__all__ = ["event_log_conf", "task_totals"]
