"""Lockgate: a Nexmark bid log in NATS JetStream, read with exact replay.

``publish_bids`` publishes ``params.seconds`` of live Nexmark bids to the JetStream stream
(``$LOCKGATE_NATS_STREAM``, ``nexmark_bids``, on ``$LOCKGATE_NATS_URL``) and waits until the
cycle windows they arrived in have ended. ``run_windows`` runs the pipeline
``pipelines/nats_bids.py`` (a ``NatsSource``) over those windows, as a job of this run; each
window's sequence range is recorded in its checkpoint, so a retry of the task reads exactly the
same messages. The windows go to Parquet and to a Delta Lake table of the run's job
(``<out>/nats_bids/delta/<job>``, one Delta commit per window). ``check_output`` reads both back
(the Delta table with delta-rs) and compares them with what was published: every bid counted
once in each, or set aside once as late (a bid that arrived after the watermark passed its window,
e.g. from a publisher that stalled on a busy machine: ``<out>/nats_bids/late/``).

    airflow dags test lockgate_nats_bids -c '{"seconds": 4}'
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipelines", "nats_bids.py") + ":pipeline"
CYCLE_S = 2
#: the watermark (2 s behind) closes a tumbling window two cycles after the window ends
CLOSE_S = 2 * CYCLE_S


def examples_out() -> str:
    """Where the example pipelines write (the same rule as ``dags/pipelines/*.py``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        from lockgate import default_home

        out = os.path.join(default_home(), "examples")
    return os.path.abspath(out)


with DAG(
    dag_id="lockgate_nats_bids",
    description="Publish Nexmark bids to NATS JetStream, aggregate them per window into Parquet and a Delta table",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "seconds": Param(4, type="number", minimum=1, description="seconds of live bids to publish"),
        "events_per_second": Param(100, type="integer", minimum=1, description="Nexmark events per second"),
    },
    tags=["lockgate", "example", "nats"],
    doc_md=__doc__,
) as dag:

    @task
    def publish_bids(params: dict | None = None) -> dict:
        """Publish the bids; return the time range to run and what was published."""
        from lockgate.nexmark.nats_feed import publish_bids as publish

        url = os.environ.get("LOCKGATE_NATS_URL", "nats://127.0.0.1:4222")
        stream = os.environ.get("LOCKGATE_NATS_STREAM", "nexmark_bids")
        params = params or {}
        feed = publish(url, stream, seconds=float(params.get("seconds", 4)),
                       events_per_second=int(params.get("events_per_second", 100)))
        end = feed.end + timedelta(seconds=CYCLE_S + CLOSE_S)
        time.sleep(max(0.0, end.timestamp() + CYCLE_S - time.time()))  # NATS windows are read once ended
        return {
            "start": feed.start.isoformat(), "end": end.isoformat(), "bids": feed.messages,
            "first_seq": feed.first_seq, "last_seq": feed.last_seq, "job": f"nats_bids_{feed.start:%Y%m%dT%H%M%S}",
        }

    published = publish_bids()

    run = LockgateRunWindowsOperator(
        task_id="run_windows",
        pipeline=PIPELINE,
        job="{{ ti.xcom_pull(task_ids='publish_bids')['job'] }}",
        start="{{ ti.xcom_pull(task_ids='publish_bids')['start'] }}",
        end="{{ ti.xcom_pull(task_ids='publish_bids')['end'] }}",
    )

    @task
    def check_output(feed: dict, ti=None) -> dict:
        """Every published bid counted once in the committed windows of this run's job."""
        import pyarrow.dataset as ds

        result = ti.xcom_pull(task_ids="run_windows")
        first, last = int(result["first_window"]), int(result["last_window"])
        data = ds.dataset(os.path.join(examples_out(), "nats_bids", "per_auction"), format="parquet",
                          partitioning="hive")
        this_run = (ds.field("lg_window") >= first) & (ds.field("lg_window") <= last)
        counted = sum(data.to_table(filter=this_run).column("bids").to_pylist())
        # the late sink's folder per source: <late path>/<source name>
        late_dir = os.path.join(examples_out(), "nats_bids", "late", "bids")
        late = (ds.dataset(late_dir, format="parquet", partitioning="hive").count_rows(filter=this_run)
                if os.path.isdir(late_dir) else 0)
        from deltalake import DeltaTable

        delta = DeltaTable(os.path.join(examples_out(), "nats_bids", "delta", feed["job"]))
        in_delta = sum(delta.to_pyarrow_table(columns=["bids"]).column("bids").to_pylist())
        report = {"job": feed["job"], "windows": [first, last], "bids": feed["bids"], "counted": counted,
                  "delta_counted": in_delta, "late": late, "delta_version": delta.version(),
                  "sequences": [feed["first_seq"], feed["last_seq"]]}
        if counted + late != feed["bids"] or in_delta + late != feed["bids"]:
            raise ValueError(f"{counted} bids counted in windows {first}..{last} of the Parquet, {in_delta} "
                             f"in the Delta table and {late} set aside as late, {feed['bids']} published: {report}")
        return report

    published >> run >> check_output(published)
