"""Lockgate failure demo: a task fails in the middle of a run, its retry restores from the
last completed window, and the output is exact.

``arm_failure`` writes the marker that makes the pipeline raise once, in the window that
starts at ``params.fail_at``. ``run_windows`` runs the five one-minute windows of
``params.start``..``params.end``: windows 1-3 are committed, window 4 fails, and the task
fails. Its retry finds the job's last checkpoint (window 3), restores the keyed state from
it and runs windows 4 and 5 only; nothing is run twice. ``check_output`` proves it: the
per-auction counts add up to exactly the number of bids generated, with no window twice,
and every bidder's running total equals its bids.

    airflow dags test lockgate_failure_demo
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from lockgate import default_home
from lockgate_provider.assets import lockgate_windows_alias
from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipelines", "failure_demo.py") + ":pipeline"
JOB = "failure_demo"


def examples_out() -> str:
    """Where the example pipelines write (the same rule as ``dags/pipelines/*.py``)."""
    out = os.environ.get("LOCKGATE_EXAMPLES_OUT")
    if not out:
        home = default_home()
        out = os.path.join(home, "examples")
    return os.path.abspath(out)


with DAG(
    dag_id="lockgate_failure_demo",
    description="A task fails mid-run; its retry restores from the last window; the output is exact",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "start": Param("2026-01-01T00:00:00+00:00", type="string", description="first instant (inclusive)"),
        "end": Param("2026-01-01T00:05:00+00:00", type="string", description="last instant (exclusive)"),
        "fail_at": Param("2026-01-01T00:03:00+00:00", type="string", description="start of the window that fails once"),
    },
    tags=["lockgate", "example"],
    doc_md=__doc__,
) as dag:

    @task
    def arm_failure(params: dict | None = None) -> str:
        """Arm the one-off failure (the pipeline removes the marker when it fails)."""
        assert params is not None
        out = os.path.join(examples_out(), "failure_demo")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "armed"), "w") as f:
            f.write(params["fail_at"])
        print(f"armed: the window starting {params['fail_at']} fails once")
        return params["fail_at"]

    run = LockgateRunWindowsOperator(
        task_id="run_windows",
        pipeline=PIPELINE,
        job=JOB,
        start="{{ params.start }}",
        end="{{ params.end }}",
        retries=1,
        retry_delay=timedelta(seconds=1),
        outlets=[lockgate_windows_alias(JOB)],
    )

    @task
    def check_output(result: dict, params: dict | None = None) -> dict:
        """The output is exact: every bid of the range counted once, whatever failed."""
        import pyarrow.dataset as ds

        assert params is not None
        out = os.path.join(examples_out(), "failure_demo")
        start = datetime.fromisoformat(params["start"])
        end = datetime.fromisoformat(params["end"])
        first, last = result["first_window"], result["last_window"]
        # Nexmark: in every block of 50 events, 46 are bids; 20 events per second
        expected_bids = int((end - start).total_seconds()) * 20 * 46 // 50
        per_auction = ds.dataset(os.path.join(out, "per_auction"), format="parquet", partitioning="hive").to_table()
        windows = per_auction.column("lg_window").to_pylist()
        in_range = [w for w in windows if first <= w <= last]
        bids = sum(b for w, b in zip(windows, per_auction.column("bids").to_pylist(), strict=True) if first <= w <= last)
        keys = list(
            zip(windows, per_auction.column("window_start").to_pylist(), per_auction.column("auction").to_pylist(), strict=True)
        )
        assert len(keys) == len(set(keys)), "a window was committed twice"
        assert bids == expected_bids, f"{bids} bids counted, {expected_bids} generated"
        totals = ds.dataset(os.path.join(out, "bidder_totals"), format="parquet", partitioning="hive").to_table()
        # running totals: each bidder's total at the end of the range, less the one before it
        before: dict[int, tuple[int, int]] = {}
        after: dict[int, tuple[int, int]] = {}
        for w, bidder, n in zip(
            totals.column("lg_window").to_pylist(), totals.column("bidder").to_pylist(), totals.column("bids").to_pylist(),
            strict=True,
        ):
            side = before if w < first else after if w <= last else None
            if side is not None and (bidder not in side or w > side[bidder][0]):
                side[bidder] = (w, n)
        running = sum(n - before.get(b, (0, 0))[1] for b, (_, n) in after.items())
        assert running == expected_bids, f"running totals grew by {running}, {expected_bids} bids generated"
        report = {
            "windows": sorted(set(in_range)),
            "bids": bids,
            "expected_bids": expected_bids,
            "bidders": len(after),
            "rows_in": result["rows_in"],
        }
        print(f"exact: {report}")
        return report

    arm_failure() >> run
    check_output(run.output)
