"""Catch-up groups of a plan that is not window-exact, against one window per round.

A running aggregate and a deduplication (state every round reads and changes) over Parquet
files, one file per 10 s cycle window, run in one process on a fresh embedded home each time:

- **rounds**: ``catchup="off"``, one window per round;
- **groups**: ``catchup=N``, the backlog in groups of N windows.

The modes alternate (``--reps`` times each). Every run's sinks are checked against pandas over
the same files: each bidder's last running total is its count and sum of the data, and the
deduplication emits each auction once, at its first record. The report gives each run's seconds
and the groups' time over the rounds' (median of the repetitions).

    python -m bench.catchup_rounds --windows 24 --rows 2000 --group 4 --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

PIPELINE = """
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("catchup_rounds", cycle_window=timedelta(seconds=10), parallelism=2)
bids = pipeline.source(lg.FileSource({data!r}, event_time="ts"), name="bids")
(bids.key_by("bidder").aggregate(n=lg.count(), total=lg.sum("price"), name="totals")
     .sink(lg.CollectSink("totals"), name="totals_out"))
bids.key_by("auction").deduplicate(name="first_bid").sink(lg.CollectSink("firsts"), name="firsts_out")
"""
#: the first window's start: 2026-01-01T00:00:00Z
T0_S = 1767225600


def write_data(folder: Path, windows: int, rows: int, seed: int) -> pd.DataFrame:
    """``rows`` bids per 10 s window, one Parquet file each; returns them all."""
    rng = np.random.default_rng(seed)
    frames = []
    for w in range(windows):
        start_us = (T0_S + 10 * w) * 1_000_000
        df = pd.DataFrame({
            "bidder": rng.integers(0, 500, rows),
            "auction": rng.integers(0, 4 * rows, rows),
            "price": rng.integers(1, 10_000, rows),
            "ts": pd.to_datetime(np.sort(rng.integers(start_us, start_us + 10_000_000, rows)), unit="us", utc=True),
        })
        table = pa.Table.from_pandas(df, preserve_index=False)
        # microseconds, as Spark's TIMESTAMP: Spark reads a nanosecond Parquet timestamp as a long
        table = table.set_column(3, "ts", table.column("ts").cast(pa.timestamp("us", tz="UTC")))
        pq.write_table(table, folder / f"bids-{w:04d}.parquet")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def check(client: Any, data: pd.DataFrame) -> None:
    """The sinks against pandas over the same records."""
    totals = client.read_sink("catchup_rounds", "totals").to_pandas()
    last = totals.sort_values("as_of").groupby("bidder").tail(1).set_index("bidder").sort_index()
    want = data.groupby("bidder").agg(n=("price", "size"), total=("price", "sum")).sort_index()
    if not (last.index.equals(want.index) and (last["n"].to_numpy() == want["n"].to_numpy()).all()
            and (last["total"].to_numpy() == want["total"].to_numpy()).all()):
        raise AssertionError("running totals differ from pandas")
    firsts = client.read_sink("catchup_rounds", "firsts").to_pandas()
    if len(firsts) != data["auction"].nunique() or firsts["auction"].nunique() != len(firsts):
        raise AssertionError("deduplicated auctions differ from pandas")
    got = firsts.set_index("auction")["ts"].sort_index()
    first = data.sort_values("ts", kind="stable").groupby("auction")["ts"].first().sort_index()
    if not (pd.to_datetime(got, utc=True).to_numpy() == first.to_numpy()).all():
        raise AssertionError("a deduplicated auction is not its first record")


def one_run(pipeline: Path, data: pd.DataFrame, windows: int, catchup: str) -> float:
    import lockgate as lg

    first = T0_S // 10
    with lg.connect("embedded", home=tempfile.mkdtemp(prefix="lg-catchup-rounds-")) as client:
        client.run(f"{pipeline}:pipeline", first=first, last=first, catchup="off")  # the session, warm
        t = time.perf_counter()
        run = client.run(f"{pipeline}:pipeline", first=first + 1, last=first + windows - 1, catchup=catchup)
        elapsed = time.perf_counter() - t
        if run.state != "FINISHED" or run.windows_run != windows - 1:
            raise AssertionError(f"run {catchup}: {run.state}, {run.windows_run} windows")
        check(client, data)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=24)
    parser.add_argument("--rows", type=int, default=2000, help="bids per window")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default="bench/results/catchup_rounds")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lg-catchup-rounds-data-"))
    (work / "data").mkdir()
    data = write_data(work / "data", args.windows, args.rows, seed=5)
    pipeline = work / "pipeline.py"
    pipeline.write_text(PIPELINE.format(data=str(work / "data")))
    times: dict[str, list[float]] = {"rounds": [], "groups": []}
    for rep in range(args.reps):
        for mode, catchup in (("rounds", "off"), ("groups", str(args.group))):
            s = one_run(pipeline, data, args.windows, catchup)
            times[mode].append(s)
            print(f"[catchup_rounds] rep {rep}: {mode:6s} {s:6.1f} s ({args.windows - 1} windows), output checked",
                  file=sys.stderr)
    rounds, groups = statistics.median(times["rounds"]), statistics.median(times["groups"])
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
        "windows": args.windows - 1, "rows_per_window": args.rows, "group": args.group, "seconds": times,
        "groups_over_rounds": round(groups / rounds, 2),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# Catch-up groups of a plan that is not window-exact ({result['date']}, {result['cpus']} cores)",
        "",
        f"{args.windows - 1} windows of {args.rows} bids, a running aggregate and a deduplication; every run's "
        "output checked against pandas.",
        "",
        "| mode | seconds (each repetition) | median |",
        "|---|---|---:|",
        f"| one window per round | {', '.join(f'{x:.1f}' for x in times['rounds'])} | {rounds:.1f} |",
        f"| groups of {args.group} | {', '.join(f'{x:.1f}' for x in times['groups'])} | {groups:.1f} |",
        "",
        f"Groups over rounds: **{result['groups_over_rounds']}**.",
        "",
    ]
    (out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
