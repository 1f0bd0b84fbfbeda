"""The benchmark's smoke run, so the bench cannot rot: the tiny data set, workloads (w5 and w6
are updating results, compared as their final current tables) against contenders (Lockgate,
Structured Streaming's state stores, batch), one repetition in one process, outputs compared.
No timing is checked or reported. The test command runs a short form (four workloads, Lockgate
and Structured Streaming); ``make test-long`` runs every workload and contender.

Runs the bench's own command, ``python -m bench.run --size tiny --check-only``, in a
subprocess (its own JVM, the bench's Spark settings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


ALL_WORKLOADS = ("w0", "w1", "w2", "w3", "w4", "w5", "w6")
ALL_CONTENDERS = ("lockgate", "sss", "sss_rocksdb")
#: the test command's short form: a window, a join and both updating results, against
#: Structured Streaming's default state store (``make test-long`` runs every pair)
SHORT = (("w1", "w3", "w5", "w6"), ("lockgate", "sss"))


@pytest.mark.parametrize("workloads, contenders", [
    pytest.param(*SHORT, id="short"),
    pytest.param(ALL_WORKLOADS, ALL_CONTENDERS, id="all", marks=pytest.mark.long),
])
def test_bench_smoke(repo_root: Path, tmp_path: Path, workloads: tuple[str, ...], contenders: tuple[str, ...]) -> None:
    work, out = tmp_path / "work", tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_FAULT", "LOCKGATE_HOME")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--size", "tiny", "--check-only", "--work", str(work), "--out", str(out),
         "--workloads", ",".join(workloads), "--contenders", ",".join(contenders)],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert proc.returncode == 0, f"bench smoke run failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    checked = json.loads((out / "smoke.json").read_text())["checked"]
    pairs = {(c["workload"], c["contender"]) for c in checked}
    assert pairs == {(w, c) for w in workloads for c in contenders}
    # PySpark 4.3 runs every workload (q9 and q18 in update mode): none is recorded as unsupported
    assert all(c.get("rows", 0) > 0 for c in checked), checked
    assert "output equals batch" in proc.stdout
    # the generated data set is the engine's own generator's, one file per 10 s window
    data = json.loads((work / "data" / "tiny" / "bench-data.json").read_text())
    assert data["spec"]["generator"] == "lockgate.nexmark.write_parquet_windows"
    assert sorted(p.name for p in (work / "data" / "tiny" / "bid").iterdir()) == [
        f"part-{w:06d}.parquet" for w in range(4)
    ]


def _bench(repo_root: Path) -> Any:
    """The bench package (importable from the repo root)."""
    if str(repo_root) not in sys.path:
        sys.path.insert(0, str(repo_root))
    import bench.report
    import bench.verify

    return bench


def test_bench_mismatch_fails(repo_root: Path) -> None:
    """A contender whose output differs from the reference is a failure, with the row."""
    import pyarrow as pa

    bench = _bench(repo_root)
    ts = pa.array([0, 10_000_000], pa.timestamp("us", tz="UTC"))
    ref = pa.table({"window_start": ts, "window_end": ts, "auction": [1, 2], "bids": [3, 4], "top": [5, 6]})
    got = ref.set_column(3, "bids", pa.array([3, 5]))
    a = bench.verify.canonical(ref, "w1", None)
    bench.verify.compare(a, bench.verify.canonical(ref, "w1", None), "same")
    with pytest.raises(bench.verify.Mismatch, match="first difference at sorted row 1"):
        bench.verify.compare(a, bench.verify.canonical(got, "w1", None), "w1 lockgate")


def test_bench_report_from_results(repo_root: Path, tmp_path: Path) -> None:
    """The tables and the chart are built from results.json (synthetic runs here)."""
    bench = _bench(repo_root)
    runs = []
    for rep in range(2):
        for cut in (10, 50, 200):
            for c, per in (("lockgate", 0.2), ("sss", 0.3), ("sss_rocksdb", 0.35)):
                process = 2.0 + per * cut + rep * 0.1
                phases = ({"read": 10.0 * cut, "plan": 20.0 * cut, "write": 110.0 * cut, "snapshot": 50.0 * cut,
                           "stage": 100.0 * cut,
                           "commit": 1.0 * cut, "checkpoint": 5.0 * cut, "other": 54.0 * cut} if c == "lockgate"
                          else {"addBatch": 250.0 * cut, "walCommit": 20.0 * cut, "commitOffsets": 20.0 * cut,
                                "triggerExecution": 1000 * process - 10})
                runs.append({"contender": c, "workload": "w1", "cut": cut, "rep": rep, "warmup": False,
                             "process_s": process, "throughput": 1e6 / process, "startup_s": 9.0, "setup_s": 1.0,
                             "peak_rss_mb": 900.0, "cycles": cut, "spark_jobs": 5 * cut, "py4j_calls": 800 * cut,
                             "py4j_s": 0.1 * cut, "events": 1_000_000, "checkpoint_bytes": 2000 * cut,
                             "phases_ms": phases, "state_commit_ms": 3.0 * cut})
        runs.append({"contender": "batch", "workload": "w1", "cut": 1, "rep": rep, "warmup": False, "process_s": 10.0,
                     "throughput": 1e5, "startup_s": 9.0, "setup_s": 0.1, "peak_rss_mb": 800.0, "cycles": 1,
                     "spark_jobs": 2, "py4j_calls": 100, "py4j_s": 0.1, "events": 1_000_000, "checkpoint_bytes": 0})
    doc = {"started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T01:00:00+00:00",
           "machine": {"cpus": 2, "memory_gib": 24, "platform": "Linux", "python": "3.11", "load_avg": [1.0, 1, 1],
                       "load_avg_end": [1.0, 1, 1]},
           "size": {"name": "small", "events": 1_000_000, "windows": 200, "events_per_second": 500},
           "cuts": [10, 50, 200], "reps": 2, "warmup": 1,
           "spark": {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"},
           "runs": runs, "restores": [], "profiles": {}}
    # a query Structured Streaming refuses: no figure, Spark's reason instead
    runs.append({"contender": "lockgate", "workload": "w5", "cut": 200, "rep": 0, "warmup": False, "process_s": 4.0,
                 "throughput": 2.5e5, "startup_s": 9.0, "setup_s": 1.0, "peak_rss_mb": 900.0, "cycles": 200,
                 "spark_jobs": 1000, "py4j_calls": 1000, "py4j_s": 1.0, "events": 1_000_000, "checkpoint_bytes": 1,
                 "phases_ms": {"read": 1.0}})
    doc["unsupported"] = {"w5": {"sss": "[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] Invalid streaming output mode"}}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    summ = bench.report.write(tmp_path / "results.json", tmp_path)
    lg = summ["table"]["w1"]["lockgate"]
    assert abs(lg["per_cycle_ms"] - 200) < 1e-6  # the slope of run time over cycles
    assert abs(summ["ratios"]["w1"]["lockgate/sss"] - (2.0 + 0.3 * 200 + 0.05) / (2.0 + 0.2 * 200 + 0.05)) < 1e-3
    # snapshot and stage overlap inside write: the additive phases are read..other
    assert abs(lg["phase_ms_per_cycle"]["write"] - 110.0) < 1e-6 and lg["phase_ms_per_cycle"]["snapshot"] == 50.0
    md = (tmp_path / "results.md").read_text()
    assert "| W1 tumbling 10 s (q7-like) |" in md and "## Targets" in md
    w5 = next(line for line in md.splitlines() if line.startswith("| W5 winning bid per auction (q9) |"))
    assert "not supported by Structured Streaming" in w5 and "| n/s |" in w5
    assert "- W5 winning bid per auction (q9), SSS: `[STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION]" in md
    assert summ["ratios"]["w5"]["lockgate/sss"] is None
    assert (tmp_path / "chart.png").stat().st_size > 10_000
    # issue 28's targets: 2.0x either store's throughput, 1.5x per CPU-second, 200 ms a round on W1
    met = {t["target"]: t["met"] for t in summ["targets"]}
    assert met["w1: Lockgate / SSS throughput >= 2.0"] is False
    assert "w1: Lockgate per-cycle cost (slope) <= 200 ms" in met


def test_bench_rounds_first_and_rest(repo_root: Path) -> None:
    """A run's first six rounds and the rest, from a Lockgate run's cycles and a micro-batch's
    start and triggerExecution (batches with no rows left out)."""
    bench = _bench(repo_root)
    # Lockgate: round i starts at i s and lasts 0.5 s, but the first six take 2 s each
    t, cycles = 100.0, []
    for i in range(10):
        span = 2.0 if i < 6 else 0.5
        cycles.append({"window": i, "start": t, "end": t + span})
        t += span
    lg = bench.report.rounds({"contender": "lockgate", "per_cycle": cycles})
    assert lg == {"first_s": 12.0, "rest_s": 2.0, "rest_rounds": 4, "steady_ms": 500.0}
    batches = [{"batch": i, "start": 50.0 + i, "rows": 10, "triggerExecution": 800} for i in range(9)]
    batches.append({"batch": 9, "start": 59.0, "rows": 0, "triggerExecution": 5})
    sss = bench.report.rounds({"contender": "sss", "per_cycle": batches})
    assert sss is not None and sss["first_s"] == 6.0 and sss["rest_rounds"] == 3
    assert abs(sss["rest_s"] - 2.8) < 1e-9 and abs(sss["steady_ms"] - 800.0) < 1e-9
    assert bench.report.rounds({"contender": "lockgate", "per_cycle": cycles[:7]}) is None


def _bench_command(repo_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_FAULT", "LOCKGATE_HOME")}
    proc = subprocess.run([sys.executable, "-m", *args], cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{args[0]} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_lakehouse_bench_smoke(repo_root: Path, tmp_path: Path) -> None:
    """``bench.lakehouse`` in short: every sink kind measured, its appended rows checked."""
    out = tmp_path / "lakehouse.json"
    _bench_command(repo_root, "bench.lakehouse", "--windows", "2", "--rate", "200", "--out", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [r["sink"] for r in rows] == ["file", "delta", "iceberg"]
    assert len({r["rows_in"] for r in rows}) == 1 and rows[0]["rows_in"] > 0, rows
    assert all(r["commit_ms_median"] > 0 for r in rows) and rows[0]["commit_vs_file"] == 1.0


def test_message_log_bench_smoke(repo_root: Path, tmp_path: Path, nats_url: str) -> None:
    """``bench.message_log`` in short: NATS and the file source read the same bids."""
    out = tmp_path / "message_log.json"
    _bench_command(repo_root, "bench.message_log", "--url", nats_url, "--seconds", "12", "--rate", "200",
                   "--out", str(out))
    rows = {r["source"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"nats", "file"}
    assert rows["nats"]["rows_in"] == rows["file"]["rows_in"] > 0, rows


def test_queued_runs_bench_smoke(repo_root: Path, tmp_path: Path) -> None:
    """``bench.queued_runs`` in short: two queued runs each way, every range committed."""
    out = tmp_path / "queued_runs.json"
    _bench_command(repo_root, "bench.queued_runs", "--runs", "2", "--windows", "2", "--gap", "0", "--rate", "100",
                   "--modes", "controller,embedded,one_run", "--out", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["run"]) for r in rows] == [
        ("controller", 0), ("controller", 1), ("embedded", 0), ("embedded", 1), ("one_run", 0)]
    assert [r["windows"] for r in rows[:2]] == [r["windows"] for r in rows[2:4]]
    assert all(0 < r["to_first_commit_s"] <= r["total_s"] for r in rows), rows
    # the second run starts on the worker the first one ended on (kept for the job)
    assert [r["kept_worker_ready"] for r in rows[:2]] == [False, True], rows


def test_catchup_rounds_bench_smoke(repo_root: Path, tmp_path: Path) -> None:
    """``bench.catchup_rounds`` in short: both modes run, every output checked against pandas."""
    out = tmp_path / "catchup_rounds"
    _bench_command(repo_root, "bench.catchup_rounds", "--windows", "4", "--rows", "100", "--group", "2",
                   "--reps", "1", "--out", str(out))
    result = json.loads((out / "results.json").read_text())
    assert result["windows"] == 3 and set(result["seconds"]) == {"rounds", "groups"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["seconds"].values()) and result["groups_over_rounds"] > 0


def test_graph_small_bench_smoke(repo_root: Path, tmp_path: Path) -> None:
    """``bench.graph_small --quick``: both paths measured and checked, no Spark job in a driver-side
    superstep of components."""
    out = tmp_path / "graph_small.json"
    _bench_command(repo_root, "bench.graph_small", "--quick", "--out", str(out))
    rows = {r["program"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"components", "pagerank"} and all(r["checked"] for r in rows.values())
    assert rows["components"]["driver"]["jobs_per_superstep"] == 0
    assert rows["components"]["spark"]["jobs_per_superstep"] >= 2
    assert (tmp_path / "graph_small.md").read_text().startswith("### Supersteps of small graphs")
