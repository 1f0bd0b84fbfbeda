"""Lockgate: daily incremental PageRank and connected components over a stream of links.

Each DAG run is one day of event time (its data interval), one cycle window of
``pipelines/graph_daily.py``:

1. ``land_links`` writes the day's links (a deterministic synthetic web: new pages link to
   earlier ones, more often to popular ones) as one Parquet file, the way an upstream system
   would land them;
2. ``run_day`` runs the day's window: the links join the graph kept in the job's checkpoint,
   then PageRank (warm-started from yesterday's ranks) and the components (incremental) run
   superstep by superstep, and the pages whose results changed are committed exactly once;
3. ``report`` reads the current tables and prints the top pages and the components.

``catchup=True`` runs every day since ``start_date`` in order (``depends_on_past``,
``max_active_runs=1``). A failed try is retried (``retries=2``) and resumes from the last
completed day: the ``fail_on`` parameter (a date) arms a one-off failure on that day to show it.
The run operator is deferrable with a controller (``lockgate_default`` pointing at
``lockgate server``); on the embedded default it runs in the task.

    airflow dags test lockgate_graph_daily 2026-01-02
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task

from lockgate import default_home
from lockgate_provider.assets import lockgate_windows_alias
from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipelines", "graph_daily.py") + ":pipeline"
JOB = "graph_daily"
#: pages that exist before the first day, and pages (with their links) each day adds
SEED_PAGES, NEW_PAGES, LINKS_PER_PAGE = 200, 60, 3
START = datetime(2026, 1, 1, tzinfo=UTC)


def examples_out() -> str:
    """Where the example pipelines write (the same rule as ``dags/pipelines/*.py``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        out = os.path.join(default_home(), "examples")
    return os.path.abspath(out)


def day_links(day: datetime) -> list[tuple[int, int]]:
    """The links of ``day``: deterministic. Day 0 links the seed pages in small clusters; each
    day after adds pages linking to earlier ones (preferring pages already linked to) and a few
    links between earlier pages, which merge components."""
    n = (day - START).days
    rng = random.Random(f"links-{n}")
    links: set[tuple[int, int]] = set()
    if n == 0:
        for page in range(SEED_PAGES):
            cluster = page // 20
            for _ in range(LINKS_PER_PAGE):
                other = cluster * 20 + rng.randrange(20)
                if other != page:
                    links.add((page, other))
        return sorted(links)
    first = SEED_PAGES + (n - 1) * NEW_PAGES
    for page in range(first, first + NEW_PAGES):
        for _ in range(LINKS_PER_PAGE):
            target = min(rng.randrange(page), rng.randrange(page))  # skewed towards old pages
            links.add((page, target))
    for _ in range(5):
        a, b = rng.randrange(first), rng.randrange(first)
        if a != b:
            links.add((a, b))
    return sorted(links)


with DAG(
    dag_id="lockgate_graph_daily",
    description="Daily incremental PageRank and connected components over a stream of links",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=START,
    end_date=datetime(2026, 1, 8, tzinfo=UTC),
    catchup=True,
    max_active_runs=1,
    default_args={"depends_on_past": True},
    params={"fail_on": Param("", type="string", description="a day (YYYY-MM-DD) whose first try fails once")},
    tags=["lockgate", "example", "graph"],
    doc_md=__doc__,
) as dag:

    @task
    def land_links(data_interval_start: datetime | None = None, params: dict | None = None) -> dict:
        """Write the day's links (idempotent: the same file each time); arm the failure if asked."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        assert data_interval_start is not None and params is not None
        day = data_interval_start.astimezone(UTC)
        links = day_links(day)
        folder = os.path.join(examples_out(), "graph_daily", "links")
        os.makedirs(folder, exist_ok=True)
        ts = [day + timedelta(seconds=i * 86_399 // max(1, len(links))) for i in range(len(links))]
        table = pa.table({"src": pa.array([a for a, _ in links], pa.int64()),
                          "dst": pa.array([b for _, b in links], pa.int64()),
                          "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, os.path.join(folder, f"day={day.date().isoformat()}.parquet"))
        if params.get("fail_on") == day.date().isoformat():
            with open(os.path.join(examples_out(), "graph_daily", "armed"), "w") as f:
                f.write(day.isoformat())
        return {"day": day.date().isoformat(), "links": len(links)}

    run_day = LockgateRunWindowsOperator(
        task_id="run_day",
        pipeline=PIPELINE,
        job=JOB,
        retries=2,
        retry_delay=timedelta(seconds=1),
        outlets=[lockgate_windows_alias(JOB)],
    )

    @task
    def report(result: dict) -> dict:
        """The current tables after the day: the top pages and the components."""
        import pyarrow.parquet as pq

        out = os.path.join(examples_out(), "graph_daily")
        ranks = pq.read_table(os.path.join(out, "ranks", "_current", "current.parquet")).to_pylist()
        components = pq.read_table(os.path.join(out, "components", "_current", "current.parquet")).to_pylist()
        top = sorted(ranks, key=lambda r: -r["rank"])[:5]
        summary = {
            "window": result["last_window"],
            "pages": len(ranks),
            "components": len({r["component"] for r in components}),
            "top_pages": [[r["id"], round(r["rank"], 6)] for r in top],
            "rows_out": result["rows_out"],
        }
        print(f"after {result['end']}: {summary}")
        return summary

    landed = land_links()
    landed >> run_day
    report(run_day.output)
