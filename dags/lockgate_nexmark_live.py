"""Lockgate: a continuous pipeline, a sensor on its checkpoints, and a report DAG gated by
an asset.

``lockgate_nexmark_live`` starts the continuous job ``nexmark_live`` (windows run as their
data arrives, until stopped), waits with ``LockgateCheckpointSensor`` for the checkpoint of
the window ending at ``params.until``, and emits the asset ``lockgate://jobs/nexmark_live``
with that checkpoint in the event's extra. ``lockgate_nexmark_live_report`` is scheduled on
that asset: it reads the committed output up to that window and writes a report. With
``params.stop_after`` the job is then stopped, drained to a window boundary.

    airflow dags test lockgate_nexmark_live -c '{"stop_after": true}'
    airflow dags test lockgate_nexmark_live_report
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG, Param, task

from lockgate import default_home
from lockgate_provider.assets import lockgate_asset
from lockgate_provider.operators.lockgate import LockgateStartPipelineOperator, LockgateStopPipelineOperator
from lockgate_provider.sensors.lockgate import LockgateCheckpointSensor

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipelines", "nexmark_live.py") + ":pipeline"
JOB = "nexmark_live"
LIVE = lockgate_asset(JOB)


def examples_out() -> str:
    """Where the example pipelines write (the same rule as ``dags/pipelines/*.py``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        home = default_home()
        out = os.path.join(home, "examples")
    return os.path.abspath(out)


with DAG(
    dag_id="lockgate_nexmark_live",
    description="Start a continuous Lockgate pipeline and gate a report on its checkpoints",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "until": Param("2026-01-01T00:04:00+00:00", type="string", description="report on everything before this instant"),
        "stop_after": Param(False, type="boolean", description="stop (drain) the job once the checkpoint is there"),
    },
    tags=["lockgate", "example"],
    doc_md=__doc__,
) as dag:
    start = LockgateStartPipelineOperator(task_id="start_pipeline", pipeline=PIPELINE, job=JOB)

    wait = LockgateCheckpointSensor(
        task_id="wait_for_checkpoint",
        job=JOB,
        window="{{ params.until }}",
        pipeline=PIPELINE,
        deferrable=True,
        poke_interval=2,
        timeout=3600,
        outlets=[LIVE],
    )

    @task.short_circuit
    def stop_requested(params: dict | None = None) -> bool:
        return bool(params and params["stop_after"])

    stop = LockgateStopPipelineOperator(task_id="stop_pipeline", job=JOB, drain=True)

    start >> wait >> stop_requested() >> stop


with DAG(
    dag_id="lockgate_nexmark_live_report",
    description="A report on the committed output of nexmark_live, run when its checkpoint lands",
    schedule=[LIVE],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["lockgate", "example"],
    doc_md=__doc__,
) as report_dag:

    @task(inlets=[LIVE])
    def report(inlet_events=None) -> dict:
        """Bids per auction up to the checkpointed window: the top auctions, and the totals."""
        import pyarrow.dataset as ds

        events = inlet_events[LIVE] if inlet_events is not None else []
        if not events:
            raise ValueError("no asset event for lockgate://jobs/nexmark_live yet: run lockgate_nexmark_live first")
        cp = events[-1].extra
        window = int(cp["window"])
        data = ds.dataset(os.path.join(examples_out(), JOB, "per_auction"), format="parquet", partitioning="hive")
        table = data.to_table(filter=ds.field("lg_window") <= window)
        totals: dict[int, int] = {}
        for auction, bids in zip(table.column("auction").to_pylist(), table.column("bids").to_pylist(), strict=True):
            totals[auction] = totals.get(auction, 0) + bids
        top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        result = {
            "job": JOB,
            "through_window": window,
            "through": cp.get("window_end"),
            "bids": sum(totals.values()),
            "auctions": len(totals),
            "top_auctions": [{"auction": a, "bids": b} for a, b in top],
        }
        path = os.path.join(examples_out(), JOB, f"report-{window}.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
        print(f"report written to {path}: {result}")
        return result

    report()
