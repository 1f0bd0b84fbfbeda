"""The provider's shared helpers (lockgate_provider.utils) and the hook's window look-ups:
templated values as instants and window ids, a data interval as cycle windows, an instant
as the last window ending by it, run summaries, the gap message, job states and the mapping
of engine errors to Airflow errors. No Spark session and no scheduler: the embedded client
only loads the pipeline file to read its cycle window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pendulum
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import lockgate
from lockgate import TERMINAL_STATES, CheckpointInfo, JobState, WindowClock
from lockgate.errors import CompileError, JobNotFoundError, JobStateError, PipelineLoadError, WindowGapError
from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.utils import (
    ACTIVE_STATES,
    LockgateWindowGapError,
    airflow_errors,
    as_datetime,
    as_window,
    checkpoint_at,
    checkpoint_dict,
    data_interval,
    failed_run_message,
    gap_message,
    instant_range,
    is_active,
    is_window_id,
    partition_key,
    run_summary,
    short_error,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
W0 = 29453760  # the one-minute cycle window starting at 2026-01-01T00:00:00Z
MINUTE = WindowClock.of(timedelta(minutes=1))

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("unit_windows", cycle_window=timedelta(minutes=1), parallelism=1)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=2, seed=5, start="2026-01-01T00:00:00"), name="bids")
bids.key_by("bidder").aggregate(bids=lg.count(), name="totals").sink(lg.CollectSink("out"), name="sink")
'''


def _cp(window: int, rows_in: int = 10, rows_out: int = 3) -> CheckpointInfo:
    start, end = MINUTE.bounds(window)
    return CheckpointInfo(job="bids", window=window, window_start=start, window_end=end, plan_version="p1",
                          rows_in=rows_in, rows_out=rows_out, status="COMPLETE", created=end, snapshot_uri=None)


# -- templated values -------------------------------------------------------------------
def test_as_datetime_reads_datetimes_pendulum_and_iso_text_as_aware_instants():
    assert as_datetime(START, "start") == START
    assert as_datetime(datetime(2026, 1, 1), "start") == START  # naive is UTC
    from_pendulum = as_datetime(pendulum.datetime(2026, 1, 1, 0, 0, 0, 5, tz="UTC"), "start")
    # a plain datetime, that the engine's window clock can do arithmetic on
    assert type(from_pendulum) is datetime and from_pendulum == START + timedelta(microseconds=5)
    assert MINUTE.window_of(from_pendulum) == W0
    assert as_datetime("2026-01-01T00:00:00Z", "start") == START
    assert as_datetime(" 2026-01-01T01:00:00+01:00 ", "start") == START
    assert as_datetime("2026-01-01T00:00:00", "start").tzinfo is not None
    ist = as_datetime("2026-01-01T05:30:00+05:30", "start")
    assert ist == START and ist.utcoffset() == timedelta(hours=5, minutes=30)  # the zone given is kept
    for empty in (None, "", "None"):  # "None": a template that rendered None
        assert as_datetime(empty, "start") is None
    with pytest.raises(AirflowFailException, match=r"start='yesterday' is not an ISO date-time"):
        as_datetime("yesterday", "start")


def test_as_window_and_is_window_id():
    assert as_window(W0, "first_window") == W0
    assert as_window(str(W0), "first_window") == W0
    for empty in (None, "", "None"):
        assert as_window(empty, "first_window") is None
    with pytest.raises(AirflowFailException, match=r"last_window='12a' is not a window id"):
        as_window("12a", "last_window")
    assert is_window_id(5) and is_window_id("12") and is_window_id(" -3 ")
    assert not is_window_id("2026-01-01T00:00:00+00:00") and not is_window_id(None) and not is_window_id(START)


def test_data_interval_takes_start_and_end_over_the_dag_runs_interval():
    context = {"data_interval_start": pendulum.datetime(2026, 1, 1, tz="UTC"),
               "data_interval_end": pendulum.datetime(2026, 1, 1, 1, tz="UTC")}
    assert data_interval(context) == (START, START + timedelta(hours=1))
    assert data_interval(context, "2026-01-01T00:10:00+00:00", None) == (
        START + timedelta(minutes=10), START + timedelta(hours=1))
    assert data_interval(context, None, "None") == (START, START + timedelta(hours=1))
    assert data_interval({"data_interval_start": None, "data_interval_end": None}) == (None, None)
    assert data_interval({}, START, START) == (START, START)


def test_instant_range_ends_at_the_instant_so_its_last_window_is_the_one_ending_by_it():
    at = START + timedelta(minutes=3)
    lo, hi = instant_range(at)
    assert hi == at and hi - lo == timedelta(microseconds=1)
    assert MINUTE.windows_for(*instant_range(at))[1] == W0 + 2  # 00:02-00:03 ends at 00:03
    assert MINUTE.windows_for(*instant_range(at + timedelta(seconds=30)))[1] == W0 + 3


# -- the hook's window look-ups, on the embedded engine ------------------------------------
@pytest.fixture(scope="module")
def _embedded_imported(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Make one embedded client, so that the tests time the look-ups, not the first import
    of the embedded engine's modules (no Spark session is started)."""
    lockgate.connect("embedded", home=str(tmp_path_factory.mktemp("warm"))).close()


@pytest.fixture
def unit_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _embedded_imported: None) -> str:
    monkeypatch.setenv("LOCKGATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AIRFLOW_CONN_LOCKGATE_DEFAULT", raising=False)
    path = tmp_path / "unit_windows.py"
    path.write_text(PIPELINE)
    return f"{path}:pipeline"


def test_a_data_interval_maps_to_the_cycle_windows_it_covers(unit_pipeline):
    hook = LockgateHook()
    assert hook.windows_for(unit_pipeline, START, START + timedelta(hours=1)) == (W0, W0 + 59)
    assert hook.windows_for(unit_pipeline, START + timedelta(seconds=30), START + timedelta(minutes=2)) == (W0, W0 + 1)
    # an empty interval holds no window, and the pipeline is not even read
    assert hook.windows_for(unit_pipeline, START, START) == (0, -1)
    assert hook.windows_for("no/such/file.py:p", START + timedelta(hours=1), START) == (0, -1)


def test_window_at_takes_window_ids_and_instants(unit_pipeline):
    hook = LockgateHook()
    assert hook.window_at(W0 + 7, None) == W0 + 7
    assert hook.window_at(str(W0 + 7), None) == W0 + 7
    assert hook.window_at(None, unit_pipeline) is None
    assert hook.window_at("None", unit_pipeline) is None
    assert hook.window_at("2026-01-01T00:03:00+00:00", unit_pipeline) == W0 + 2
    assert hook.window_at(START + timedelta(minutes=4), unit_pipeline) == W0 + 3
    with pytest.raises(AirflowFailException, match="is an instant: give pipeline= to map it to a window"):
        hook.window_at("2026-01-01T00:03:00+00:00", None)


def test_a_pipeline_that_does_not_load_fails_without_retry(unit_pipeline):
    with pytest.raises(AirflowFailException, match=r"Lockgate pipeline 'no_such_module_x:p' does not compile"):
        LockgateHook().windows_for("no_such_module_x:p", START, START + timedelta(hours=1))


# -- checkpoints and summaries -------------------------------------------------------------
def test_checkpoint_dict_and_checkpoint_at():
    d = checkpoint_dict(_cp(W0))
    assert d == {"window": W0, "window_start": "2026-01-01T00:00:00+00:00",
                 "window_end": "2026-01-01T00:01:00+00:00", "rows_in": 10, "rows_out": 3, "plan_version": "p1",
                 "created": "2026-01-01T00:01:00+00:00"}
    cps = [_cp(W0 + 3), _cp(W0), _cp(W0 + 5)]
    assert checkpoint_at(cps, W0)["window"] == W0
    assert checkpoint_at(cps, W0 + 1)["window"] == W0 + 3  # its row expired: the next one
    assert checkpoint_at(cps, W0 + 6) is None
    assert checkpoint_at([], W0) is None


def test_run_summary_from_checkpoints_and_what_the_run_reported():
    cps = [_cp(W0 - 1), _cp(W0, 10, 2), _cp(W0 + 2, 7, 1), _cp(W0 + 9)]
    rows = {W0 + 1: {"rows_in": 5, "rows_out": 4}}
    s = run_summary("bids", W0, W0 + 2, start=START, end=START + timedelta(minutes=3), checkpoints=cps,
                    window_rows=rows, plan_version="p2")
    assert (s["job"], s["first_window"], s["last_window"], s["windows"]) == ("bids", W0, W0 + 2, 3)
    assert (s["rows_in"], s["rows_out"]) == (22, 7)
    assert (s["start"], s["end"]) == ("2026-01-01T00:00:00+00:00", "2026-01-01T00:03:00+00:00")
    expired = s["checkpoints"][1]  # no checkpoint row: dated from the others, rows from the run
    assert expired == {"window": W0 + 1, "window_start": "2026-01-01T00:01:00+00:00",
                       "window_end": "2026-01-01T00:02:00+00:00", "rows_in": 5, "rows_out": 4, "plan_version": "p2"}
    assert [c["plan_version"] for c in s["checkpoints"]] == ["p1", "p2", "p1"]

    empty = run_summary("bids", 0, -1, start=START, end=START, checkpoints=[])
    assert empty["windows"] == 0 and empty["checkpoints"] == [] and empty["rows_in"] == 0


def test_partition_key_is_the_windows_start_in_utc():
    assert partition_key({"window": W0, "window_start": "2026-01-01T01:00:00+01:00"}) == "2026-01-01T00:00:00"
    assert partition_key({"window": W0, "window_start": None}) == str(W0)


# -- messages ----------------------------------------------------------------------------
def test_gap_message_names_the_missing_windows_their_time_range_and_the_fix():
    msg = gap_message("op_gap", W0 + 4, W0 + 5, W0 + 1, _cp(W0 + 1))
    assert msg.startswith(
        f"Lockgate job 'op_gap' cannot run windows {W0 + 4}..{W0 + 5}: windows {W0 + 2}..{W0 + 3} "
        "(2026-01-01T00:02:00+00:00 to 2026-01-01T00:04:00+00:00) not complete yet "
        f"(the job's last complete window is {W0 + 1})"
    )
    assert "depends_on_past=True" in msg and "earlier data interval" in msg
    one = gap_message("op_gap", W0 + 3, W0 + 3, W0 + 1, None)  # no checkpoint to date it
    assert f": window {W0 + 2} not complete yet" in one


def test_short_error_and_failed_run_message():
    trace = "Py4JJavaError: an error occurred\n  at org.apache.spark...\n  at x\nRuntimeError: boom: the real cause\n"
    assert short_error(trace) == "Py4JJavaError: an error occurred ... RuntimeError: boom: the real cause"
    assert short_error("one line") == "one line"
    # a Spark failure Lockgate read: its line alone, not the JVM text kept after the marker
    from lockgate.errors import DETAIL_MARKER

    mapped = f"SourceSchemaError: job 'j', window 3, source 'links': ...\n\n{DETAIL_MARKER}\n{trace}"
    assert short_error(mapped) == "SourceSchemaError: job 'j', window 3, source 'links': ..."
    assert len(short_error("x" * 2000)) == 600
    msg = failed_run_message("bids", W0, "RuntimeError: boom", W0 + 2)
    assert msg == (f"Lockgate job 'bids' failed: RuntimeError: boom. Windows up to {W0 + 2} are committed; "
                   f"a retry restores the checkpoint of window {W0 + 2} and resumes at window {W0 + 3}.")
    assert f"resumes at window {W0}." in failed_run_message("bids", W0, None, None)
    assert "no error recorded" in failed_run_message("bids", W0, None, None)


# -- job states ---------------------------------------------------------------------------
def test_job_states_come_from_the_engine():
    assert frozenset(JobState) - TERMINAL_STATES - {JobState.CREATED} == ACTIVE_STATES
    assert all(is_active(s.value) for s in ACTIVE_STATES)
    assert not any(is_active(s) for s in TERMINAL_STATES)
    assert not is_active("CREATED")
    for status in ("COMPLETE", "STALE", "NOT_FOUND", "running", ""):  # the run operator's own statuses
        assert not is_active(status)


# -- engine errors as Airflow errors --------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "kwargs", "expected", "message"),
    [
        (CompileError("no column 'prise'", operator="typo"), {"pipeline": "p.py:p"}, AirflowFailException,
         "Lockgate pipeline 'p.py:p' does not compile: operator 'typo': no column 'prise'"),
        (PipelineLoadError("no file p.py"), {}, AirflowFailException,
         "The Lockgate pipeline does not compile: no file p.py"),
        (WindowGapError("bids", 3, 4, 5), {"pipeline": "p.py:p"}, LockgateWindowGapError,
         "job 'bids': cannot run window 5: windows 3..4 not complete yet. Windows run strictly in order; run the "
         "earlier windows first. Set depends_on_past=True on this task."),
        (JobNotFoundError("no job 'bids'"), {"action": "Stopping job 'bids'"}, AirflowFailException, "no job 'bids'"),
        (JobStateError("not now"), {"action": "Stopping job 'bids'"}, AirflowException,
         "Stopping job 'bids' failed: not now"),
        (JobStateError("not now"), {"action": "Restoring job 'bids'", "retry": False}, AirflowFailException,
         "Restoring job 'bids' failed: not now"),
    ],
    ids=["compile", "load", "gap", "not-found", "action", "action-no-retry"],
)
def test_airflow_errors_maps_engine_errors(error, kwargs, expected, message):
    with pytest.raises(AirflowException) as raised, airflow_errors(**kwargs):
        raise error
    assert type(raised.value) is expected
    assert str(raised.value) == message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_airflow_errors_leaves_other_errors_alone():
    with pytest.raises(JobStateError, match="already running"), airflow_errors(pipeline="p.py:p"):
        raise JobStateError("job 'bids' is already running")
    with pytest.raises(ValueError, match="not an engine error"), airflow_errors(action="Stopping job 'bids'"):
        raise ValueError("not an engine error")
    with airflow_errors():
        pass


def test_lockgate_exports_what_the_provider_uses():
    for name in ("JobState", "TERMINAL_STATES", "is_terminal", "CheckpointInfo", "JobInfo", "connect",
                 "connect_async", "WindowClock"):
        assert name in lockgate.__all__, name
