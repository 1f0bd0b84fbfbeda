"""The pipeline of ``dags/lockgate_nats_bids.py``: Nexmark bids read from a NATS JetStream stream.

Bids per auction and their highest price in 2-second tumbling windows of event time (the bids'
``date_time``), cut into 2-second cycle windows by arrival (the JetStream timestamp), written to
Parquet under ``<out>/nats_bids/per_auction/lg_window=<W>/`` and to a Delta Lake table, one Delta
commit per window. A table takes one job: each DAG run's job writes its own table,
``<out>/nats_bids/delta/<job>`` (``{job}`` in the path). Each window's sequence range is recorded
in its checkpoint, so a retry or a restore reads exactly the same messages (and Delta's
transaction id makes the table's commit of a replayed window a no-op). Bids that arrive more than
2 seconds after their window (late) go to ``<out>/nats_bids/late/bids/lg_window=<W>/``.

The server and stream: ``$LOCKGATE_NATS_URL`` (``nats://127.0.0.1:4222``) and
``$LOCKGATE_NATS_STREAM`` (``nexmark_bids``).
"""

import os
from datetime import timedelta

import lockgate as lg
from lockgate.nexmark.nats_feed import BID_DDL


def examples_out() -> str:
    """``$LOCKGATE_EXAMPLES_OUT``, or ``examples/`` under ``$LOCKGATE_HOME`` (``~/.lockgate``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        home = lg.default_home()
        out = os.path.join(home, "examples")
    return os.path.abspath(out)


URL = os.environ.get("LOCKGATE_NATS_URL", "nats://127.0.0.1:4222")
STREAM = os.environ.get("LOCKGATE_NATS_STREAM", "nexmark_bids")
OUT = os.path.join(examples_out(), "nats_bids")

pipeline = lg.Pipeline("nats_bids", cycle_window=timedelta(seconds=2), parallelism=2,
                       # a bid that arrives after the watermark passed its window (a publisher that
                       # stalled) is set aside, not dropped, so that every bid can be accounted for
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
