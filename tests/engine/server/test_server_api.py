"""The controller's API over real gRPC: a run through a controller and a worker gives the
embedded run's output; the CLI works against it; each bad request gets its status code;
watch, restore, continuous start/stop and the asyncio client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from lockgate.checkpoint.catalog import Catalog
from lockgate.errors import (
    CompileError,
    InvalidArgumentError,
    JobNotFoundError,
    JobStateError,
    PipelineLoadError,
    StateNotFoundError,
    WindowGapError,
)
from lockgate.nexmark import NexmarkConfig, generate
from lockgate.server.generated import lockgate_controller_pb2 as pb
from lockgate.server.generated import lockgate_controller_pb2_grpc as pb_grpc
from lockgate.server.generated import lockgate_worker_pb2 as wpb
from lockgate.server.generated import lockgate_worker_pb2_grpc as wpb_grpc

EVENTS = 8000  # 4 cycle windows

BAD_PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("bad", cycle_window=timedelta(seconds=5))
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=10, seed=1, start="2026-01-01T00:00:00",
                                        max_events=100), name="bids")
bids.key_by("no_such_column").aggregate(n=lg.count(), name="per_key").sink(lg.CollectSink("x"), name="out")
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory, request):
    srv = request.getfixturevalue("srv")
    root = tmp_path_factory.mktemp("api")
    controller = srv.ControllerProcess(root / "ctl", name="api")
    controller.start()
    client = controller.client()
    yield srv, root, controller, client
    client.close()
    left = controller.cleanup()
    assert not left, f"workers outlived the controller: {left}"


@pytest.fixture(scope="module")
def finished(setup, reference):
    """One job run through the controller, uninterrupted."""
    srv, root, controller, client = setup
    ref, out = srv.write_pipeline(root / "main", "srv", EVENTS)
    events = srv.Events()
    res = client.run(ref, job="main", first=srv.FIRST, last=srv.FIRST + srv.windows(EVENTS) - 1, on_event=events)
    return ref, out, res, events


def test_run_through_controller_and_worker_matches_embedded(setup, finished, reference):
    srv, root, controller, client = setup
    ref, out, res, events = finished
    last = srv.FIRST + srv.windows(EVENTS) - 1
    assert res.state == "FINISHED" and res.windows_run == 4 and res.windows_skipped == 0
    assert (res.first_window, res.last_window) == (srv.FIRST, last)
    assert res.rows_in == 7360  # 46 of every 50 Nexmark events are bids
    assert srv.outputs(client.read_sink, "main", out) == reference(EVENTS)

    kinds = events.kinds()
    assert kinds.count("cycle_done") == 4 and kinds.count("cycle_started") == 4
    assert "worker_started" in kinds
    states = [e.state for _, e in events.items if e.kind == "state"]
    assert states == ["COMPILING", "SCHEDULING", "RUNNING", "FINISHED"]
    done = [e for _, e in events.items if e.kind == "cycle_done"]
    assert [e.window for e in done] == list(range(srv.FIRST, last + 1))
    assert all({"read", "stage", "commit", "checkpoint"} <= set(e.timings) for e in done)

    job = client.get_job("main")
    assert (job.state, job.last_window, job.generation, job.pipeline_ref) == ("FINISHED", last, 1, ref)
    cps = client.list_checkpoints("main")
    assert [c.window for c in cps] == list(range(srv.FIRST, last + 1))
    assert sum(c.rows_in for c in cps) == 7360
    # every transition is in the catalog with its reason
    cat = Catalog(f"sqlite:///{controller.home / 'catalog.db'}")
    try:
        trans = [(t.to_state.value, t.reason) for t in cat.transitions("main")]
    finally:
        cat.close()
    assert [s for s, _ in trans] == ["CREATED", "COMPILING", "SCHEDULING", "RUNNING", "FINISHED"]
    assert all(reason for _, reason in trans)
    # the worker of the run waits for the job's next run (and takes no other job's); a warm
    # standby waits in the pool for the others
    srv.wait_for(lambda: sorted((w["state"], w["job"]) for w in client.list_workers()
                                if w["state"] in ("IDLE", "BUSY", "STARTING"))
                 in ([("IDLE", ""), ("IDLE", "main")], [("IDLE", "main"), ("STARTING", "")]), 60,
                 "the run's worker kept for job 'main' and one standby")


def test_a_run_through_the_controller_in_catch_up_groups_writes_the_same(setup, finished, reference):
    """catchup=2 on the run request: the controller hands its worker two windows at a time;
    every window is committed with its own checkpoint (the plan keeps a running aggregate, not
    window-exact: each window of a group is a round with its own snapshot), and the output is
    the uninterrupted run's."""
    srv, root, controller, client = setup
    ref, out = srv.write_pipeline(root / "grouped", "grouped", EVENTS)
    last = srv.FIRST + srv.windows(EVENTS) - 1
    kept_for_main = {w["id"] for w in client.list_workers() if w["state"] == "IDLE" and w["job"] == "main"}
    res = client.run(ref, job="grouped", first=srv.FIRST, last=last, catchup=2)
    assert res.state == "FINISHED" and res.windows_run == 4 and res.rows_in == 7360
    # another job's run never takes the worker kept for 'main'
    kept_for_grouped = {w["id"] for w in client.list_workers() if w["state"] == "IDLE" and w["job"] == "grouped"}
    assert len(kept_for_grouped) == 1 and not kept_for_grouped & kept_for_main
    assert srv.outputs(client.read_sink, "grouped", out) == reference(EVENTS)
    cps = client.list_checkpoints("grouped")
    assert [c.window for c in cps] == list(range(srv.FIRST, last + 1))
    assert [c.window for c in cps if c.snapshot_uri] == list(range(srv.FIRST, last + 1))
    groups = {c.window: c.timings.get("group") for c in client.list_cycles("grouped", limit=20).cycles}
    assert groups == {w: 2 for w in range(srv.FIRST, last + 1)}


def _lockgate(controller, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "lockgate.cli.main", "--controller", controller.url, *args]
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_CONTROLLER"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def test_cli_against_the_controller(setup, finished):
    srv, root, controller, client = setup
    proc = _lockgate(controller, "jobs")
    assert proc.returncode == 0, proc.stderr
    assert "main" in proc.stdout and "FINISHED" in proc.stdout
    proc = _lockgate(controller, "--json", "checkpoints", "main")
    assert [c["window"] for c in json.loads(proc.stdout)] == list(range(srv.FIRST, srv.FIRST + 4))
    proc = _lockgate(controller, "checkpoints", "nope")
    assert proc.returncode == 2 and "job 'nope' not found" in proc.stderr and "Traceback" not in proc.stderr
    # a run through the CLI: the windows are complete already, nothing to do
    ref = finished[0]
    proc = _lockgate(controller, "--json", "run", ref, "--job", "main", "--from-window", str(srv.FIRST),
                     "--to-window", str(srv.FIRST + 3), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert (res["windows_run"], res["windows_skipped"], res["state"]) == (0, 4, "FINISHED")
    proc = _lockgate(controller, "--json", "compile", ref)
    assert json.loads(proc.stdout)["plan_version"] == client.get_job("main").plan_version


def _status(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    try:
        result = call(*args, timeout=600, **kwargs)
        if not hasattr(result, "ListFields"):
            list(result)
    except grpc.RpcError as err:
        return err.code(), err.details()
    return grpc.StatusCode.OK, ""


def test_bad_requests_get_their_status_codes(setup, finished, tmp_path):
    srv, root, controller, client = setup
    ref = finished[0]
    stub = pb_grpc.ControllerStub(grpc.insecure_channel(f"127.0.0.1:{controller.port}"))
    last = srv.FIRST + 3
    before = client.get_job("main")

    # unknown job: NOT_FOUND, naming the known jobs
    for name, req in (("GetJob", pb.JobRequest(job="nope")), ("ListCheckpoints", pb.JobRequest(job="nope")),
                      ("Stop", pb.StopRequest(job="nope")), ("Restore", pb.RestoreRequest(job="nope", window=1)),
                      ("Watch", pb.WatchRequest(job="nope"))):
        code, details = _status(getattr(stub, name), req)
        assert code == grpc.StatusCode.NOT_FOUND, (name, code, details)
        assert "job 'nope' not found" in details and "main" in details
    with pytest.raises(JobNotFoundError):
        client.get_job("nope")

    # an invalid plan: INVALID_ARGUMENT with the compile error naming the operator and the column
    bad = tmp_path / "bad.py"
    bad.write_text(BAD_PIPELINE)
    for name, req in (("Compile", pb.CompileRequest(pipeline=f"{bad}:pipeline")),
                      ("StartRun", pb.RunRequest(pipeline=f"{bad}:pipeline", job="bad", first=1, last=2))):
        code, details = _status(getattr(stub, name), req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
        assert "per_key" in details and "no_such_column" in details
    with pytest.raises(CompileError, match="no_such_column"):
        client.compile(f"{bad}:pipeline")
    with pytest.raises(PipelineLoadError, match="does not exist"):
        client.compile(str(tmp_path / "missing.py") + ":pipeline")
    with pytest.raises(JobNotFoundError):
        client.get_job("bad")  # an invalid plan changes nothing

    # bad arguments
    code, details = _status(stub.StartRun, pb.RunRequest(pipeline=ref, job="main", first=5, last=4))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "before the first" in details
    for bad in ("0", "lots", "-3"):
        code, details = _status(stub.StartRun, pb.RunRequest(pipeline=ref, job="main", first=last + 1,
                                                             last=last + 1, catchup=bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and f"catchup={bad!r}" in details, (bad, details)
    with pytest.raises(InvalidArgumentError, match="'auto'.*'off'"):
        client.start_run(ref, job="main", first=last + 1, last=last + 1, catchup="never")

    # a window gap: FAILED_PRECONDITION naming the missing windows
    code, details = _status(stub.StartRun, pb.RunRequest(pipeline=ref, job="main", first=last + 3, last=last + 4))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert f"windows {last + 1}..{last + 2} not complete" in details
    with pytest.raises(WindowGapError):
        client.run(ref, job="main", first=last + 3, last=last + 4)

    # restore to a window without checkpoint: FAILED_PRECONDITION naming the checkpointed ones
    code, details = _status(stub.Restore, pb.RestoreRequest(job="main", window=srv.FIRST - 5))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert f"no complete checkpoint for window {srv.FIRST - 5}" in details and str(last) in details

    # a job already running: FAILED_PRECONDITION (and restore of a running job too)
    info = client.start(ref, job="cont")
    assert info.state in ("SCHEDULING", "RUNNING")
    for name, req in (("StartRun", pb.RunRequest(pipeline=ref, job="cont", until_caught_up=True)),
                      ("Start", pb.StartRequest(pipeline=ref, job="cont")),
                      ("Restore", pb.RestoreRequest(job="cont", window=srv.FIRST))):
        code, details = _status(getattr(stub, name), req)
        assert code == grpc.StatusCode.FAILED_PRECONDITION, (name, code, details)
        assert "running" in details
    with pytest.raises(JobStateError, match="already running"):
        client.start_run(ref, job="cont", until_caught_up=True)

    # the continuous job catches up with its (bounded) source, then a drained stop
    srv.wait_for(lambda: client.get_job("cont").last_window == last, 300, "the continuous job to catch up")
    stopped = client.stop("cont", drain=True, timeout=120)
    assert stopped.state == "STOPPED" and stopped.last_window == last
    assert client.get_job("main") == before  # nothing of the refused requests changed the job


def test_watch_restore_and_rerun(setup, finished, reference):
    srv, root, controller, client = setup
    ref, out = finished[0], finished[1]
    info = client.restore("main", srv.FIRST + 1)
    assert info.state == "STOPPED" and info.last_window == srv.FIRST + 1
    assert [c.window for c in client.list_checkpoints("main")] == [srv.FIRST, srv.FIRST + 1]
    part = srv.outputs(client.read_sink, "main", out)
    assert max(dict(r)["lg_window"] for r in part["bidders"]) == srv.FIRST + 1

    # a watch of a job at rest ends at once
    watcher = controller.client()
    assert list(watcher.watch("main", timeout=60)) == []
    # started without waiting (as a deferrable Airflow operator does), then watched from
    # another connection until the job finishes
    info = client.start_run(ref, job="main", until_caught_up=True)
    assert info.state in ("SCHEDULING", "RUNNING", "FINISHED")
    seen = list(watcher.watch("main", timeout=600))
    assert [e.window for e in seen if e.kind == "cycle_done"][-1] == srv.FIRST + 3
    assert [e.state for e in seen if e.kind == "state"][-1] == "FINISHED"
    assert client.get_job("main").state == "FINISHED"
    assert srv.outputs(client.read_sink, "main", out) == reference(EVENTS)
    watcher.close()

    # the running totals' keyed state, read through the controller: per bidder, every bid
    # so far, as pandas computes it from the generator's events
    conf = NexmarkConfig(start=datetime(2026, 1, 1, tzinfo=UTC), events_per_second=400, seed=11, max_events=EVENTS)
    bids = generate(conf, "bid", 0, EVENTS).to_pandas()
    expected = {int(b): (len(g), int(g["price"].sum())) for b, g in bids.groupby("bidder")}
    state = client.read_state("main", "bidder_totals")
    assert state.column_names == ["bidder", "bids", "spent"]
    assert {r["bidder"]: (r["bids"], r["spent"]) for r in state.to_pylist()} == expected
    windows = client.read_state("main", "auction_windows", window=srv.FIRST + 3)
    assert {"window_start", "window_end", "auction", "bids", "top", "spent"} <= set(windows.column_names)
    with pytest.raises(InvalidArgumentError, match="2 stateful operators"):
        client.read_state("main")
    with pytest.raises(StateNotFoundError, match="auction_windows, bidder_totals"):
        client.read_state("main", "nope")


def test_async_client(setup, finished):
    srv, root, controller, client = setup
    import lockgate

    async def go() -> tuple:
        aclient = lockgate.connect_async(controller.url)
        try:
            job = await aclient.get_job("main")
            cps = await aclient.list_checkpoints("main")
            events = [e async for e in aclient.watch("main", timeout=5)]  # a finished job: ends at once
            stopped = await aclient.stop("main")  # not running: returned as it is
            with pytest.raises(JobNotFoundError):
                await aclient.get_job("nope")
            return job, cps, events, stopped
        finally:
            await aclient.close()

    t0 = time.monotonic()
    job, cps, events, stopped = asyncio.run(go())
    assert job.state == "FINISHED" and [c.window for c in cps][-1] == srv.FIRST + 3
    assert events == [] and stopped.state == "FINISHED"
    assert time.monotonic() - t0 < 30
    assert Path(controller.home / "catalog.db").exists()


def test_stop_without_drain_cancels_the_round_and_the_job_resumes_exactly(setup, reference):
    srv, root, controller, client = setup
    ref, out = srv.write_pipeline(root / "cancel", "srv", EVENTS)
    last = srv.FIRST + srv.windows(EVENTS) - 1
    client.start_run(ref, job="cancelled", first=srv.FIRST, last=last)
    events = srv.Events()

    def watch() -> None:
        for e in controller.client().watch("cancelled", timeout=600):
            events(e)
        events.done.set()

    threading.Thread(target=watch, daemon=True).start()
    events.wait(lambda e: e.kind == "cycle_started", 600, "a round")
    stopped = client.stop("cancelled", drain=False, timeout=300)
    assert stopped.state == "STOPPED"
    assert stopped.last_window is None or stopped.last_window < last
    cat = Catalog(f"sqlite:///{controller.home / 'catalog.db'}")
    try:
        reason = cat.transitions("cancelled")[-1].reason
        cycles = cat.list_cycles("cancelled")
    finally:
        cat.close()
    # the round was cancelled in Spark, nothing of it committed
    assert reason.startswith("stopped after window"), reason
    cancelled = [c for c in cycles if c.state.value == "FAILED"]
    assert len(cancelled) == 1, [(c.window, c.state, c.error) for c in cycles]
    # (the first round may have committed before the stop reached the worker: the one in
    # flight is the one cancelled, and the job's last window is the one before it)
    before = cancelled[0].window - 1
    assert stopped.last_window == (None if before < srv.FIRST else before), (stopped, cycles)
    # the job resumes from its last complete window: the output is exactly the uninterrupted run's
    res = client.run(ref, job="cancelled", first=srv.FIRST, last=last)
    assert res.state == "FINISHED"
    assert srv.outputs(client.read_sink, "cancelled", out) == reference(EVENTS)
    print(f"\nstop without drain: {len(cancelled)} round cancelled; {res.windows_skipped} windows were complete")


def test_the_next_run_is_taken_as_soon_as_the_last_run_committed_its_range(setup, reference):
    """A DAG's next task asks for the next range the moment the last one's windows are
    committed (a trigger saw them), while that run still wraps up (its job state, its
    worker): the request waits for it instead of being refused as "already running"."""
    srv, root, controller, client = setup
    ref, out = srv.write_pipeline(root / "next", "srv", EVENTS)
    for first in (srv.FIRST, srv.FIRST + 2):
        client.start_run(ref, job="next", first=first, last=first + 1)
        deadline = time.monotonic() + 600
        while (client.get_job("next").last_window or 0) < first + 1:
            assert time.monotonic() < deadline, client.get_job("next")
            time.sleep(0.005)
    seen = list(client.watch("next", timeout=600))
    assert client.get_job("next").state == "FINISHED", seen
    assert [c.window for c in client.list_checkpoints("next")] == [srv.FIRST + i for i in range(4)]
    assert srv.outputs(client.read_sink, "next", out) == reference(EVENTS)


def test_a_kept_worker_heartbeating_its_last_run_is_not_fenced_by_the_next(setup, reference):
    """A worker kept for its job's next run heartbeats with the last run's generation until
    the next run's first task reaches it. That heartbeat is stale, not fenced: the worker
    must not be refused and exit (it did, intermittently, before). A generation the job
    never gave that worker is still refused."""
    srv, root, controller, client = setup
    ref, out = srv.write_pipeline(root / "kept", "srv", EVENTS)
    client.start_run(ref, job="kept", first=srv.FIRST, last=srv.FIRST + 1)
    deadline = time.monotonic() + 600
    while not (mine := [w for w in client.list_workers() if w["job"] == "kept"]):
        assert time.monotonic() < deadline, client.list_workers()
        time.sleep(0.01)
    worker = mine[0]
    list(client.watch("kept", timeout=600))
    assert client.get_job("kept").state == "FINISHED"
    client.start_run(ref, job="kept", first=srv.FIRST + 2, last=srv.FIRST + srv.windows(EVENTS) - 1)
    deadline = time.monotonic() + 600
    while (now := next(w for w in client.list_workers() if w["id"] == worker["id"]))["generation"] == 0:
        assert time.monotonic() < deadline, now
        time.sleep(0.005)
    assert now["pid"] == worker["pid"], "the next run must take the kept worker"
    channel = grpc.insecure_channel(controller.worker_address)
    stub = wpb_grpc.WorkerControlStub(channel)
    try:
        stub.Heartbeat(wpb.HeartbeatRequest(worker_id=worker["id"], generation=now["generation"] - 1,
                                            status="idle"), timeout=30)
        with pytest.raises(grpc.RpcError) as info:
            stub.Heartbeat(wpb.HeartbeatRequest(worker_id=worker["id"], generation=now["generation"] + 1,
                                                status="running"), timeout=30)
        assert info.value.code() == grpc.StatusCode.ABORTED and "fenced" in info.value.details()
    finally:
        channel.close()
    seen = list(client.watch("kept", timeout=600))
    assert client.get_job("kept").state == "FINISHED", seen
    assert "RECOVERING" not in [e.state for e in seen if e.kind == "state"], seen
    assert any(w["pid"] == worker["pid"] for w in client.list_workers())
    assert srv.outputs(client.read_sink, "kept", out) == reference(EVENTS)
