"""The failure demo's pipeline, run by ``dags/lockgate_failure_demo.py``.

Nexmark bids, one-minute cycle windows: a running total per bidder (keyed state carried
from window to window in checkpoints) and bids per auction per minute, both to Parquet.

A check step between source and aggregates raises, once, in the window that starts at the
instant written in the marker file ``<out>/failure_demo/armed`` (the DAG's first task
writes it; the failure removes it). Windows before it are committed; the task's retry
restores the checkpoint of the window before and goes on, and the totals come out exact.
"""

import contextlib
import os
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

import lockgate as lg


def examples_out() -> str:
    """``$LOCKGATE_EXAMPLES_OUT``, or ``examples/`` under ``$LOCKGATE_HOME`` (``~/.lockgate``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        home = lg.default_home()
        out = os.path.join(home, "examples")
    return os.path.abspath(out)


OUT = os.path.join(examples_out(), "failure_demo")
MARKER = os.path.join(OUT, "armed")
CYCLE = timedelta(minutes=1)
EVENTS_PER_SECOND = 20


def fail_once(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Pass records through; raise once if the batch holds records of the armed window."""
    try:
        with open(MARKER) as f:
            armed = datetime.fromisoformat(f.read().strip())
    except (OSError, ValueError):
        return batch
    if batch.num_rows:
        t = pc.min_max(batch.column("date_time"))
        lo = t["min"].as_py().replace(tzinfo=UTC)
        hi = t["max"].as_py().replace(tzinfo=UTC)
        if lo < armed + CYCLE and hi >= armed:
            with contextlib.suppress(FileNotFoundError):
                os.remove(MARKER)
            raise RuntimeError(f"failure demo: simulated crash in the window starting {armed.isoformat()}")
    return batch


pipeline = lg.Pipeline("failure_demo", cycle_window=CYCLE, parallelism=2)

bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=EVENTS_PER_SECOND, seed=11, start="2026-01-01T00:00:00"),
    name="bids",
)
checked = bids.map_batches(fail_once, name="fail_once")
(
    checked.key_by("bidder")
    .aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
    .sink(lg.FileSink(os.path.join(OUT, "bidder_totals")), name="bidder_totals_parquet")
)
(
    checked.key_by("auction")
    .window(lg.Tumbling(CYCLE))
    .aggregate(bids=lg.count(), name="per_auction")
    .sink(lg.FileSink(os.path.join(OUT, "per_auction")), name="per_auction_parquet")
)
