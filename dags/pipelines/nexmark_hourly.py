"""Hourly windowed aggregation over Nexmark bids, run by ``dags/lockgate_nexmark_hourly.py``.

Per auction and 10 minutes of event time: the number of bids, the highest and the total
price. Cycle windows are 20 minutes, so one hourly DAG run is three cycle windows, each
committed to Parquet (``<out>/nexmark_hourly/per_auction/lg_window=<W>/``) and, when
``LOCKGATE_PG_URL`` is set, to the PostgreSQL table ``nexmark_per_auction`` (one
transaction per window), exactly once.

    lockgate explain dags/pipelines/nexmark_hourly.py:pipeline
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


OUT = os.path.join(examples_out(), "nexmark_hourly")
PG_URL = os.environ.get("LOCKGATE_PG_URL")  # e.g. postgresql://postgres@127.0.0.1:5432/lockgate
PG_TABLE = "nexmark_per_auction"

pipeline = lg.Pipeline("nexmark_hourly", cycle_window=timedelta(minutes=20), parallelism=2)

bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=5, seed=2026, start="2026-01-01T00:00:00"),
    name="bids",
)

per_auction = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(minutes=10)))
    .aggregate(bids=lg.count(), max_price=lg.max("price"), total_price=lg.sum("price"), name="per_auction")
)
per_auction.sink(lg.FileSink(os.path.join(OUT, "per_auction")), name="parquet")
if PG_URL:
    per_auction.sink(lg.PostgresSink(PG_URL, PG_TABLE), name="postgres")
