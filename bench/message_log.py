"""``NatsSource``'s read cost per window against ``FileSource``, on the same bids in one run.

A live Nexmark bid feed (``--seconds`` at ``--rate`` events a second) is published to a fresh
JetStream stream; the same bids are written to one Parquet file. Two pipelines, the same but
for their source, copy every bid to a ``FileSink`` in 10 s cycle windows, one window per round:
the NATS one reads each window's sequence range (cut by arrival), the file one reads the file
sliced by event time. The read phase of every round (``timings["read"]``: the source's slice
on the driver and the DataFrame built over it) is taken from the catalog; the medians over the
windows holding bids, after the first round, are reported per 1,000 rows. Each run's output is
checked: the bids written equal the bids read.

    python -m bench.message_log --url nats://127.0.0.1:4222 --seconds 40 --rate 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq

import lockgate as lg
from lockgate.nexmark.nats_feed import BID_DDL, publish_bids

CYCLE_S = 10
PIPELINE = """
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("log_{kind}", cycle_window=timedelta(seconds={cycle}), parallelism=2,
                       watermark=lg.Watermark(lateness=timedelta(seconds={cycle})))
bids = pipeline.source({source}, name="bids")
bids.select("auction", "bidder", "price", "date_time").sink(lg.FileSink({out!r}), name="copy")
"""


def _run(kind: str, source: str, base: Path, start: datetime, end: datetime) -> dict[str, Any]:
    home = base / kind
    home.mkdir(parents=True)
    out = home / "out"
    (home / "pipeline.py").write_text(PIPELINE.format(kind=kind, cycle=CYCLE_S, source=source, out=str(out)))
    ref = f"{home / 'pipeline.py'}:pipeline"
    client = lg.connect("embedded", home=str(home))
    try:
        first, last = client.windows_for(ref, start, end)
        result = client.run(ref, job=f"log_{kind}", first=first, last=last, catchup="off")
        cycles = sorted(client.list_cycles(f"log_{kind}", limit=last - first + 5).cycles, key=lambda c: c.window)
    finally:
        client.close()
    written = ds.dataset(str(out), format="parquet", partitioning="hive").count_rows()
    if written != result.rows_in:
        raise AssertionError(f"{kind}: {written} bids written, {result.rows_in} read")
    busy = [c for c in cycles[1:] if c.state == "COMMITTED" and c.rows_in > 0]
    return {
        "source": kind,
        "windows": len(cycles),
        "rows_in": result.rows_in,
        "read_ms_median": round(statistics.median(c.timings.get("read", 0.0) for c in busy), 1),
        "rows_per_window_median": int(statistics.median(c.rows_in for c in busy)),
        "read_ms_per_1000_rows": round(statistics.median(c.timings.get("read", 0.0) * 1000 / c.rows_in
                                                         for c in busy), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="nats://127.0.0.1:4222")
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds of live bids to publish")
    parser.add_argument("--rate", type=int, default=2000, help="Nexmark events per second (46 of 50 are bids)")
    parser.add_argument("--out", default="bench/results/message_log.json")
    args = parser.parse_args(argv)
    stream = f"bench_{uuid.uuid4().hex[:8]}"
    feed = publish_bids(args.url, stream, seconds=args.seconds, events_per_second=args.rate)
    end = feed.end + timedelta(seconds=2 * CYCLE_S)
    time.sleep(max(0.0, end.timestamp() + CYCLE_S - time.time()))  # a NATS window is read once it has ended
    try:
        with tempfile.TemporaryDirectory(prefix="lockgate-bench-log-") as tmp:
            base = Path(tmp)
            (base / "bids").mkdir()
            pq.write_table(feed.bids, base / "bids" / "bids.parquet")
            rows = [
                _run("nats", f"lg.NatsSource({args.url!r}, {stream!r}, subject={stream + '.bids'!r}, "
                             f"event_time='date_time', schema={BID_DDL!r})", base, feed.start, end),
                _run("file", f"lg.FileSource({str(base / 'bids')!r}, event_time='date_time')", base, feed.start, end),
            ]
    finally:
        import asyncio

        import nats

        async def drop() -> None:
            nc = await nats.connect(args.url)
            try:
                await nc.jetstream().delete_stream(stream)
            finally:
                await nc.close()

        asyncio.run(drop())
    for r in rows:
        if r["rows_in"] != feed.messages:
            raise AssertionError(f"{r['source']}: {r['rows_in']} bids read, {feed.messages} published")
    rows[0]["read_vs_file"] = round(rows[0]["read_ms_per_1000_rows"] / rows[1]["read_ms_per_1000_rows"], 2)
    report = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "rate": args.rate, "published": feed.messages,
              "rows": rows}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for r in rows:
        print(f"{r['source']:5} {r['rows_in']:>8,} rows in {r['windows']} windows  read {r['read_ms_median']:7.1f} ms "
              f"a window of {r['rows_per_window_median']:,}  ({r['read_ms_per_1000_rows']} ms per 1,000 rows)")


if __name__ == "__main__":
    main()
