"""Queued runs of one job: what each pays before its windows run, with a controller and embedded.

An Airflow DAG that falls behind (catch-up, a backfill, a paused DAG resumed) queues one DAG run
per data interval; with ``max_active_runs=1`` and ``depends_on_past`` they run one after the other,
each a ``LockgateRunWindowsOperator`` task over its interval's windows. This measures that
sequence without Airflow's own scheduling delay, the way the operator drives Lockgate:

- **controller**: a ``lockgate server`` with ``--standby-workers 1`` (started and warm before the
  first run, as a service is); each run is ``Client.run`` over the next range of windows, started
  ``--gap`` seconds after the previous one ended (Airflow's scheduler starts the next queued run a
  few seconds after one ends). The worker of a run that ended cleanly waits for the job's next run
  (``--worker-keep``, 120 s by default), which starts on it;
- **controller_no_keep**: the same with ``--worker-keep 0``: every run's worker is shut down when
  the run ends, and the next run takes the standby that replaced it (as every run did before
  workers were kept);
- **embedded**: each run is a new ``lockgate run`` process over the same ranges (what an embedded
  task does: its own Python, JVM and compile);
- **one_run**: one ``lockgate run`` process over every range at once (one task over the whole
  backlog, in catch-up groups).

For each run: the seconds from the request to its first committed window (the cold-start part)
and to its end, and for the controller whether the run's worker was already up when it was asked.
Every run's windows are checked: each range commits each of its windows once.

    python -m bench.queued_runs --runs 4 --windows 6 --gap 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PIPELINE = """
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("queued", cycle_window=timedelta(seconds=10), parallelism=2)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second={rate}, seed=11, start="2026-01-01T00:00:00"),
                       name="bids")
(bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))
     .aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
     .sink(lg.CollectSink("per_auction"), name="out"))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_FAULT", "LOCKGATE_TOKEN")}
    env["LOCKGATE_HOME"] = str(home)
    return env


def _controller(root: Path, keep: float | None) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = _free_port()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "controller.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(root / "home"), "--port", str(port),
             "--standby-workers", "1", "--allow-any-pipeline",
             *(["--worker-keep", str(keep)] if keep is not None else [])],
            stdout=fh, stderr=subprocess.STDOUT, env=_env(root / "home"), start_new_session=True)
    deadline = time.time() + 180
    while "listening on" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the controller did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return proc, f"grpc://127.0.0.1:{port}", log


def _wait_for_idle_worker(client: Any, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not any(w["state"] == "IDLE" for w in client.list_workers()):
        if time.time() > deadline:
            raise RuntimeError("no standby worker became idle")
        time.sleep(0.5)


def run_controller(ref: str, ranges: list[tuple[int, int]], gap: float, root: Path,
                   mode: str = "controller", keep: float | None = None) -> list[dict[str, Any]]:
    import lockgate as lg

    proc, url, _log = _controller(root / mode, keep)
    rows = []
    try:
        client = lg.connect(url, timeout=120)
        try:
            _wait_for_idle_worker(client)  # a service that has been up a while
            for i, (first, last) in enumerate(ranges):
                if i:
                    time.sleep(gap)
                idle = [w for w in client.list_workers() if w["state"] == "IDLE"]
                t0 = time.perf_counter()
                first_done: list[float] = []

                def on_event(e: Any, first_done: list[float] = first_done, t0: float = t0) -> None:
                    if e.kind == "cycle_done" and not first_done:
                        first_done.append(time.perf_counter() - t0)

                result = client.run(ref, job="queued", first=first, last=last, catchup="auto", on_event=on_event)
                total = time.perf_counter() - t0
                if result.state != "FINISHED" or result.windows_run != last - first + 1:
                    raise AssertionError(f"controller run {i}: {result}")
                rows.append({"mode": mode, "run": i, "windows": [first, last],
                             "to_first_commit_s": round(first_done[0], 2), "total_s": round(total, 2),
                             "standby_ready": any(not w["job"] for w in idle),
                             "kept_worker_ready": any(w["job"] == "queued" for w in idle)})
            committed = [c.window for c in client.list_checkpoints("queued")]
        finally:
            client.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    want = list(range(ranges[0][0], ranges[-1][1] + 1))
    kept = sorted(set(committed))  # the newest checkpoints (retention keeps the last ones)
    if not kept or kept != want[-len(kept):]:
        raise AssertionError(f"controller: checkpoints {kept}, expected the last of {want}")
    return rows


def run_embedded(ref: str, ranges: list[tuple[int, int]], gap: float, root: Path,
                 mode: str = "embedded") -> list[dict[str, Any]]:
    home = root / mode
    rows = []
    for i, (first, last) in enumerate(ranges):
        if i:
            time.sleep(gap)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli.main", "run", ref, "--from-window", str(first), "--to-window",
             str(last), "--catchup", "auto"],
            env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first_commit = None
        assert proc.stderr is not None
        for line in proc.stderr:  # one progress line per committed window (into a pipe)
            if first_commit is None and line.startswith("windows "):
                first_commit = time.perf_counter() - t0
        out = proc.stdout.read() if proc.stdout else ""
        if proc.wait() != 0 or "FINISHED" not in out:
            raise AssertionError(f"embedded run {i} failed: {out}")
        total = time.perf_counter() - t0
        rows.append({"mode": mode, "run": i, "windows": [first, last],
                     "to_first_commit_s": round(first_commit if first_commit is not None else total, 2),
                     "total_s": round(total, 2), "standby_ready": False, "kept_worker_ready": False})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="queued runs (DAG runs) of the job")
    parser.add_argument("--windows", type=int, default=6, help="10 s windows each run covers")
    parser.add_argument("--gap", type=float, default=5.0, help="seconds between one run's end and the next's start")
    parser.add_argument("--rate", type=int, default=1000, help="Nexmark events per second (46 of 50 are bids)")
    parser.add_argument("--modes", default="controller,controller_no_keep,embedded,one_run",
                        help="which of controller, controller_no_keep, embedded, one_run to run (in that order)")
    parser.add_argument("--out", default="bench/results/queued_runs.json")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="lockgate-bench-queued-"))
    try:
        (root / "pipeline.py").write_text(PIPELINE.format(rate=args.rate))
        ref = f"{root / 'pipeline.py'}:pipeline"
        w0 = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) // 10
        ranges = [(w0 + i * args.windows, w0 + (i + 1) * args.windows - 1) for i in range(args.runs)]
        modes = args.modes.split(",")
        unknown = set(modes) - {"controller", "controller_no_keep", "embedded", "one_run"}
        if unknown:
            parser.error(f"--modes: unknown {sorted(unknown)}")
        rows = []
        if "controller" in modes:
            rows += run_controller(ref, ranges, args.gap, root)
        if "controller_no_keep" in modes:
            rows += run_controller(ref, ranges, args.gap, root, mode="controller_no_keep", keep=0)
        if "embedded" in modes:
            rows += run_embedded(ref, ranges, args.gap, root)
        if "one_run" in modes:
            rows += run_embedded(ref, [(ranges[0][0], ranges[-1][1])], 0.0, root, mode="one_run")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "runs": args.runs,
              "windows_per_run": args.windows, "gap_s": args.gap, "rate": args.rate, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for r in rows:
        print(f"{r['mode']:18} run {r['run']}  first window committed after {r['to_first_commit_s']:6.2f} s  "
              f"done after {r['total_s']:6.2f} s  standby ready: {r['standby_ready']}  "
              f"kept worker ready: {r['kept_worker_ready']}")


if __name__ == "__main__":
    main()
