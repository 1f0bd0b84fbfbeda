"""Lockgate: an hourly windowed aggregation over the Nexmark bid stream.

Every hour of event time (the DAG run's data interval) is three 20-minute cycle windows of
``pipelines/nexmark_hourly.py``: bids per auction every 10 minutes, committed exactly once
to Parquet and, when ``LOCKGATE_PG_URL`` is set, to PostgreSQL.

* ``catchup=True`` runs every hour since ``start_date``; ``depends_on_past=True`` and
  ``max_active_runs=1`` keep the hours in order (a Lockgate job runs its windows strictly
  in order: an hour whose predecessor is missing fails with the missing windows named).
* A retry resumes from the last completed window: nothing is lost or written twice.
* Each committed window emits an asset event on ``lockgate://jobs/nexmark_hourly`` (with
  its window id and row counts), through the alias ``lockgate/nexmark_hourly/windows``.

    airflow dags test lockgate_nexmark_hourly 2026-01-01T01:00:00+00:00
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, task

from lockgate_provider.assets import lockgate_windows_alias
from lockgate_provider.operators.lockgate import LockgateCompileOperator, LockgateRunWindowsOperator

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipelines", "nexmark_hourly.py") + ":pipeline"
JOB = "nexmark_hourly"

with DAG(
    dag_id="lockgate_nexmark_hourly",
    description="Hourly windowed aggregation over Nexmark bids, to Parquet and PostgreSQL",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    end_date=datetime(2026, 1, 2, tzinfo=UTC),
    catchup=True,
    max_active_runs=1,
    default_args={"depends_on_past": True, "retries": 2, "retry_delay": timedelta(seconds=30)},
    tags=["lockgate", "example"],
    doc_md=__doc__,
) as dag:
    compile_pipeline = LockgateCompileOperator(task_id="compile", pipeline=PIPELINE, job=JOB)

    run_windows = LockgateRunWindowsOperator(
        task_id="run_windows",
        pipeline=PIPELINE,
        job=JOB,
        outlets=[lockgate_windows_alias(JOB)],
    )

    @task
    def summarize(plan: dict, result: dict) -> dict:
        """One line per committed window, and the hour's totals."""
        for w in result["checkpoints"]:
            print(f"window {w['window']} [{w['window_start']}, {w['window_end']}): {w['rows_in']} bids in, {w['rows_out']} rows out")
        summary = {
            "plan_version": plan["plan_version"],
            "hour": [result["start"], result["end"]],
            "windows": [result["first_window"], result["last_window"]],
            "bids": result["rows_in"],
            "rows_out": result["rows_out"],
        }
        print(f"hour summary: {summary}")
        return summary

    compile_pipeline >> run_windows
    summarize(compile_pipeline.output, run_windows.output)
