"""A continuous pipeline, started by ``dags/lockgate_nexmark_live.py``.

Nexmark bids (a bounded feed of 10 minutes, so the example ends; drop ``max_events`` for
an endless one) counted per auction every minute, in one-minute cycle windows, written to
Parquet under ``<out>/nexmark_live/per_auction/lg_window=<W>/``. A sensor waits for the
checkpoint of a window; the report DAG then reads every window up to it.
"""

import os
from datetime import timedelta

import lockgate as lg


def examples_out() -> str:
    """``$LOCKGATE_EXAMPLES_OUT``, or ``examples/`` under ``$LOCKGATE_HOME`` (``~/.lockgate``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        home = lg.default_home()
        out = os.path.join(home, "examples")
    return os.path.abspath(out)


OUT = os.path.join(examples_out(), "nexmark_live")
EVENTS_PER_SECOND = 50

pipeline = lg.Pipeline("nexmark_live", cycle_window=timedelta(minutes=1), parallelism=2)

bids = pipeline.source(
    lg.NexmarkSource(
        "bid", events_per_second=EVENTS_PER_SECOND, seed=7, start="2026-01-01T00:00:00",
        max_events=EVENTS_PER_SECOND * 600,
    ),
    name="bids",
)
(
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(minutes=1)))
    .aggregate(bids=lg.count(), max_price=lg.max("price"), name="per_auction")
    .sink(lg.FileSink(os.path.join(OUT, "per_auction")), name="parquet")
)
