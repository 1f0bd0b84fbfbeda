"""The daily link graph's pipeline, run by ``dags/lockgate_graph_daily.py``.

A stream of links between pages (``src``, ``dst``, ``ts``) lands as one Parquet file a day in
``<out>/graph_daily/links/``. The cycle window is one day; every day's links are added to the
graph (kept in the checkpoint), then two graph computations run as iteration cycles inside
the day's round:

- PageRank, warm-started from the previous day's ranks (fewer supersteps than from scratch);
- weakly connected components, incremental: only what the day's links reach recomputes.

Both emit the pages whose result changed that day, an updating stream keyed by ``id``, to a
keyed Parquet sink: its window folders are the changelog and ``_current/current.parquet`` the
current table. A check step before the graph raises once, on the day written in the marker
file ``<out>/graph_daily/armed`` (the DAG's first task writes it when asked to): that day's
task fails, and its retry resumes from the last completed day.

    lockgate explain dags/pipelines/graph_daily.py:pipeline
"""

import contextlib
import os
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

import lockgate as lg
from lockgate.graph.library import ConnectedComponents, PageRank


def examples_out() -> str:
    """``$LOCKGATE_EXAMPLES_OUT``, or ``examples/`` under ``$LOCKGATE_HOME`` (``~/.lockgate``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        out = os.path.join(lg.default_home(), "examples")
    return os.path.abspath(out)


OUT = os.path.join(examples_out(), "graph_daily")
LINKS = os.path.join(OUT, "links")
MARKER = os.path.join(OUT, "armed")
DAY = timedelta(days=1)


def fail_once(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Pass links through; raise once if the batch holds links of the armed day."""
    try:
        with open(MARKER) as f:
            armed = datetime.fromisoformat(f.read().strip())
    except (OSError, ValueError):
        return batch
    if batch.num_rows:
        t = pc.min_max(batch.column("ts"))
        lo, hi = (t[k].as_py().replace(tzinfo=UTC) for k in ("min", "max"))
        if lo < armed + DAY and hi >= armed:
            with contextlib.suppress(FileNotFoundError):
                os.remove(MARKER)
            raise RuntimeError(f"graph demo: simulated failure on {armed.date().isoformat()}")
    return batch


pipeline = lg.Pipeline("graph_daily", cycle_window=DAY, parallelism=2)
links = pipeline.source(
    lg.FileSource(LINKS, event_time="ts", schema="src BIGINT, dst BIGINT, ts TIMESTAMP"), name="links"
)
web = pipeline.graph(links.map_batches(fail_once, name="fail_once").select("src", "dst"), name="web")
(web.compute(PageRank(tolerance=1e-8), name="ranks")
    .sink(lg.FileSink(os.path.join(OUT, "ranks"), key=["id"]), name="ranks_parquet"))
(web.compute(ConnectedComponents(), name="components")
    .sink(lg.FileSink(os.path.join(OUT, "components"), key=["id"]), name="components_parquet"))
