"""The lakehouse sinks' cost per window against ``FileSink``, on the same data in one run.

One pipeline shape per sink kind, over the same seeded Nexmark bids (``--rate`` events a
second, 10 s cycle windows, one window per round): every bid appended to the sink (``bids``),
and the running count and highest price per auction written to the same kind of sink keyed
on the auction (``per_auction``, an updating stream: ``FileSink(key=)``, Delta's ``MERGE``,
Iceberg's delete and append). The sinks' commit phase (the controller's commits of both
sinks, without Spark) and the stage phase (Spark writing the window's output) are read from
every round's timings in the catalog; the medians over the windows after the first are
reported. Each run's output is checked: the appended bids equal the source's rows.

    python -m bench.lakehouse --windows 8 --rate 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lockgate as lg

T0 = "2026-01-01T00:00:00"
SINKS = {
    "file": ("lg.FileSink({path!r})", "lg.FileSink({keyed_path!r}, key=['auction'])"),
    "delta": ("lg.DeltaSink({path!r})", "lg.DeltaSink({keyed_path!r}, key=['auction'])"),
    "iceberg": ("lg.IcebergSink('bench.bids')", "lg.IcebergSink('bench.per_auction', key=['auction'])"),
}
PIPELINE = """
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("lakehouse_{kind}", cycle_window=timedelta(seconds=10), parallelism=2)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second={rate}, seed=7, start={t0!r}), name="bids")
bids.select("auction", "bidder", "price", "date_time").sink({append}, name="bids_out")
(bids.key_by("auction").aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
     .sink({keyed}, name="per_auction_out"))
"""


def _rows_appended(kind: str, path: Path, home: Path) -> int:
    if kind == "file":
        import pyarrow.dataset as ds

        return ds.dataset(str(path), format="parquet", partitioning="hive").count_rows()
    if kind == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(path)).to_pyarrow_table().num_rows
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("lockgate", uri=f"sqlite:///{home}/iceberg/catalog.db",
                         warehouse=f"file://{home}/iceberg/warehouse")
    return catalog.load_table("bench.bids").scan().to_arrow().num_rows


def run_kind(kind: str, windows: int, rate: int, base: Path) -> dict[str, Any]:
    """Run the pipeline with sinks of ``kind`` over ``windows`` windows; its per-window costs."""
    home = base / kind
    home.mkdir(parents=True)
    append, keyed = SINKS[kind]
    out = home / "out"
    source = PIPELINE.format(kind=kind, rate=rate, t0=T0,
                             append=append.format(path=str(out / "bids")),
                             keyed=keyed.format(keyed_path=str(out / "per_auction")))
    (home / "pipeline.py").write_text(source)
    ref = f"{home / 'pipeline.py'}:pipeline"
    client = lg.connect("embedded", home=str(home))
    try:
        start = datetime.fromisoformat(T0).replace(tzinfo=UTC)
        first, _ = client.windows_for(ref, start, start + timedelta(seconds=10))
        result = client.run(ref, job=f"lakehouse_{kind}", first=first, last=first + windows - 1, catchup="off")
        cycles = sorted(client.list_cycles(f"lakehouse_{kind}", limit=windows + 5).cycles, key=lambda c: c.window)
    finally:
        client.close()
    steady = [c for c in cycles if c.state == "COMMITTED"][1:]  # the first round pays the JVM's warm-up
    appended = _rows_appended(kind, out / "bids", home)
    if appended != result.rows_in:
        raise AssertionError(f"{kind}: {appended} bids in the sink, {result.rows_in} read")
    return {
        "sink": kind,
        "windows": windows,
        "rows_in": result.rows_in,
        "rows_per_window": result.rows_in // windows,
        "commit_ms_median": round(statistics.median(c.timings.get("commit", 0.0) for c in steady), 1),
        "stage_ms_median": round(statistics.median(c.timings.get("stage", 0.0) for c in steady), 1),
        "checkpoint_ms_median": round(statistics.median(c.timings.get("checkpoint", 0.0) for c in steady), 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--rate", type=int, default=2000, help="Nexmark events per second (46 of 50 are bids)")
    parser.add_argument("--out", default="bench/results/lakehouse.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-lakehouse-") as tmp:
        rows = [run_kind(kind, args.windows, args.rate, Path(tmp)) for kind in SINKS]
    base = rows[0]
    for r in rows:
        r["commit_vs_file"] = round(r["commit_ms_median"] / base["commit_ms_median"], 2)
    report = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "rate": args.rate, "rows": rows}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for r in rows:
        print(f"{r['sink']:8} {r['rows_in']:>8,} rows  commit {r['commit_ms_median']:7.1f} ms/window "
              f"({r['commit_vs_file']}x file)  stage {r['stage_ms_median']:7.1f} ms/window")


if __name__ == "__main__":
    main()
