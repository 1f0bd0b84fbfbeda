"""From ``results.json`` to ``results.md`` (the tables) and ``chart.png``; every figure is a
median over the measured repetitions of one run of the suite, and every ratio compares
runs of that same suite run."""

from __future__ import annotations

import json
import pstats
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import jvm_profile
from .config import LG_DETAIL, LG_PHASES, SHORT, STREAMING, TARGETS, per_cycle_target
from .workloads import WORKLOADS

SSS_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "other")


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x (None with fewer than two distinct x)."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _phase_ms(run: dict[str, Any]) -> dict[str, float]:
    """Per-run phase totals in ms, with 'other' = time not in any reported phase."""
    ph = dict(run.get("phases_ms") or {})
    total = run["process_s"] * 1000
    if run["contender"] == "lockgate":
        return {k: ph.get(k, 0.0) for k in LG_PHASES + LG_DETAIL}
    if run["contender"] in ("sss", "sss_rocksdb"):
        out = {k: ph.get(k, 0.0) for k in SSS_PHASES if k != "other"}
        out["other"] = total - ph.get("triggerExecution", 0.0)
        out["stateCommit"] = run.get("state_commit_ms", 0.0)
        return out
    return {}


def checkpoint_ms(run: dict[str, Any]) -> float:
    """Time a run spent persisting checkpoints, from its own phase figures.

    Lockgate: persisting the state snapshots (``snapshot_io``), checking and opening the
    last one at the start of the next round (``state_load``) and the checkpoint row. Runs
    recorded before those timings existed: the write phase minus the stage writes, plus
    the row. Structured Streaming: the offset log (walCommit), the commit log
    (commitOffsets) and the state stores' commits."""
    ph = run.get("phases_ms") or {}
    if run["contender"] == "lockgate":
        if "snapshot_io" in ph or "state_load" in ph:
            return ph.get("snapshot_io", 0.0) + ph.get("state_load", 0.0) + ph.get("checkpoint", 0.0)
        if "write" in ph:  # snapshots run alongside the stage writes: what they add to the round
            return max(0.0, ph["write"] - ph.get("stage", 0.0)) + ph.get("checkpoint", 0.0)
        return ph.get("snapshot", 0.0) + ph.get("checkpoint", 0.0)
    if run["contender"] in ("sss", "sss_rocksdb"):
        return ph.get("walCommit", 0.0) + ph.get("commitOffsets", 0.0) + run.get("state_commit_ms", 0.0)
    return 0.0


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    runs = [r for r in doc["runs"] if not r.get("warmup") and not r.get("unsupported")]
    cuts = doc["cuts"]
    finest = max(cuts)
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[(r["workload"], r["contender"])].append(r)
    table: dict[str, dict[str, Any]] = {}
    for (wl, c), rs in sorted(by.items()):
        fin = [r for r in rs if c == "batch" or r["cut"] == finest]
        thr = [r["throughput"] for r in fin]
        s: dict[str, Any] = {
            "runs": len(fin),
            "throughput": _median(thr),
            "throughput_min": min(thr) if thr else None,
            "throughput_max": max(thr) if thr else None,
            "process_s": _median([r["process_s"] for r in fin]),
            "cpu_s": _median([r["cpu_s"] for r in fin if "cpu_s" in r]),
            "cpu_throughput": _median([r["events"] / r["cpu_s"] for r in fin if r.get("cpu_s")]),
            "startup_s": _median([r["startup_s"] for r in fin]),
            "setup_s": _median([r["setup_s"] for r in fin]),
            "peak_rss_mb": _median([r["peak_rss_mb"] for r in fin]),
            "cycles": _median([r["cycles"] for r in fin]),
            "spark_jobs_per_cycle": _median([r["spark_jobs"] / r["cycles"] for r in fin]),
            "py4j_calls_per_cycle": _median([r["py4j_calls"] / r["cycles"] for r in fin]),
            "py4j_ms_per_cycle": _median([r["py4j_s"] * 1000 / r["cycles"] for r in fin]),
            "py4j_short_ms_per_cycle": _median([r.get("py4j_short_s", 0.0) * 1000 / r["cycles"] for r in fin]),
            "events": fin[0]["events"] if fin else None,
        }
        if c != "batch":
            names = sorted({k for r in fin for k in _phase_ms(r)})
            s["phase_ms_per_cycle"] = {k: _median([_phase_ms(r).get(k, 0.0) / r["cut"] for r in fin]) for k in names}
            s["checkpoint_share"] = _median([checkpoint_ms(r) / (r["process_s"] * 1000) for r in fin])
            s["checkpoint_row_share"] = _median(
                [(r.get("phases_ms") or {}).get("checkpoint", 0.0) / (r["process_s"] * 1000) for r in fin]
            ) if c == "lockgate" else None
            s["checkpoint_ms_per_cycle"] = _median([checkpoint_ms(r) / r["cut"] for r in fin])
            if c == "lockgate":
                s["snapshot_upper_share"] = _median([
                    ((r.get("phases_ms") or {}).get("snapshot", 0.0) + (r.get("phases_ms") or {}).get("checkpoint", 0.0))
                    / (r["process_s"] * 1000) for r in fin])
            s["bytes_per_checkpoint"] = _median([r["checkpoint_bytes"] / max(1, r["cut"]) for r in fin])
            s["ms_per_cycle"] = _median([r["process_s"] * 1000 / r["cut"] for r in fin])
            s["per_cycle_ms"] = (lambda b: None if b is None else b * 1000)(slope([(r["cut"], r["process_s"]) for r in rs]))
            s["per_cycle_cpu_ms"] = (lambda b: None if b is None else b * 1000)(
                slope([(r["cut"], r["cpu_s"]) for r in rs if "cpu_s" in r]))
            phase_names = sorted({k for r in rs for k in _phase_ms(r)})
            s["phase_slopes_ms"] = {k: slope([(r["cut"], _phase_ms(r).get(k, 0.0)) for r in rs]) for k in phase_names}
            s["process_by_cut"] = {str(cut): _median([r["process_s"] for r in rs if r["cut"] == cut]) for cut in cuts}
            split = [x for x in (rounds(r) for r in fin) if x is not None]
            if split:
                s["rounds"] = {k: _median([x[k] for x in split]) for k in split[0]}
        table.setdefault(wl, {})[c] = s
    ratios: dict[str, dict[str, float | None]] = {}
    for wl, cs in table.items():
        lg = cs.get("lockgate", {}).get("throughput")
        ratios[wl] = {
            f"lockgate/{c}": (lg / cs[c]["throughput"]) if lg and c in cs and cs[c]["throughput"] else None
            for c in ("sss", "sss_rocksdb", "batch")
        }
        if "lockgate" in cs and "batch" in cs:
            ratios[wl]["batch_factor"] = cs["lockgate"]["process_s"] / cs["batch"]["process_s"]
        lg_cpu = cs.get("lockgate", {}).get("cpu_throughput")
        for c in ("sss", "sss_rocksdb", "batch"):
            other = cs.get(c, {}).get("cpu_throughput")
            ratios[wl][f"cpu lockgate/{c}"] = lg_cpu / other if lg_cpu and other else None
        if cs.get("lockgate", {}).get("cpu_s") and cs.get("batch", {}).get("cpu_s"):
            ratios[wl]["cpu_batch_factor"] = cs["lockgate"]["cpu_s"] / cs["batch"]["cpu_s"]
    restores: dict[str, dict[str, Any]] = {}
    by_r: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in doc.get("restores", []):
        by_r[(r["workload"], r["contender"])].append(r)
    for (wl, c), rs in sorted(by_r.items()):
        restores.setdefault(wl, {})[c] = {
            "runs": len(rs),
            "normal_first_commit_s": _median([r["normal_first_commit_s"] for r in rs]),
            "restart_first_commit_s": _median([r["restart_first_commit_s"] for r in rs]),
            "restore_latency_s": _median([r["restore_latency_s"] for r in rs]),
            "restore_latency_min": min(r["restore_latency_s"] for r in rs),
            "restore_latency_max": max(r["restore_latency_s"] for r in rs),
            "windows_replayed": max(r["windows_replayed"] for r in rs),
            "kill_after_window": rs[0]["kill_after_window"],
            "windows": rs[0]["windows"],
        }
    return {"table": table, "ratios": ratios, "restores": restores, "targets": targets(doc, table, ratios),
            "unsupported": doc.get("unsupported") or {}}


def targets(doc: dict[str, Any], table: dict[str, Any], ratios: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for wl in table:
        for c in ("sss", "sss_rocksdb"):
            r = ratios[wl].get(f"lockgate/{c}")
            cpu = ratios[wl].get(f"cpu lockgate/{c}")
            if r is not None:
                out.append({"target": f"{wl}: Lockgate / {SHORT[c]} throughput >= {TARGETS['ratio_vs_sss']}",
                            "value": f"{r:.2f}", "met": r >= TARGETS["ratio_vs_sss"]})
            if cpu is not None:
                out.append({"target": f"{wl}: Lockgate / {SHORT[c]} per CPU-second >= {TARGETS['cpu_ratio_vs_sss']}",
                            "value": f"{cpu:.2f}", "met": cpu >= TARGETS["cpu_ratio_vs_sss"]})
    bf = ratios.get("w1", {}).get("batch_factor")
    if bf is not None:
        note = "" if doc["size"]["name"] == "full" else f" (measured on {doc['size']['name']}, target is for full)"
        cbf = ratios["w1"].get("cpu_batch_factor")
        out.append({"target": f"w1: Lockgate within {TARGETS['batch_factor_w1']}x of batch{note}",
                    "value": f"{bf:.2f}x" + (f" (CPU {cbf:.2f}x)" if cbf else ""),
                    "met": bf <= TARGETS["batch_factor_w1"]})
    for wl, cs in table.items():
        lg = cs.get("lockgate")
        if not lg:
            continue
        pc = lg.get("per_cycle_ms")
        if pc is not None:
            limit_ms = per_cycle_target(wl)
            cpc = lg.get("per_cycle_cpu_ms")
            out.append({"target": f"{wl}: Lockgate per-cycle cost (slope) <= {limit_ms:.0f} ms",
                        "value": f"{pc:.0f} ms" + (f" (CPU {cpc:.0f} ms)" if cpc is not None else ""),
                        "met": pc <= limit_ms})
        share, row = lg.get("checkpoint_share"), lg.get("checkpoint_row_share") or 0.0
        if share is not None:
            limit = TARGETS["checkpoint_share"]
            upper = lg.get("snapshot_upper_share")
            out.append({"target": f"{wl}: Lockgate checkpoint overhead < {limit:.0%}",
                        "value": f"{share:.1%} (checkpoint row {row:.1%}"
                                 + (f"; whole snapshot phase, the round's compute included, {upper:.1%}"
                                    if upper is not None else "") + ")",
                        "met": share < limit})
    return out


#: the rounds a run's "first rounds" are: a fresh JVM compiling, rounds built step by step
FIRST_ROUNDS = 6


def rounds(run: dict[str, Any]) -> dict[str, float] | None:
    """A streaming run's rounds (micro-batches) split in two: the first :data:`FIRST_ROUNDS`, in s
    (from the first's start to the next one's), the rest in s (to the last one's end), and the
    rest's median round in ms. A Lockgate round runs from its cycle's start to its end; a
    micro-batch from its start for its ``triggerExecution`` (batches with no rows left out)."""
    pc = run.get("per_cycle") or []
    if run["contender"] == "lockgate":
        spans = [(c["start"], c["end"]) for c in pc if "start" in c and "end" in c]
    else:
        spans = [(c["start"], c["start"] + c["triggerExecution"] / 1000)
                 for c in pc if c.get("rows") and "start" in c and "triggerExecution" in c]
    if len(spans) <= FIRST_ROUNDS + 1:
        return None
    rest = spans[FIRST_ROUNDS:]
    return {"first_s": rest[0][0] - spans[0][0], "rest_s": rest[-1][1] - rest[0][0],
            "rest_rounds": len(rest), "steady_ms": statistics.median((e - b) * 1000 for b, e in rest)}


def _per_cycle_label() -> str:
    """The chart's per-cycle target line, from :data:`TARGETS` (its exceptions by workload named)."""
    by_limit: dict[float, list[str]] = {}
    for wl, limit in TARGETS["per_cycle_ms_by_workload"].items():
        by_limit.setdefault(limit, []).append(wl.upper())
    rest = "; ".join(f"{limit:.0f} on {', '.join(wls)}" for limit, wls in sorted(by_limit.items()))
    return f"target {TARGETS['per_cycle_ms']:.0f} ms" + (f" ({rest})" if rest else "")


# -- Markdown ------------------------------------------------------------------------------
def _f(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


NOT_SUPPORTED = "not supported by Structured Streaming"


def _none(summ: dict[str, Any], wl: str, c: str) -> str:
    """What a table shows for a contender without a figure: Spark's refusal, or a dash."""
    return NOT_SUPPORTED if c in summ["unsupported"].get(wl, {}) else "–"


def _ratio(summ: dict[str, Any], wl: str, key: str) -> str:
    """A ``lockgate/<contender>`` ratio cell (``n/s`` where that contender refuses the query)."""
    c = key.split("/", 1)[1]
    return "n/s" if c in summ["unsupported"].get(wl, {}) else _f(summ["ratios"][wl].get(key), "{:.2f}")


def unsupported_lines(summ: dict[str, Any]) -> list[str]:
    """The queries Structured Streaming refused, each with Spark's one-line reason."""
    rows = [(wl, c, reason) for wl, cs in summ["unsupported"].items() for c, reason in cs.items()]
    if not rows:
        return []
    lines = ["", "**Not supported by Structured Streaming** (n/s above): Spark refused to start the query; "
             "its reason, the AnalysisException's first line:", ""]
    return lines + [f"- {WORKLOADS[wl].title}, {SHORT[c]}: `{reason}`" for wl, c, reason in rows]


def markdown(doc: dict[str, Any], summ: dict[str, Any]) -> str:
    m, size = doc["machine"], doc["size"]
    table, ratios = summ["table"], summ["ratios"]
    finest = max(doc["cuts"])
    refused = summ["unsupported"].values()
    contenders = [c for c in ("lockgate", "sss", "sss_rocksdb", "batch")
                  if any(c in t for t in table.values()) or any(c in u for u in refused)]
    lines = [
        "# Lockgate benchmark results",
        "",
        f"- Date: {doc['started'][:10]} (run {doc['started']} – {doc['finished']} UTC)",
        f"- Machine: {m['cpus']} cores, {m['memory_gib']} GiB RAM, {m['platform']}, Python {m['python']}; "
        f"load average at start {m['load_avg']}, at end {m.get('load_avg_end')}",
        f"- Data: size `{size['name']}`, {size['events']:,} Nexmark events (seed 42) in {size['windows']} "
        f"Parquet files of 10 s per stream ({size['events_per_second']:,} events/s of event time)",
        f"- Spark: local[2], driver memory {doc['spark']['spark.driver.memory']}, "
        f"{doc['spark']['spark.sql.shuffle.partitions']} shuffle partitions, for every contender",
        f"- {doc['reps']} measured repetitions after {doc['warmup']} warm-up round(s), interleaved; medians, "
        "spread as min–max; every run's output equalled the batch job's before its time was kept",
        "",
    ]
    # the load at the end is mostly the bench's own (two busy cores); only the start tells of others
    if m["load_avg"][0] > m["cpus"]:
        lines += [
            f"> **Busy machine at start:** the 1-minute load average was {m['load_avg'][0]:.2f} on "
            f"{m['cpus']} cores when the run began (it lags by about a minute). If that work went on "
            "during the run, absolute figures are pessimistic and the spread wider; ratios between "
            "interleaved contenders are the more robust reading.",
            "",
        ]
    lines += [
        f"## Throughput, one 10 s window per cycle ({finest} cycles)",
        "",
        "Input events per second from the first read to the last commit (session start-up apart).",
        "",
        "| workload | " + " | ".join(SHORT[c] for c in contenders) + " | LG/SSS | LG/SSS+RocksDB | LG/batch |",
        "|---|" + "---:|" * (len(contenders) + 3),
    ]
    for wl in table:
        cells = []
        for c in contenders:
            s = table[wl].get(c)
            cells.append(_none(summ, wl, c) if not s
                         else f"{_f(s['throughput'])} ({_f(s['throughput_min'])}–{_f(s['throughput_max'])})")
        lines.append(f"| {WORKLOADS[wl].title} | " + " | ".join(cells) + " | "
                     + " | ".join(_ratio(summ, wl, k) for k in ("lockgate/sss", "lockgate/sss_rocksdb", "lockgate/batch"))
                     + " |")
    lines += unsupported_lines(summ)
    lines += ["", "Seconds from first read to last commit, and session start-up (JVM + SparkSession):", "",
              "| workload | " + " | ".join(SHORT[c] for c in contenders) + " | start-up (median of all) |",
              "|---|" + "---:|" * (len(contenders) + 1)]
    for wl in table:
        ss = {c: table[wl].get(c) for c in contenders}
        su = _median([s["startup_s"] for s in ss.values() if s])
        lines.append(f"| {WORKLOADS[wl].title} | "
                     + " | ".join(_none(summ, wl, c) if not s else f"{s['process_s']:.1f}" for c, s in ss.items())
                     + f" | {_f(su, '{:.1f}')} s |")
    if any(s.get("cpu_s") for t in table.values() for s in t.values()):
        lines += ["", "CPU seconds of each run's process tree (driver, JVM, Python workers; set-up and processing, "
                  "session start-up apart), and the same ratios on input events per CPU-second: the reading that "
                  "other processes on the machine disturb least.", "",
                  "| workload | " + " | ".join(SHORT[c] for c in contenders) + " | LG/SSS | LG/SSS+RocksDB | LG/batch |",
                  "|---|" + "---:|" * (len(contenders) + 3)]
        for wl in table:
            r = ratios[wl]
            lines.append(f"| {WORKLOADS[wl].title} | "
                         + " | ".join(_none(summ, wl, c) if c not in table[wl] else _f(table[wl][c].get("cpu_s"), "{:.1f}")
                                      for c in contenders) + " | "
                         + " | ".join("n/s" if k in summ["unsupported"].get(wl, {})
                                      else _f(r.get(f"cpu lockgate/{k}"), "{:.2f}") for k in ("sss", "sss_rocksdb", "batch"))
                         + " |")
    lines += [
        "",
        f"## Where a cycle's time goes ({finest} cycles, ms per cycle, median)",
        "",
        "Lockgate: read (list files, footers, reader), plan (build the DataFrames; template_bind is plan when "
        "the round was bound from its template, its first round of a shape included), write (the state "
        "snapshot, then the sinks' stage writes; snapshot and stage are its two parts; snapshot_io is the "
        "part of snapshot that persists the state, the rest computes the round), commit (sink rename), "
        "checkpoint (catalog row), other (outside the phases: catalog rows of the cycle, observations). Structured Streaming: its durationMs per batch (addBatch runs the batch's Spark job, "
        "stateCommit is the state stores' commit time inside it), other = between triggers.",
        "",
    ]
    for c, order in (("lockgate", LG_PHASES + LG_DETAIL), ("sss", SSS_PHASES), ("sss_rocksdb", SSS_PHASES)):
        rows = [(wl, table[wl][c]) for wl in table if c in table[wl]]
        if not rows:
            continue
        cols = [k for k in order if any(k in s_.get("phase_ms_per_cycle", {}) for _, s_ in rows)]
        if c != "lockgate":
            cols.append("stateCommit")
        lines += [f"| {SHORT[c]} | " + " | ".join(cols) + " | total |", "|---|" + "---:|" * (len(cols) + 1)]
        for wl, s_ in rows:
            ph = s_.get("phase_ms_per_cycle", {})
            total = s_.get("ms_per_cycle")
            lines.append(f"| {WORKLOADS[wl].title} | " + " | ".join(_f(ph.get(k)) for k in cols) + f" | {_f(total)} |")
        lines.append("")
    cuts = sorted(doc["cuts"])
    if len(cuts) > 1:
        lines += [
            "",
            f"## Fixed cost per cycle (the same events cut into {', '.join(map(str, cuts))} cycles)",
            "",
            "The slope of run time over the number of cycles, in ms per cycle, and the phases it is made of "
            "(slope of each phase's total). Lockgate's phases come from its catalog (read, plan = building "
            "the DataFrames, write = state snapshot then sink stage (snapshot, stage: its parts), "
            "commit = sink rename, checkpoint = "
            "catalog row, other = controller bookkeeping outside the phases); Structured Streaming's from "
            "its own progress (durationMs).",
            "",
            "| workload | contender | ms/cycle (slope) | CPU ms/cycle (slope) | run time by cut (s) | "
            "phase slopes, ms/cycle |",
            "|---|---|---:|---:|---|---|",
        ]
        for wl in table:
            for c in STREAMING:
                s = table[wl].get(c)
                if not s:
                    continue
                by_cut = ", ".join(f"{k}: {_f(v, '{:.1f}')}" for k, v in sorted(s["process_by_cut"].items(), key=lambda kv: int(kv[0])))
                phases = ", ".join(f"{k} {v:.0f}" for k, v in s["phase_slopes_ms"].items() if v is not None and abs(v) >= 0.5)
                lines.append(f"| {WORKLOADS[wl].title} | {SHORT[c]} | {_f(s['per_cycle_ms'])} | "
                             f"{_f(s.get('per_cycle_cpu_ms'))} | {by_cut} | {phases} |")
    lines += [
        "",
        f"## Checkpoints and driver cost ({finest} cycles)",
        "",
        "Checkpoint share: what persisting Lockgate's checkpoints takes of run time: writing the state "
        "snapshot files (snapshot_io: on the driver path the file write alone; on Spark's path the whole "
        "write), checking and opening the last snapshot at the next round (state_load), and the catalog "
        "row (the row alone in brackets). The engine has no switch to run without checkpoints (the snapshot "
        "is how state crosses rounds), so this is measured from the phase timings. "
        "Structured Streaming: walCommit + commitOffsets + state store commits over run time (a file sink "
        "cannot run without a checkpoint either). Bytes: everything written under the checkpoint folder "
        "(Lockgate: snapshots + catalog) per cycle.",
        "",
        "Py4J: Python -> JVM round trips per cycle and the time spent in the short ones (< 10 ms: no Spark "
        "job ran; analysis, schema look-ups, plan building). Structured Streaming drives its batches inside "
        "the JVM (no Py4J per batch; its calls are the query's set-up).",
        "",
        "| workload | contender | checkpoint share | bytes/checkpoint | Spark jobs/cycle | Py4J calls/cycle | "
        "Py4J short-call ms/cycle | peak memory (MB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for wl in table:
        for c in contenders:
            s = table[wl].get(c)
            if not s:
                continue
            share = s.get("checkpoint_share")
            row = s.get("checkpoint_row_share")
            share_txt = "–" if share is None else f"{share:.1%}" + (f" ({row:.1%})" if row is not None else "")
            lg = c == "lockgate"
            lines.append(
                f"| {WORKLOADS[wl].title} | {SHORT[c]} | {share_txt} | {_f(s.get('bytes_per_checkpoint'))} | "
                f"{_f(s['spark_jobs_per_cycle'], '{:.1f}')} | {_f(s['py4j_calls_per_cycle']) if lg else '–'} | "
                f"{_f(s['py4j_short_ms_per_cycle']) if lg else '–'} | {_f(s['peak_rss_mb'])} |"
            )
    if summ["restores"]:
        lines += [
            "",
            "## Restore after kill -9 of the whole run (Python and JVM)",
            "",
            "Time from process launch to the first committed window: fresh, and after a kill -9 right after "
            "a window's checkpoint (Lockgate: `LOCKGATE_FAULT=after_checkpoint:K`; Structured Streaming: when "
            "`commits/K` appears). Restore latency = restart – fresh; windows replayed = windows that had "
            "started before the kill and ran again.",
            "",
            "| workload | contender | fresh → first commit (s) | restart → first new commit (s) | "
            "restore latency (s) | windows replayed |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for wl, cs in summ["restores"].items():
            for c, s in cs.items():
                lines.append(
                    f"| {WORKLOADS[wl].title} | {SHORT[c]} | {s['normal_first_commit_s']:.1f} | "
                    f"{s['restart_first_commit_s']:.1f} | {s['restore_latency_s']:+.1f} "
                    f"({s['restore_latency_min']:+.1f}…{s['restore_latency_max']:+.1f}) | {s['windows_replayed']} |"
                )
        first = next(iter(summ["restores"].values()))
        k = next(iter(first.values()))
        lines += ["", f"Killed after window {k['kill_after_window']} of {k['windows']}; every restored output "
                  "equalled the uninterrupted run's."]
    split = [(wl, c, cs[c]["rounds"]) for wl, cs in summ["table"].items() for c in STREAMING
             if c in cs and cs[c].get("rounds")]
    if split:
        lines += ["", f"## First rounds and the rest ({finest} cycles)", "",
                  f"Each run's first {FIRST_ROUNDS} rounds (micro-batches) from the first's start to the next one's; "
                  "the rest from there to the last one's end, and its median round.", "",
                  f"| workload | contender | first {FIRST_ROUNDS} rounds, s | the rest, s | the rest's median round, ms |",
                  "|---|---|---:|---:|---:|"]
        for wl, c, x in split:
            lines.append(f"| {WORKLOADS[wl].title} | {SHORT[c]} | {x['first_s']:.1f} | "
                         f"{x['rest_s']:.1f} ({x['rest_rounds']:.0f}) | {x['steady_ms']:,.0f} |")
    if summ["targets"]:
        lines += ["", "## Targets", "", "| target | measured | met |", "|---|---:|:---:|"]
        for t in summ["targets"]:
            verdict = {True: "yes", False: "**no**", None: "undetermined (see note)"}[t["met"]]
            lines.append(f"| {t['target']} | {t['value']} | {verdict} |")
    profiles = doc.get("profiles") or {}
    if profiles:
        lines += ["", f"## Lockgate profile (one run per workload, {finest} cycles, cProfile + py-spy)", ""]
        for wl, p in profiles.items():
            lines.append(f"- {WORKLOADS[wl].title}: {p['py4j_calls_per_cycle']:.0f} Py4J calls "
                         f"({p['py4j_ms_per_cycle']:.0f} ms) and {p['spark_jobs_per_cycle']:.1f} Spark jobs per "
                         f"cycle; details in `profile/{wl}.md`")
    lines += ["", "Chart: `chart.png`; every run: `results.json`.", ""]
    return "\n".join(lines)


def _axis_label(title: str, n: int) -> str:
    """A workload's label under the chart's bars: its title's name (``W1 tumbling 10 s``), or, with more
    than four workloads side by side, its id over its query (``W1`` / ``(q7-like)``) so labels do not overlap."""
    if n <= 4:
        return title.split(" (")[0]
    query = title[title.index("("):] if "(" in title else ""
    return f"{title.split(' ')[0]}\n{query}" if query else title.split(" ")[0]


def chart(doc: dict[str, Any], summ: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = summ["table"]
    wls = list(table)
    labels = [_axis_label(WORKLOADS[w].title, len(wls)) for w in wls]
    contenders = [c for c in ("lockgate", "sss", "sss_rocksdb", "batch") if any(c in t for t in table.values())]
    colors = {"lockgate": "#1f77b4", "sss": "#ff7f0e", "sss_rocksdb": "#d62728", "batch": "#7f7f7f"}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(contenders))
    ax = axes[0]
    for i, c in enumerate(contenders):
        xs, ys, lo, hi = [], [], [], []
        for j, wl in enumerate(wls):
            s = table[wl].get(c)
            if s and s["throughput"]:
                xs.append(j + (i - (len(contenders) - 1) / 2) * width)
                ys.append(s["throughput"])
                lo.append(s["throughput"] - s["throughput_min"])
                hi.append(s["throughput_max"] - s["throughput"])
        ax.bar(xs, ys, width, yerr=[lo, hi], label=SHORT[c], color=colors[c], capsize=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(wls)), labels, fontsize=8)
    ax.set_ylabel("input events / s (log)")
    ax.set_title(f"Throughput, one 10 s window per cycle ({max(doc['cuts'])} cycles)")
    ax.legend(fontsize=8)
    ax = axes[1]
    stream = [c for c in contenders if c in STREAMING]
    width = 0.8 / max(1, len(stream))
    for i, c in enumerate(stream):
        xs, ys = [], []
        for j, wl in enumerate(wls):
            s = table[wl].get(c)
            v = s.get("per_cycle_ms") if s else None
            if v is None and s:
                v = s.get("ms_per_cycle")
            if v is not None:
                xs.append(j + (i - (len(stream) - 1) / 2) * width)
                ys.append(v)
        ax.bar(xs, ys, width, label=SHORT[c], color=colors[c])
    ax.axhline(TARGETS["per_cycle_ms"], color="k", linestyle="--", linewidth=1, label=_per_cycle_label())
    ax.set_xticks(range(len(wls)), labels, fontsize=8)
    ax.set_ylabel("ms per cycle")
    cuts = ", ".join(map(str, sorted(doc["cuts"])))
    ax.set_title(f"Per-cycle overhead (slope over {cuts} cycles)" if len(doc["cuts"]) > 1 else "ms per cycle")
    ax.legend(fontsize=8)
    m = doc["machine"]
    fig.suptitle(f"Lockgate bench, size {doc['size']['name']} ({doc['size']['events']:,} events), "
                 f"{doc['started'][:10]}, {m['cpus']} cores / {m['memory_gib']} GiB, load avg {m['load_avg'][0]}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- profiles ------------------------------------------------------------------------------
_FRAME = re.compile(r"^(?P<fn>.+?) \((?P<file>[^()]+?)(?::\d+)?\)$")


def _short(path: str) -> str:
    for key in ("lockgate/", "bench/", "pyspark/", "py4j/", "sqlalchemy/", "pyarrow/"):
        i = path.rfind(key)
        if i >= 0:
            return path[i:]
    return path.rsplit("/", 1)[-1]


def pyspy_inclusive(raw: Path, rate: float = 50.0) -> tuple[float, list[tuple[str, float]]]:
    """Seconds of the run thread, and inclusive seconds per function, from a py-spy raw
    (collapsed stacks) file, limited to stacks under ``run_lockgate``."""
    incl: dict[str, int] = defaultdict(int)
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or "run_lockgate" not in stack:
            continue
        count = int(n)
        total += count
        seen = set()
        for frame in stack.split(";"):
            m = _FRAME.match(frame.strip())
            key = f"{m['fn']} ({_short(m['file'])})" if m else frame.strip()
            if key not in seen:
                seen.add(key)
                incl[key] += count
    return total / rate, sorted(((k, v / rate) for k, v in incl.items()), key=lambda kv: -kv[1])


def profile_summary(res: dict[str, Any], raw: Path | None) -> dict[str, Any]:
    cycles = res["cycles"]
    out: dict[str, Any] = {
        "cycles": cycles,
        "process_s": res["process_s"],
        "py4j_calls_per_cycle": res["py4j_calls"] / cycles,
        "py4j_ms_per_cycle": res["py4j_s"] * 1000 / cycles,
        "spark_jobs_per_cycle": res["spark_jobs"] / cycles,
        "phases_ms_per_cycle": {k: v / cycles for k, v in res["phases_ms"].items()},
    }
    tasks = res.get("spark_tasks")
    if tasks:
        out["spark_tasks_per_cycle"] = tasks["tasks"] / cycles
        out["task_ms_per_cycle"] = {k: tasks[k] / cycles for k in ("deserialize_ms", "run_ms", "gc_ms")}
    stats = pstats.Stats(res["profile"])
    rows = []
    for (file, _line, name), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if ("lockgate/" in file or "send_command" in name) and ct / cycles >= 2.0 / 1000:
            rows.append({"function": f"{name} ({_short(file)})", "calls_per_cycle": nc / cycles,
                         "ms_per_cycle": ct * 1000 / cycles})
    rows.sort(key=lambda r: -r["ms_per_cycle"])
    out["cprofile"] = rows[:40]
    out["py4j_short_calls_per_cycle"] = res.get("py4j_short_calls", 0) / cycles
    out["py4j_short_ms_per_cycle"] = res.get("py4j_short_s", 0.0) * 1000 / cycles
    sites: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in res.get("py4j_sites", []):
        sites[r["site"]][0] += r["calls"]
        sites[r["site"]][1] += r["seconds"]
    out["py4j_sites"] = [
        {"site": k, "calls_per_cycle": n / cycles, "ms_per_cycle": sec * 1000 / cycles}
        for k, (n, sec) in sorted(sites.items(), key=lambda kv: -kv[1][0])
    ][:30]
    out["py4j_apis"] = [
        {"site": r["site"], "api": r["api"], "calls_per_cycle": r["calls"] / cycles,
         "ms_per_cycle": r["seconds"] * 1000 / cycles}
        for r in res.get("py4j_sites", [])[:40]
    ]
    if raw is not None and raw.exists():
        total, incl = pyspy_inclusive(raw)
        out["py_spy_seconds"] = total
        out["py_spy"] = [{"function": k, "ms_per_cycle": v * 1000 / cycles, "share": v / total if total else 0}
                         for k, v in incl if ("lockgate/" in k or "py4j/" in k or "pyspark/" in k)][:40]
    return out


def _task_line(p: dict[str, Any]) -> str:
    """The profile's tasks per cycle and what they spent (Spark's event log), when measured."""
    if "spark_tasks_per_cycle" not in p:
        return ""
    ms = p["task_ms_per_cycle"]
    return (f", {p['spark_tasks_per_cycle']:.1f} Spark tasks (their time, ms: deserialising the plan "
            f"{ms['deserialize_ms']:.0f}, running {ms['run_ms']:.0f}, of which GC {ms['gc_ms']:.0f})")


def profile_markdown(wl: str, p: dict[str, Any]) -> str:
    lines = [f"# Lockgate profile: {WORKLOADS[wl].title}", "",
             f"{p['cycles']} cycles, {p['process_s']:.1f} s from first read to last commit; per cycle: "
             f"{p['py4j_calls_per_cycle']:.0f} Py4J calls ({p['py4j_ms_per_cycle']:.0f} ms waiting on the JVM), "
             f"{p['spark_jobs_per_cycle']:.1f} Spark jobs" + _task_line(p) + ".", "",
             "Phases, ms per cycle: " + ", ".join(f"{k} {v:.0f}" for k, v in p["phases_ms_per_cycle"].items()), "",
             "## cProfile (cumulative, ms per cycle; includes time blocked on the JVM)", "",
             "| function | calls/cycle | ms/cycle |", "|---|---:|---:|"]
    for r in p["cprofile"]:
        lines.append(f"| `{r['function']}` | {r['calls_per_cycle']:.1f} | {r['ms_per_cycle']:.0f} |")
    if p.get("py4j_sites"):
        lines += ["", f"## Py4J round trips by Lockgate call site ({p['py4j_calls_per_cycle']:.0f} per cycle; "
                  f"{p.get('py4j_short_calls_per_cycle', 0):.0f} short ones, {p.get('py4j_short_ms_per_cycle', 0):.0f} ms)",
                  "", "Per cycle, including the run's one-off compile (`lockgate/plan/...`) spread over the cycles.", "",
                  "| call site | calls/cycle | ms/cycle (blocked, incl. Spark jobs) |", "|---|---:|---:|"]
        for r in p["py4j_sites"]:
            lines.append(f"| `{r['site']}` | {r['calls_per_cycle']:.1f} | {r['ms_per_cycle']:.0f} |")
        lines += ["", "| call site | PySpark API | calls/cycle | ms/cycle |", "|---|---|---:|---:|"]
        for r in p["py4j_apis"]:
            lines.append(f"| `{r['site']}` | `{r['api']}` | {r['calls_per_cycle']:.1f} | {r['ms_per_cycle']:.0f} |")
    if p.get("jvm"):
        lines += ["", jvm_profile.markdown(p["jvm"]).rstrip("\n")]
    if p.get("py_spy"):
        lines += ["", f"## py-spy (wall-clock samples incl. idle, {p['py_spy_seconds']:.0f} s of the run thread)", "",
                  "| function | ms/cycle | share |", "|---|---:|---:|"]
        for r in p["py_spy"]:
            lines.append(f"| `{r['function']}` | {r['ms_per_cycle']:.0f} | {r['share']:.0%} |")
    return "\n".join(lines) + "\n"


def write(results: Path, out: Path) -> dict[str, Any]:
    doc = json.loads(results.read_text())
    summ = summarize(doc)
    doc["summary"] = summ
    results.write_text(json.dumps(doc, indent=1, default=str))
    (out / "results.md").write_text(markdown(doc, summ))
    chart(doc, summ, out / "chart.png")
    for wl, p in (doc.get("profiles") or {}).items():
        (out / "profile").mkdir(exist_ok=True)
        (out / "profile" / f"{wl}.md").write_text(profile_markdown(wl, p))
    return summ


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.report --docs``: write the site's benchmark page from ``bench/results/``
    (``--check``: only say whether the committed page is stale); ``python -m bench.report RESULTS_JSON
    [OUT]``: rebuild a run's tables and chart from its results.json."""
    import argparse

    from . import docs_page

    ap = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    ap.add_argument("--docs", action="store_true", help="write docs/benchmarks.md and its chart")
    ap.add_argument("--check", action="store_true", help="with --docs: exit 1 when the page is stale")
    ap.add_argument("results", nargs="?", type=Path, help="a run's results.json")
    ap.add_argument("out", nargs="?", type=Path, help="where results.md and chart.png go (default: beside it)")
    args = ap.parse_args(argv)
    if args.docs:
        return docs_page.main(["--check"] if args.check else [])
    if args.results is None:
        ap.error("give --docs, or a results.json")
    write(args.results, args.out or args.results.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
