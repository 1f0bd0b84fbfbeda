"""State that grows: a round's cost against the size of the keyed state it carries.

A running aggregate (``key_by(key).aggregate(count, sum)``) first sees ``--keys`` distinct
keys in one window, then ``--windows`` windows of ``--rows`` records each over random keys
of that set, so the state holds ``--keys`` rows throughout while each window touches a few
of them. The same data runs twice in one process and one SparkSession: with incremental
state (deltas, ``LOCKGATE_STATE_MAX_DELTAS=8``) and with a full snapshot every round
(``LOCKGATE_STATE_MAX_DELTAS=0``, how rounds worked before deltas). It prints and writes
(``--out``, JSON) the median round time and snapshot bytes per round of each, after the
first window, and checks that both left the same totals as a pandas group-by over the data.

    python -m bench.state_growth --keys 1000000 --rows 20000 --windows 12
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CYCLE = timedelta(seconds=10)

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("growth", cycle_window=timedelta(seconds=10), parallelism=2)
(pipeline.source(lg.FileSource({path!r}, format="parquet", event_time="ts"), name="events")
    .key_by("key").aggregate(n=lg.count(), total=lg.sum("value"), name="totals")
    .sink(lg.CollectSink("totals"), name="out"))
'''


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
        parts.append(pd.DataFrame({"key": key, "value": value}))
    return pd.concat(parts, ignore_index=True)


def _folder_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def run_mode(work: Path, ref: str, max_deltas: int, first: int, last: int) -> dict[str, Any]:
    import lockgate as lg

    os.environ["LOCKGATE_STATE_MAX_DELTAS"] = str(max_deltas)
    home = work / f"home-{max_deltas}"
    client = lg.connect("embedded", home=str(home), keep_checkpoints=100)
    try:
        t = time.perf_counter()
        res = client.run(ref, first=first, last=last)
        assert res.state == "FINISHED", res
        print(f"  max_deltas={max_deltas}: {res.windows_run} windows in {time.perf_counter() - t:.1f} s", flush=True)
        # a round: from its cycle's start to its checkpoint (read, merge, snapshot, stage, commit)
        rounds = [(c.finished - c.started).total_seconds() for c in client.catalog.list_cycles("growth")
                  if c.finished is not None and c.state.value == "COMMITTED"]
        phases = [c.timings.get("snapshot", 0.0) / 1000 for c in client.catalog.list_cycles("growth")
                  if c.state.value == "COMMITTED"]
        cps = client.catalog.list_checkpoints("growth")
        own = [_folder_bytes(cp.snapshot_uri) for cp in cps]
        state = client.read_state("growth", "totals").to_pandas()
    finally:
        client.close()
    return {"round_s": rounds, "snapshot_s": phases, "snapshot_bytes": own, "state": state}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", default="100000,1000000,2000000", help="state sizes (keys), comma-separated")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", default="bench/results/state_growth.json")
    args = p.parse_args(argv)

    from lockgate.logs import configure

    configure()
    root = Path(args.work or tempfile.mkdtemp(prefix="lockgate-growth-"))
    summaries = [measure(root / f"k{keys}", keys, args.rows, args.windows)
                 for keys in (int(k) for k in args.keys.split(","))]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summaries, indent=2) + "\n")
    print("keys       rows/window  round s (incremental / full)  snapshot bytes (incremental / full)")
    for m in summaries:
        inc, full = m["incremental"], m["full"]
        print(f"{m['keys']:>9,}  {m['rows_per_window']:>11,}  {inc['median_round_s']:>6.2f} / {full['median_round_s']:<6.2f}"
              f"  {inc['median_snapshot_bytes']:>12,} / {full['median_snapshot_bytes']:,}")
    return 0


def measure(work: Path, keys: int, rows: int, windows: int) -> dict[str, Any]:
    """Both modes over one data set of ``keys`` keys; the summary of the two."""
    print(f"state of {keys:,} keys, {windows} windows of {rows:,} rows", flush=True)
    data = write_data(work / "data", keys, rows, windows)
    path = work / "growth_pipe.py"
    path.write_text(PIPELINE.format(path=str(work / "data")))
    ref = f"{path}:pipeline"
    first = int(T0.timestamp()) // 10
    last = first + windows
    expected = data.groupby("key").agg(n=("value", "size"), total=("value", "sum")).sort_index()
    results = {}
    for max_deltas in (0, 8):  # the full snapshots first: the JVM is then warm for both
        out = run_mode(work, ref, max_deltas, first, last)
        got = out.pop("state").set_index("key").sort_index()[["n", "total"]]
        assert got.equals(expected.astype(got.dtypes.to_dict())), f"max_deltas={max_deltas}: state differs"
        results[max_deltas] = out
    inc, full = results[8], results[0]
    summary: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, local[2]",
        "date": datetime.now(UTC).date().isoformat(),
        "keys": keys,
        "rows_per_window": rows,
        "windows": windows,
    }
    for name, res in (("incremental", inc), ("full", full)):
        summary[name] = {
            "median_round_s": round(statistics.median(res["round_s"][1:]), 3),
            "median_snapshot_phase_s": round(statistics.median(res["snapshot_s"][1:]), 3),
            "median_snapshot_bytes": int(statistics.median(res["snapshot_bytes"][1:])),
            "rounds_s": [round(x, 3) for x in res["round_s"]],
        }
    summary["state_checked"] = "both runs' final state equals a pandas group-by over the data"
    summary["round_ratio_full_over_incremental"] = round(
        summary["full"]["median_round_s"] / summary["incremental"]["median_round_s"], 2)
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
