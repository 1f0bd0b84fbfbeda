"""Restore after kill -9 with a long delta chain, against a fresh start plus reading the base.

A running aggregate (``key_by(key).aggregate(count, sum)``) over ``--keys`` keys runs
``N`` rounds of ``--rows`` records for each ``N`` of ``--chains``, with
``LOCKGATE_STATE_MAX_DELTAS`` above ``N``, so its last checkpoint's state is a base and one
delta per round (8 is the longest chain compaction leaves by default; 24 is three times
that). The next round is killed with SIGKILL as it begins (``LOCKGATE_FAULT=before_run``:
nothing of it staged, so the next run must restore the state and compute the round), and
three commands are timed, each a new ``lockgate run`` process (a JVM each):

- ``restore``: the killed job run again over that window: recovery, the restore of the base
  and every delta (verified against the manifest), the window's round, its commit;
- ``fresh``: the same window run by a new job with no state;
- ``read_base``: the base's files read in full by Spark in a process of its own (its JVM
  start excluded: timed after a warm-up read).

The target (issue 12): ``restore`` no slower than ``fresh + read_base``. The output of the
restored job is checked against pandas over the same records.

    python -m bench.restore --keys 1000000 --chains 8,24
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.state_growth import BODIES, PIPELINE, T0, write_data

READ_BASE = """
import sys, time
from lockgate.runtime.session import get_spark
spark = get_spark()
files = sys.argv[1:]
spark.read.parquet(*files).write.format("noop").mode("overwrite").save()  # warm-up
t = time.perf_counter()
spark.read.parquet(*files).write.format("noop").mode("overwrite").save()
print(time.perf_counter() - t)
"""


def _run(home: Path, ref: str, first: int, last: int, env: dict[str, str], expect_kill: bool = False) -> float:
    """Seconds of one ``lockgate run`` process over windows ``first..last``."""
    cmd = [sys.executable, "-m", "lockgate", "--home", str(home), "run", ref, "--from-window", str(first),
           "--to-window", str(last), "--catchup", "off", "--no-progress"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, start_new_session=True)
    seconds = time.perf_counter() - t
    if expect_kill:
        if proc.returncode != -9:
            raise RuntimeError(f"the run was meant to be killed, it exited {proc.returncode}: {proc.stderr[-2000:]}")
    elif proc.returncode != 0:
        raise RuntimeError(f"lockgate run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def measure(work: Path, keys: int, rows: int, windows: int) -> dict[str, Any]:
    import lockgate as lg

    data_dir = work / "data"
    data = write_data(data_dir, keys, rows, windows + 1)
    pipe = work / "growth_pipe.py"
    pipe.write_text(PIPELINE.format(path=str(data_dir), body=BODIES["aggregate"]))
    ref = f"{pipe}:pipeline"
    first = int(T0.timestamp()) // 10
    killed = first + windows + 1
    env = {**os.environ, "LOCKGATE_STATE_MAX_DELTAS": str(windows + 8), "LOCKGATE_LOG_LEVEL": "WARNING"}
    home = work / "home"
    print(f"restore: {keys:,} keys, {windows} rounds of {rows:,} rows, then kill -9 in window {killed}", flush=True)
    _run(home, ref, first, first + windows, env)
    _run(home, ref, killed, killed, {**env, "LOCKGATE_FAULT": f"before_run:{killed}"}, expect_kill=True)
    with lg.connect("embedded", home=str(home)) as client:
        cp = max(client.list_checkpoints("growth"), key=lambda c: c.window)
        layers = client.catalog.get_checkpoint("growth", cp.window).snapshot_manifest
    table, entry = next((name, e) for name, e in layers.items() if name.startswith("state."))
    base = [layer for layer in entry["layers"] if layer["kind"] == "base"]
    deltas = [layer for layer in entry["layers"] if layer["kind"] == "delta"]
    base_files = [f"{b['snapshot'].rstrip('/')}/{table}/{f['path']}" for b in base for f in b["files"]]
    restore_s = _run(home, ref, killed, killed, env)
    fresh_s = _run(work / "fresh", ref, killed, killed, env)
    out = subprocess.run([sys.executable, "-c", READ_BASE, *base_files], env=env, capture_output=True, text=True,
                         check=True)
    read_base_s = float(out.stdout.strip().splitlines()[-1])
    phases = {}
    for name, h in (("restore", home), ("fresh", work / "fresh")):
        with lg.connect("embedded", home=str(h)) as client:
            done = [c for c in client.catalog.list_cycles("growth") if c.window == killed and c.state.value == "COMMITTED"]
            phases[name] = {k: round(v) for k, v in done[-1].timings.items()
                            if k in ("state_load", "read", "plan", "snapshot", "stage", "commit")}
    with lg.connect("embedded", home=str(home)) as client:
        state = client.read_state("growth", "state").to_pandas()
    want = data.groupby("key").agg(n=("value", "size"), total=("value", "sum")).sort_index()
    got = state.set_index("key").sort_index()[["n", "total"]]
    assert got.equals(want.astype(got.dtypes.to_dict())), "the restored job's totals differ from pandas"
    return {
        "machine": f"{os.cpu_count()} cores, local[2]",
        "date": datetime.now(UTC).date().isoformat(),
        "keys": keys,
        "rows_per_window": rows,
        "deltas_in_chain": len(deltas),
        "base_rows": sum(int(b["rows"]) for b in base),
        "delta_rows": sum(int(d["rows"]) for d in deltas),
        "restore_s": round(restore_s, 2),
        "fresh_s": round(fresh_s, 2),
        "read_base_s": round(read_base_s, 2),
        "restore_vs_fresh_plus_base": round(restore_s / (fresh_s + read_base_s), 2),
        "round_ms": phases,
        "checked": "the restored job's totals equal pandas over the same records",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--chains", default="8,24", help="delta chain lengths (rounds before the kill)")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", default="bench/results/restore.json")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="lockgate-restore-"))
    results = []
    for chain in (int(c) for c in args.chains.split(",")):
        results.append(measure(work / f"chain-{chain}", args.keys, args.rows, chain))
        print(json.dumps(results[-1], indent=2), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
