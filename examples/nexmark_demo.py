"""The demo pipeline: Nexmark bids, per-auction counts in 10-second windows, and a
running total per bidder, cut into 20-second cycle windows.

    lockgate explain examples/nexmark_demo.py:pipeline
    lockgate run examples/nexmark_demo.py:pipeline --until-caught-up
"""

import os
from datetime import timedelta

import lockgate as lg

OUT = os.environ.get("LOCKGATE_DEMO_OUT", os.path.join(os.environ.get("LOCKGATE_HOME", ".lockgate"), "demo-out"))

pipeline = lg.Pipeline("nexmark_demo", cycle_window=timedelta(seconds=20), parallelism=2)

bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=2_000, seed=7, start="2026-01-01T00:00:00", max_events=240_000),
    name="bids",
)

# Nexmark q7-like: bids and the highest price per auction, every 10 seconds of event time
(
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds=10)))
    .aggregate(bids=lg.count(), max_price=lg.max("price"), name="auction_windows")
    .sink(lg.FileSink(os.path.join(OUT, "auction_windows")), name="auction_windows_files")
)

# a running aggregate: each bidder's totals across every window so far
(
    bids.key_by("bidder")
    .aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
    .sink(lg.CollectSink("bidder_totals"), name="bidder_totals_sink")
)
