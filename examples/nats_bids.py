"""A Nexmark bid log in NATS JetStream, read with exact replay by ``NatsSource``.

Running this file publishes a live bid feed (``--seconds`` of Nexmark bids, each when it is due)
to a JetStream stream, then runs the pipeline below over the windows the feed covered: bids
per auction and their highest price in 2-second tumbling windows of event time (the bids'
``date_time``), cut into 2-second cycle windows by arrival (the JetStream timestamp), written to
Parquet and to a Delta Lake table, one Delta commit per window (a table takes one job: each
feed's job, ``nats_bids_<time>``, writes its own table, ``<out>/nats_bids/delta/<job>``: ``{job}``
in the sink's path). Each window's sequence range is recorded in its checkpoint: run it again, or
restore the job, and the same windows read the same messages.

    python examples/nats_bids.py --url nats://127.0.0.1:4222 --seconds 6
    lockgate explain examples/nats_bids.py:pipeline

Settings (environment): ``LOCKGATE_NATS_URL`` (``nats://127.0.0.1:4222``),
``LOCKGATE_NATS_STREAM`` (``nexmark_bids``), ``LOCKGATE_EXAMPLES_OUT`` (``$LOCKGATE_HOME/examples``).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import lockgate as lg
from lockgate.nexmark.nats_feed import BID_DDL, publish_bids

URL = os.environ.get("LOCKGATE_NATS_URL", "nats://127.0.0.1:4222")
STREAM = os.environ.get("LOCKGATE_NATS_STREAM", "nexmark_bids")
OUT = os.path.join(os.path.abspath(os.environ.get("LOCKGATE_EXAMPLES_OUT")
                                   or os.path.join(lg.default_home(), "examples")), "nats_bids")
CYCLE = timedelta(seconds=2)

pipeline = lg.Pipeline("nats_bids", cycle_window=CYCLE, parallelism=2,
                       # a bid that arrives after the watermark passed its window (a publisher that
                       # stalled) is set aside under <out>/nats_bids/late/bids/, not dropped
                       watermark=lg.Watermark(lateness=timedelta(seconds=2),
                                              late=lg.FileSink(os.path.join(OUT, "late"))))
bids = pipeline.source(
    lg.NatsSource(URL, STREAM, subject=f"{STREAM}.bids", event_time="date_time", schema=BID_DDL, arrival="arrived"),
    name="bids",
)
per_auction = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds=2)))
    .aggregate(bids=lg.count(), max_price=lg.max("price"), name="per_auction")
)
per_auction.sink(lg.FileSink(os.path.join(OUT, "per_auction")), name="parquet")
per_auction.sink(lg.DeltaSink(os.path.join(OUT, "delta", "{job}")), name="delta")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds of live bids to publish")
    parser.add_argument("--events-per-second", type=int, default=200, help="Nexmark events per second (all kinds)")
    args = parser.parse_args()

    feed = publish_bids(URL, STREAM, seconds=args.seconds, events_per_second=args.events_per_second)
    print(f"published {feed.messages} bids to {STREAM} (sequences {feed.first_seq}..{feed.last_seq})")
    ref = f"{os.path.abspath(__file__)}:pipeline"
    job = f"nats_bids_{feed.start:%Y%m%dT%H%M%S}"  # a job per feed: its first window starts by arrival time
    client = lg.connect("embedded")
    try:
        first, last = client.windows_for(ref, feed.start, feed.end + timedelta(seconds=1))
        last += 2  # the watermark (2 s behind) closes the last tumbling windows two cycles later
        time.sleep(max(0.0, (last + 1) * CYCLE.total_seconds() - time.time() + 0.05))  # read once ended
        result = client.run(ref, job=job, first=first, last=last)
        print(f"{job} {result.state}: windows {first}..{last}, {result.rows_in} bids in ({result.late_rows} late), "
              f"{result.rows_out} rows out, Parquet under {OUT}/per_auction")
        from deltalake import DeltaTable

        table = DeltaTable(os.path.join(OUT, "delta", job))
        counted = sum(table.to_pyarrow_table(columns=["bids"]).column("bids").to_pylist())
        print(f"Delta table {table.table_uri}: version {table.version()}, {counted} bids counted, "
              f"{result.late_rows} set aside as late ({feed.messages} published)")
    finally:
        client.close()


if __name__ == "__main__":
    main()
