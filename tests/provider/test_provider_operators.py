"""Operators and the sensor in real Airflow DAG runs (``dag.test()``, SQLite), on the
embedded engine: summaries, links, compile errors and gaps as task failures with the right
message, the sensor's three modes and its fail-fast, start/stop/restore, and on_kill."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

START = datetime(2026, 1, 1, tzinfo=UTC)
W0 = 29453760  # the one-minute cycle window starting at 2026-01-01T00:00:00Z

HEADER = """
from datetime import datetime, timedelta, timezone
from airflow.sdk import DAG, CronDataIntervalTimetable
from lockgate_provider.operators.lockgate import (
    LockgateCompileOperator, LockgateRestoreOperator, LockgateRunWindowsOperator,
    LockgateStartPipelineOperator, LockgateStopPipelineOperator,
)
from lockgate_provider.sensors.lockgate import LockgateCheckpointSensor
UTC = timezone.utc
"""


def _bids(first_n: int, last_n: int) -> int:
    """Bids among Nexmark events ``first_n..last_n-1`` (46 of every 50 events)."""
    return sum(1 for n in range(first_n, last_n) if n % 50 >= 4)


def test_compile_operator_returns_the_summary_and_links_the_job(lg_env, run_dag, test_dag, tiny_pipeline):
    ref = tiny_pipeline("op_compile")
    test_dag("dag_op_compile", HEADER + f'''
with DAG("op_compile", schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
         start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False) as dag:
    LockgateCompileOperator(task_id="compile", pipeline="{ref}", job="{{{{ dag.dag_id }}}}_job")
''')
    res = run_dag("op_compile", logical_date=START + timedelta(hours=1))
    assert res.state == "success", res.tasks
    summary = res.xcom("compile")
    assert summary["pipeline"] == "op_compile" and summary["job"] == "op_compile_job"  # templated
    assert len(summary["plan_version"]) == 16 and summary["registered"] is True
    assert summary["operators"] == ["bids", "totals", "files"] and summary["stateful_operators"] == ["totals"]
    assert summary["windows"]["count"] == 60 and summary["windows"]["first"] == W0
    assert "totals" in summary["explain"] and summary["cycle_window_s"] == 60.0
    assert res.xcom("compile", "_link_LockgateJobLink") == "/plugin/lockgate/lockgate/ui/jobs/op_compile_job"
    assert res.xcom("compile", "lockgate_job") == "op_compile_job"  # how the plugin finds a task's job


def test_compile_error_fails_the_task_with_the_compile_errors_message(lg_env, run_dag, test_dag, tiny_pipeline, capfd):
    ref = tiny_pipeline(
        "op_typo", 'bids.filter("prise > 10", name="typo").sink(lg.CollectSink("out"), name="sink")'
    )
    test_dag("dag_op_typo", HEADER + f'''
with DAG("op_typo", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         default_args={{"retries": 3, "retry_delay": timedelta(seconds=1)}}) as dag:
    LockgateCompileOperator(task_id="compile", pipeline="{ref}")
    LockgateRunWindowsOperator(task_id="run", pipeline="{ref}", start="2026-01-01T00:00:00+00:00",
                               end="2026-01-01T00:02:00+00:00")
''')
    res = run_dag("op_typo")
    out = capfd.readouterr()
    text = out.out + out.err
    assert res.state == "failed"
    # failed at once, not retried: retrying cannot fix a pipeline
    assert res.state_of("compile") == "failed" and res.tries("compile") == 1
    assert res.state_of("run") == "failed" and res.tries("run") == 1
    assert "does not compile: operator 'typo'" in text and "prise" in text and "price" in text


def test_a_gap_fails_naming_the_missing_windows_and_the_fix(lg_env, run_dag, test_dag, tiny_pipeline, capfd):
    ref = tiny_pipeline("op_gap")
    test_dag("dag_op_gap", HEADER + f'''
with DAG("op_gap", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         params={{"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:02:00+00:00"}}) as dag:
    LockgateRunWindowsOperator(task_id="run", pipeline="{ref}", start="{{{{ params.start }}}}",
                               end="{{{{ params.end }}}}", retries=0)
''')
    assert run_dag("op_gap").state == "success"
    capfd.readouterr()
    res = run_dag("op_gap", conf={"start": "2026-01-01T00:04:00+00:00", "end": "2026-01-01T00:06:00+00:00"})
    text = "".join(capfd.readouterr())
    assert res.state == "failed"
    assert (
        f"cannot run windows {W0 + 4}..{W0 + 5}: windows {W0 + 2}..{W0 + 3} "
        "(2026-01-01T00:02:00+00:00 to 2026-01-01T00:04:00+00:00) not complete yet"
    ) in text
    assert "depends_on_past=True" in text and "earlier data interval" in text
    # nothing ran out of order
    import lockgate

    assert lockgate.connect("embedded", home=str(lg_env.home)).get_job("op_gap").last_window == W0 + 1


def test_first_window_next_takes_the_whole_backlog_in_one_task(lg_env, run_dag, test_dag, tiny_pipeline):
    """``first_window="next"``: a run starts after the job's last committed window, however far
    behind its data interval is, so one task takes a backlog (and a caught-up job runs nothing)."""
    import lockgate

    ref = tiny_pipeline("op_next")
    test_dag("dag_op_next", HEADER + f'''
with DAG("op_next", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         params={{"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:02:00+00:00"}}) as dag:
    LockgateRunWindowsOperator(task_id="run", pipeline="{ref}", first_window="next",
                               start="{{{{ params.start }}}}", end="{{{{ params.end }}}}", retries=0)
''')
    first = run_dag("op_next")  # a new job: from the range's first window
    assert first.state == "success", first.tasks
    assert (first.xcom("run")["first_window"], first.xcom("run")["last_window"]) == (W0, W0 + 1)
    later = {"start": "2026-01-01T00:04:00+00:00", "end": "2026-01-01T00:06:00+00:00"}
    backlog = run_dag("op_next", conf=later)  # minutes 2 and 3 were missed: no gap, they run too
    assert backlog.state == "success", backlog.tasks
    result = backlog.xcom("run")
    assert (result["first_window"], result["last_window"], result["windows"]) == (W0 + 2, W0 + 5, 4)
    cps = lockgate.connect("embedded", home=str(lg_env.home)).list_checkpoints("op_next")
    assert [cp.window for cp in cps] == list(range(W0, W0 + 6))
    assert sum(cp.rows_in for cp in cps) == _bids(0, 720)
    again = run_dag("op_next", conf=later)  # caught up: nothing to run, nothing run twice
    assert again.state == "success", again.tasks
    assert [cp.window for cp in lockgate.connect("embedded", home=str(lg_env.home)).list_checkpoints("op_next")] \
        == list(range(W0, W0 + 6))


def test_run_windows_emits_one_asset_event_per_window_and_pushes_the_summary(lg_env, run_dag, test_dag, tiny_pipeline):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    ref = tiny_pipeline("op_events")
    test_dag("dag_op_events", HEADER + f'''
from airflow.sdk import Asset
from lockgate_provider.assets import lockgate_windows_alias
with DAG("op_events", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    LockgateRunWindowsOperator(task_id="run", pipeline="{ref}", start="2026-01-01T00:00:00+00:00",
                               end="2026-01-01T00:03:00+00:00", partition_by_window=True,
                               outlets=[lockgate_windows_alias("op_events"), Asset("op_events_hourly")])
''')
    res = run_dag("op_events")
    assert res.state == "success", res.tasks
    result = res.xcom("run")
    assert (result["first_window"], result["last_window"], result["windows"]) == (W0, W0 + 2, 3)
    assert result["rows_in"] == _bids(0, 360)
    with create_session() as session:
        def events(uri):
            return session.execute(
                select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
            ).scalars().all()

        per_window = events("lockgate://jobs/op_events")
        assert sorted(e.extra["window"] for e in per_window) == [W0, W0 + 1, W0 + 2]
        assert sum(e.extra["rows_in"] for e in per_window) == _bids(0, 360)
        assert {e.extra["window_start"] for e in per_window} == {
            "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00", "2026-01-01T00:02:00+00:00"}
        partitioned = events("op_events_hourly")
        assert sorted(e.partition_key for e in partitioned) == [
            "2026-01-01T00:00:00", "2026-01-01T00:01:00", "2026-01-01T00:02:00"]
        assert partitioned[0].extra["windows"]["2026-01-01T00:01:00"]["window"] == W0 + 1


def test_run_windows_with_catchup_runs_a_backlog_in_groups_each_window_committed(lg_env, run_dag, test_dag,
                                                                                tiny_pipeline):
    """catchup="3" (templated): six due windows run as two catch-up groups on the embedded
    engine; each window has its own checkpoint and asset event (a running aggregate is not
    window-exact: each window of a group is a round with its own snapshot); the rows are the
    bids of the six minutes, once."""
    import lockgate

    ref = tiny_pipeline("op_catchup")
    test_dag("dag_op_catchup", HEADER + f'''
with DAG("op_catchup", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         params={{"group": "3"}}) as dag:
    LockgateRunWindowsOperator(task_id="run", pipeline="{ref}", start="2026-01-01T00:00:00+00:00",
                               end="2026-01-01T00:06:00+00:00", catchup="{{{{ params.group }}}}")
    LockgateRunWindowsOperator(task_id="bad", pipeline="{ref}", first_window={W0}, last_window={W0},
                               catchup="lots")
''')
    res = run_dag("op_catchup")
    assert res.tasks["run"][0] == "success", res.tasks
    assert res.tasks["bad"][0] == "failed", res.tasks
    result = res.xcom("run")
    assert (result["first_window"], result["last_window"], result["windows"]) == (W0, W0 + 5, 6)
    assert result["rows_in"] == _bids(0, 720)
    client = lockgate.connect("embedded", home=str(lg_env.home))
    cps = client.list_checkpoints("op_catchup")
    assert [cp.window for cp in cps] == list(range(W0, W0 + 6))
    assert [cp.window for cp in cps if cp.snapshot_uri] == list(range(W0, W0 + 6))
    groups = {c.window: c.timings.get("group") for c in client.list_cycles("op_catchup", limit=20).cycles}
    assert groups == {w: 3 for w in range(W0, W0 + 6)}
    assert sum(cp.rows_in for cp in cps) == _bids(0, 720)


def test_sensor_poke_reschedule_deferrable_and_timeout(lg_env, run_dag, test_dag, tiny_pipeline):
    import lockgate

    ref = tiny_pipeline("op_sense")
    client = lockgate.connect("embedded", home=str(lg_env.home))
    client.run(ref, first=W0, last=W0)
    client.start_run(ref, first=W0 + 1, last=W0 + 3)  # goes on while the sensors wait
    test_dag("dag_op_sense", HEADER + f'''
with DAG("op_sense", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    poke = LockgateCheckpointSensor(task_id="poke", job="op_sense", window={W0 + 1}, poke_interval=0.5, timeout=300)
    resched = LockgateCheckpointSensor(task_id="reschedule", job="op_sense", mode="reschedule",
                                       window="2026-01-01T00:03:00+00:00", poke_interval=1, timeout=300)
    deferred = LockgateCheckpointSensor(task_id="deferred", job="op_sense", window="{{{{ params.w }}}}",
                                        deferrable=True, poke_interval=0.5, timeout=300, params={{"w": {W0 + 3}}})
    never = LockgateCheckpointSensor(task_id="times_out", job="op_sense", window={W0 + 50}, poke_interval=0.5,
                                     timeout=2)
    poke >> resched >> deferred >> never
''')
    res = run_dag("op_sense")
    assert res.state_of("poke") == "success"
    assert res.state_of("reschedule") == "success"
    assert res.state_of("deferred") == "success"
    assert res.state_of("times_out") == "failed"
    assert res.xcom("poke")["window"] == W0 + 1
    assert res.xcom("reschedule")["window"] == W0 + 2  # the window ending at 00:03
    assert res.xcom("deferred")["window"] == W0 + 3
    assert res.xcom("deferred")["window_end"] == "2026-01-01T00:04:00+00:00"


def test_sensor_fails_fast_with_the_jobs_error_when_it_failed(lg_env, run_dag, test_dag, tiny_pipeline, capfd):
    import lockgate

    ref = tiny_pipeline(
        "op_failed",
        'def boom(b):\n    raise RuntimeError("boom: op_failed broke")\n'
        'bids.map_batches(boom, name="boom").sink(lg.CollectSink("out"), name="sink")',
    )
    client = lockgate.connect("embedded", home=str(lg_env.home))
    with pytest.raises(Exception, match="boom"):
        client.run(ref, first=W0, last=W0 + 1)
    test_dag("dag_op_failed", HEADER + f'''
with DAG("op_failed", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         default_args={{"retries": 2, "retry_delay": timedelta(seconds=1)}}) as dag:
    LockgateCheckpointSensor(task_id="poke", job="op_failed", window={W0 + 1}, poke_interval=1, timeout=600)
    LockgateCheckpointSensor(task_id="deferred", job="op_failed", window={W0 + 1}, deferrable=True,
                             poke_interval=1, timeout=600)
''')
    capfd.readouterr()
    t0 = time.monotonic()
    res = run_dag("op_failed")
    text = "".join(capfd.readouterr())
    assert time.monotonic() - t0 < 120
    for task in ("poke", "deferred"):
        assert res.state_of(task) == "failed" and res.tries(task) == 1, res.tasks
    assert "Lockgate job 'op_failed' is FAILED" in text and "boom: op_failed broke" in text


def test_start_stop_and_restore_a_continuous_pipeline(lg_env, run_dag, test_dag, tiny_pipeline):
    import pyarrow.dataset as ds

    import lockgate

    ref = tiny_pipeline("op_live")
    # a bounded feed of 4 minutes: the continuous job catches up, then waits for more data
    path = Path(ref.split(":")[0])
    path.write_text(path.read_text().replace('start="2026-01-01T00:00:00")', 'start="2026-01-01T00:00:00", max_events=480)'))
    test_dag("dag_op_live", HEADER + f'''
with DAG("op_live", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    start = LockgateStartPipelineOperator(task_id="start", pipeline="{ref}")
    wait = LockgateCheckpointSensor(task_id="wait", job="op_live", window="2026-01-01T00:04:00+00:00",
                                    pipeline="{ref}", poke_interval=0.5, timeout=600)
    stop = LockgateStopPipelineOperator(task_id="stop", job="op_live", drain=True)
    restore = LockgateRestoreOperator(task_id="restore", job="op_live", window="2026-01-01T00:02:00+00:00")
    start >> wait >> stop >> restore
''')
    res = run_dag("op_live")
    assert res.state == "success", res.tasks
    assert res.xcom("start")["name"] == "op_live"
    assert res.xcom("wait")["window"] == W0 + 3
    stopped = res.xcom("stop")
    assert stopped["state"] == "STOPPED" and stopped["last_window"] == W0 + 3
    restored = res.xcom("restore")
    assert restored["restored_to"] == W0 + 1 and restored["dropped_windows"] == [W0 + 2, W0 + 3]
    client = lockgate.connect("embedded", home=str(lg_env.home))
    assert client.get_job("op_live").last_window == W0 + 1
    files = ds.dataset(str(lg_env.out / "op_live" / "totals"), format="parquet", partitioning="hive").to_table()
    assert sorted(set(files.column("lg_window").to_pylist())) == [W0, W0 + 1]  # later output retracted


def test_on_kill_stops_the_embedded_run_at_a_window_boundary(lg_env, tiny_pipeline):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    import lockgate
    from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator

    ref = tiny_pipeline("op_kill")
    with DAG("op_kill", schedule=None, start_date=datetime(2026, 1, 1)):
        op = LockgateRunWindowsOperator(task_id="run", pipeline=ref, first_window=W0, last_window=W0 + 30)
    client = lockgate.connect("embedded", home=str(lg_env.home))
    outcome: dict[str, BaseException] = {}

    def execute() -> None:
        try:
            op.execute({"data_interval_start": None, "data_interval_end": None})
        except BaseException as err:
            outcome["error"] = err

    t = threading.Thread(target=execute)
    t.start()

    def a_window_done():
        try:
            return client.get_job("op_kill").last_window is not None
        except lockgate.JobNotFoundError:
            return False

    deadline = time.monotonic() + 300
    while not a_window_done() and time.monotonic() < deadline:
        time.sleep(0.2)
    op.on_kill()
    t.join(300)
    assert not t.is_alive()
    err = outcome.get("error")
    assert isinstance(err, AirflowException) and "stopped cleanly at the window boundary" in str(err)
    job = client.get_job("op_kill")
    assert job.state == "FINISHED" and W0 <= job.last_window < W0 + 30
    assert f"a retry resumes at window {job.last_window + 1}" in str(err)


def test_run_windows_on_a_controller_deferred_followed_and_reattached(grpc_env, run_dag, test_dag, tiny_pipeline):
    """With a controller: deferred (the trigger follows the job), followed from the worker
    (deferrable=False), and, after a worker crash, re-attached by the next try through the
    task state store (ResumableJobMixin) instead of starting another run."""
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import TaskDeferred

    from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator

    ref = tiny_pipeline("op_grpc")
    test_dag("dag_op_grpc", HEADER + f'''
with DAG("op_grpc", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    deferred = LockgateRunWindowsOperator(task_id="deferred", pipeline="{ref}", first_window={W0},
                                          last_window={W0 + 1}, poll_interval=0.5)
    followed = LockgateRunWindowsOperator(task_id="followed", pipeline="{ref}", start="2026-01-01T00:02:00+00:00",
                                          end="2026-01-01T00:04:00+00:00", deferrable=False, poll_interval=0.5)
    deferred >> followed
''')
    res = run_dag("op_grpc")
    assert res.state == "success", res.tasks
    assert [c["window"] for c in res.xcom("deferred")["checkpoints"]] == [W0, W0 + 1]
    assert [c["window"] for c in res.xcom("followed")["checkpoints"]] == [W0 + 2, W0 + 3]
    assert res.xcom("followed")["rows_in"] == _bids(240, 480)
    assert res.xcom("deferred", "_link_LockgateJobLink") == "/plugin/lockgate/lockgate/ui/jobs/op_grpc"

    # the next range, as a try that starts the run and defers, then "crashes"
    class Store(dict):
        def set(self, key, value, **_):
            self[key] = value

    store = Store()
    context = {"data_interval_start": None, "data_interval_end": None, "task_state_store": store}

    def attempt() -> TaskDeferred:
        with DAG("op_grpc_attach", schedule=None, start_date=datetime(2026, 1, 1)):
            op = LockgateRunWindowsOperator(task_id="run", pipeline=ref, first_window=W0 + 4, last_window=W0 + 300)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        return deferred.value

    first = attempt()
    assert store["lockgate_run"] == {"job": "op_grpc", "first": W0 + 4, "last": W0 + 300,
                                     "controller": f"grpc://127.0.0.1:{grpc_env.port}"}
    client = grpc_env.client()
    before = client.get_job("op_grpc")
    assert before.state in ("SCHEDULING", "RUNNING")
    second = attempt()  # the retry: the run is still going, so it is followed, not started again
    assert second.trigger.serialize() == first.trigger.serialize()
    after = client.get_job("op_grpc")
    assert after.generation == before.generation and after.state in ("SCHEDULING", "RUNNING")
    client.stop("op_grpc", drain=True, timeout=120)
