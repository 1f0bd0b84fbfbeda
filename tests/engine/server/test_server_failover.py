"""Workers that die or hang: kill -9 of the worker mid-cycle at random instants, and a
worker that stops answering (SIGSTOP) and wakes up late, fenced.

Each time the controller notices within the heartbeat deadline, moves the job to
RECOVERING, restores it on a new worker (a new generation) from the last complete window,
and the output is exactly the uninterrupted (embedded) run's. The recovery times are
printed and written to ``recovery_times.json`` in the test's folder.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import statistics
import time

import grpc
import psutil
import pytest

from lockgate.checkpoint.catalog import Catalog, CycleState
from lockgate.server.generated import lockgate_worker_pb2 as wpb
from lockgate.server.generated import lockgate_worker_pb2_grpc as wpb_grpc

pytestmark = pytest.mark.slow


def _pid(message: str) -> int:
    return int(re.search(r"pid (\d+)", message).group(1))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _group_gone(pgid: int) -> bool:
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return False
        except (ProcessLookupError, psutil.Error):
            continue
    return True


def _idle_worker(client) -> bool:
    return any(w["state"] == "IDLE" for w in client.list_workers())


@pytest.mark.long  # tests/faults/test_served_faults.py kills workers in the test command
def test_worker_kill9_mid_cycle_recovers_exactly(srv, make_controller, reference, tmp_path):
    events_n = 16000  # 8 cycle windows
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    ctl = make_controller("failover", args=("--standby-workers", "2")).start()
    client = ctl.client()
    ref, out = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    srv.wait_for(lambda: sum(w["state"] == "IDLE" for w in client.list_workers()) == 2, 600, "two warm standbys")
    thread, events, box = srv.run_in_thread(client, ref, job="killed", first=first, last=last)

    rng = random.Random(20261121)
    kills = []
    after = 0
    while len(kills) < 3:
        i, _, started = events.wait(lambda e: e.kind == "worker_started", 600, "a worker", after=after)
        pid = _pid(started.message)
        # the next round that starts on this worker; killed at a random instant of it (or of its commit)
        i, _, cycle = events.wait(lambda e: e.kind == "cycle_started", 600, "a round", after=max(i, len(events)))
        if cycle.window >= last - 1:
            break  # too late in the run to kill and still see a recovery
        time.sleep(rng.uniform(0.1, 2.0))
        warm = _idle_worker(client)  # a standby is ready to take over
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)  # the worker's Python process: its JVM must go too
        j, t_lost, lost = events.wait(lambda e: e.kind == "worker_lost", srv.HB_TIMEOUT + 30, "the loss", after=i)
        assert t_lost - t_kill < srv.HB_TIMEOUT, f"the loss was noticed after {t_lost - t_kill:.1f}s: {lost.message}"
        assert "SIGKILL" in lost.message, lost.message  # the loss says how the process ended
        k, t_back, again = events.wait(lambda e: e.kind == "cycle_started", 600, "a round on the new worker", after=j)
        assert again.window in (cycle.window, cycle.window + 1)  # restored from the last complete window
        kills.append({"pid": pid, "window": again.window, "t_kill": t_kill, "k": k, "warm": warm,
                      "detect_s": round(t_lost - t_kill, 2), "next_round_s": round(t_back - t_kill, 2),
                      "lost": lost.message})
        after = j

    thread.join(900)
    assert not thread.is_alive(), "the run did not end"
    assert "error" not in box, box.get("error")
    res = box["result"]
    assert res.state == "FINISHED" and res.windows_run >= srv.windows(events_n)
    assert len(kills) >= 2, kills
    assert srv.outputs(client.read_sink, "killed", out) == reference(events_n)
    recoveries = []
    for kill in kills:  # when the interrupted window was checkpointed by the new worker
        _, t_done, _ = events.wait(lambda e, w=kill["window"]: e.kind == "cycle_done" and e.window == w, 1,
                                   "the interrupted window's checkpoint", after=kill["k"])
        recoveries.append({k: v for k, v in kill.items() if k not in ("pid", "t_kill", "k")}
                          | {"window_done_s": round(t_done - kill["t_kill"], 2)})
    for pid in (kill["pid"] for kill in kills):  # the killed workers' JVMs went with them
        srv.wait_for(lambda p=pid: _gone(p) and _group_gone(p), 60, f"the process group of worker {pid} to end")

    cat = Catalog(f"sqlite:///{ctl.home / 'catalog.db'}")
    try:
        trans = [(t.to_state.value, t.reason) for t in cat.transitions("killed")]
        job = cat.get_job("killed")
        cycles = cat.list_cycles("killed", limit=1000)
    finally:
        cat.close()
    recovering = [r for s, r in trans if s == "RECOVERING"]
    assert len(recovering) == len(recoveries), trans
    assert all("WorkerLostError" in r for r in recovering), recovering
    assert trans[-1][0] == "FINISHED"
    assert job.generation == 1 + len(recoveries)
    committed = [c for c in cycles if c.state == CycleState.COMMITTED]
    assert sorted(c.window for c in committed) == list(range(first, last + 1))  # each window committed once
    assert sum(1 for c in cycles if c.state == CycleState.FAILED) == len(recoveries)

    warm = [r["next_round_s"] for r in recoveries if r["warm"]] or [float("nan")]
    summary = {"recoveries": recoveries,
               "median_next_round_s": statistics.median(r["next_round_s"] for r in recoveries),
               "median_next_round_warm_s": statistics.median(warm),
               "median_window_done_s": statistics.median(r["window_done_s"] for r in recoveries),
               "median_detect_s": statistics.median(r["detect_s"] for r in recoveries)}
    (tmp_path / "recovery_times.json").write_text(json.dumps(summary, indent=2))
    print("\nrecovery after kill -9 of the worker:", json.dumps(summary, indent=2))
    client.close()


def test_hung_worker_misses_its_deadline_and_is_fenced_when_it_wakes(srv, make_controller, reference, tmp_path):
    events_n = 8000
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    # --keep-lost-workers: the controller does not kill the lost worker, so it can wake up
    ctl = make_controller("fence", args=("--keep-lost-workers", "--standby-workers", "1")).start()
    client = ctl.client()
    ref, out = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    thread, events, box = srv.run_in_thread(client, ref, job="hung", first=first, last=last)
    i, _, started = events.wait(lambda e: e.kind == "worker_started", 600, "a worker")
    pid = _pid(started.message)
    i, _, cycle = events.wait(lambda e: e.kind == "cycle_started", 600, "a round", after=i)
    time.sleep(0.5)
    old = next(w for w in client.list_workers() if w["pid"] == pid)
    t_stop = time.time()
    os.killpg(pid, signal.SIGSTOP)  # the worker and its JVM hang
    try:
        j, t_lost, lost = events.wait(lambda e: e.kind == "worker_lost", srv.HB_TIMEOUT + 30, "the loss", after=i)
        assert "missed the heartbeat deadline" in lost.message, lost.message
        assert srv.HB_TIMEOUT - 1 <= t_lost - t_stop <= srv.HB_TIMEOUT + 5, t_lost - t_stop
        events.wait(lambda e: e.kind == "cycle_started", 600, "a round on the new worker", after=j)

        # the stale worker is fenced: its heartbeats and cycle results are refused with ABORTED
        channel = grpc.insecure_channel(ctl.worker_address)  # the workers' own server
        stub = wpb_grpc.WorkerControlStub(channel)
        gen = old["generation"]
        for call, req in (
            (stub.Heartbeat, wpb.HeartbeatRequest(worker_id=old["id"], generation=gen, status="running")),
            (stub.CycleDone, wpb.CycleDoneRequest(worker_id=old["id"], generation=gen, request_id=1,
                                                  result_json="{}")),
            (stub.CycleFailed, wpb.CycleFailedRequest(worker_id=old["id"], generation=gen, request_id=1)),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call(req, timeout=30)
            assert info.value.code() == grpc.StatusCode.ABORTED
            assert "fenced" in info.value.details()
        channel.close()
    finally:
        os.killpg(pid, signal.SIGCONT)  # it wakes up late...
    # ...is refused, and leaves by itself (its JVM with it)
    srv.wait_for(lambda: _gone(pid) and _group_gone(pid), 60, "the stale worker to leave")
    worker_log = (ctl.home / "logs" / "workers" / f"{old['id']}.log").read_text()
    assert re.search(r"worker_exit reason=.*(refused \(ABORTED\)|closed the task stream)", worker_log), worker_log[-2000:]

    thread.join(900)
    assert "error" not in box, box.get("error")
    assert box["result"].state == "FINISHED"
    assert srv.outputs(client.read_sink, "hung", out) == reference(events_n)
    cat = Catalog(f"sqlite:///{ctl.home / 'catalog.db'}")
    try:
        cycles = cat.list_cycles("hung", limit=1000)
        job = cat.get_job("hung")
    finally:
        cat.close()
    committed = [c for c in cycles if c.state == CycleState.COMMITTED]
    assert sorted(c.window for c in committed) == list(range(first, last + 1))
    # nothing of the stale generation was committed after it hung
    assert all(c.generation == job.generation for c in committed if c.window >= cycle.window)
    client.close()
