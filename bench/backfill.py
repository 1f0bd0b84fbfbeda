"""Backfill: a job far behind, run four ways over the same Nexmark files, side by side.

(a) Lockgate with catch-up (``LOCKGATE_CATCHUP=auto``: due windows in adaptive groups, each
    window still committed exactly once with its own checkpoint row);
(b) Lockgate one window per round (``LOCKGATE_CATCHUP=off``);
(c) a plain PySpark batch job per 10 s interval (what an Airflow user runs today with the
    apache-spark provider, one job per data interval; here in one process, so without a
    spark-submit per interval: a lower bound for that set-up);
(d) one PySpark batch job over everything (the lower bound).

All four run in one process on one SparkSession (Lockgate's own, ``local[2]``), after a
warm-up window each, and every output is checked against (d) row for row. It prints and
writes (``--out``, JSON) the seconds of each and the ratios.

    python -m bench.backfill --size full --workloads w1,w3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from .config import SIZES, START
from .data import ensure_data
from .workloads import PIPELINE_FILE, spark_output

ORIGIN = START.isoformat()


def _rows(path: str) -> list[tuple]:
    """A run's output rows, sorted (timestamps as UTC microseconds, whatever the writer)."""
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    cols = sorted(c for c in table.column_names if c != "lg_window")
    values = []
    for c in cols:
        col = table[c]
        if pa.types.is_timestamp(col.type):
            col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
        values.append(col.to_pylist())
    return sorted(zip(*values, strict=True))


def lockgate_run(work: Path, data: str, workload: str, windows: int, mode: str) -> dict[str, Any]:
    """Run the workload's pipeline over every window with ``LOCKGATE_CATCHUP=mode``."""
    import lockgate as lg

    out = str(work / f"lg-{workload}-{mode}")
    pipe = work / f"pipe-{workload}-{mode}.py"
    kwargs = {"workload": workload, "data": data, "out": out, "cycle_s": 10, "origin": ORIGIN, "name": workload}
    pipe.write_text(PIPELINE_FILE.format(repo=str(Path(__file__).resolve().parents[1]), kwargs=kwargs))
    os.environ["LOCKGATE_CATCHUP"] = mode
    client = lg.connect("embedded", home=str(work / f"home-{workload}-{mode}"))
    try:
        client.run(f"{pipe}:pipeline", first=0, last=0)  # warm-up: plan, first round
        t = time.perf_counter()
        res = client.run(f"{pipe}:pipeline", first=1, last=windows - 1)
        seconds = time.perf_counter() - t
    finally:
        client.close()
    return {"seconds": round(seconds, 2), "windows": res.windows_run, "rows_in": res.rows_in, "out": out}


def batch_per_interval(spark: Any, work: Path, data: str, workload: str, windows: int) -> dict[str, Any]:
    """One batch job per 10 s interval, each over that interval's files."""
    staging = work / f"per-interval-{workload}"
    for stream in ("bid", "person", "auction"):
        for w in range(windows):
            d = staging / f"i{w:04d}" / stream
            d.mkdir(parents=True, exist_ok=True)
            src = Path(data) / stream / f"part-{w:06d}.parquet"
            if src.exists() and not (d / src.name).exists():
                os.link(src, d / src.name)
    out = work / f"batch-per-interval-{workload}"

    def one(w: int) -> None:
        spark_output(spark, workload, str(staging / f"i{w:04d}"), streaming=False).write.mode("overwrite").parquet(
            str(out / f"lg_window={w}"))

    one(0)  # warm-up
    t = time.perf_counter()
    for w in range(1, windows):
        one(w)
    return {"seconds": round(time.perf_counter() - t, 2), "out": str(out)}


def batch_once(spark: Any, work: Path, data: str, workload: str) -> dict[str, Any]:
    """One batch job over every file (run twice: the first warms the session up)."""
    out = work / f"batch-{workload}"
    spark_output(spark, workload, data, streaming=False).write.mode("overwrite").parquet(str(out))
    t = time.perf_counter()
    spark_output(spark, workload, data, streaming=False).write.mode("overwrite").parquet(str(out))
    return {"seconds": round(time.perf_counter() - t, 2), "out": str(out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="full", choices=sorted(SIZES))
    p.add_argument("--workloads", default="w1,w3")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one; data kept in bench's)")
    p.add_argument("--data-work", default="/tmp/lockgate-bench", help="where bench data is generated and kept")
    p.add_argument("--out", default="bench/results/backfill.json")
    args = p.parse_args(argv)
    size = SIZES[args.size]
    data = str(Path(args.data_work) / "data" / size.name)
    ensure_data(size, Path(args.data_work))
    work = Path(args.work or tempfile.mkdtemp(prefix="lockgate-backfill-"))
    from lockgate.runtime.session import get_spark

    spark = get_spark()
    results: dict[str, Any] = {"size": size.name, "events": size.events, "windows": size.windows,
                               "machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                               "workloads": {}}
    for workload in args.workloads.split(","):
        row: dict[str, Any] = {}
        row["batch_once"] = batch_once(spark, work, data, workload)
        want = _rows(row["batch_once"]["out"])
        row["catch_up"] = lockgate_run(work, data, workload, size.windows, "auto")
        row["one_window_per_round"] = lockgate_run(work, data, workload, size.windows, "off")
        row["batch_per_interval"] = batch_per_interval(spark, work, data, workload, size.windows)
        for name in ("catch_up", "one_window_per_round", "batch_per_interval"):
            got = _rows(row[name]["out"])
            # the measured runs start at window 1; the warm-up ran window 0 into the same output
            row[name]["matches_batch"] = got == want
        base = row["batch_once"]["seconds"]
        for name in ("catch_up", "one_window_per_round", "batch_per_interval"):
            row[name]["vs_one_batch"] = round(row[name]["seconds"] / base, 2)
        for r in row.values():
            r.pop("out", None)
        results["workloads"][workload] = row
        print(workload, json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
