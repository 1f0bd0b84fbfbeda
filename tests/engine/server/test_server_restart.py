"""kill -9 of the controller, with its catalog on the real PostgreSQL server: restarted over
the same catalog and port, the controller adopts the workers the dead one left behind (warm,
same processes), resumes the job from its last complete window, and nothing is lost or
duplicated.

The first kill is at a random instant of a round; the second is at a precise one, the
controller's worst moment: right after the worker's output of a window was staged and
before it was committed (``LOCKGATE_FAULT=after_stage:W``), so the restart must replay
that commit. Both times the same two worker processes (the job's and the standby) are
adopted, and the time from the new controller's launch to the next committed window is
printed. Last, a controller with another token refuses the orphans, which leave at once.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from lockgate.checkpoint.catalog import Catalog, CycleState

pytestmark = pytest.mark.slow

JOB = "restarted"


def _catalog_state(pg_url: str) -> tuple[str, int | None, list]:
    cat = Catalog(pg_url)
    try:
        job = cat.get_job(JOB)
        last = cat.last_checkpoint(JOB)
        return job.state.value, last.window if last else None, cat.list_cycles(JOB, limit=1000)
    finally:
        cat.close()


def _workers(client) -> dict[int, str]:
    """pid -> state of the controller's live workers."""
    return {w["pid"]: w["state"] for w in client.list_workers() if w["state"] in ("STARTING", "IDLE", "BUSY")}


def _pids(ctl) -> set[int]:
    return {p.pid for p in ctl.worker_processes()}


def _adopted(log_path) -> set[int]:
    """The worker pids a controller's log says it adopted."""
    return {int(m) for m in re.findall(r"worker_adopted worker=\S+ pid=(\d+)", log_path.read_text(errors="replace"))}


def test_controller_kill9_and_restart_resume_exactly_on_postgres(
    srv, make_controller, reference, tmp_path, pg_url, monkeypatch
):
    # one window per round: the second kill is aimed between one window's staging and its
    # commit (kills inside catch-up groups: tests/faults/test_catchup_faults.py)
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    events_n = 16000  # 8 cycle windows
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    staged_window = last - 1
    ctl = make_controller("restart", catalog=pg_url, args=("--standby-workers", "1")).start()
    client = ctl.client()
    ref, out = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    info = client.start_run(ref, job=JOB, first=first, last=last)
    assert info.state in ("SCHEDULING", "RUNNING")
    timings = {}

    # 1. kill -9 at a random instant of a round, once two windows are complete and the
    #    standby is warm
    srv.wait_for(lambda: (client.get_job(JOB).last_window or 0) >= first + 1, 900, "two complete windows")
    srv.wait_for(lambda: sorted(_workers(client).values()) == ["BUSY", "IDLE"], 300, "the standby")
    time.sleep(random.Random(7).uniform(0.0, 2.0))
    workers = _workers(client)
    busy = next(pid for pid, state in workers.items() if state == "BUSY")
    client.close()
    ctl.kill9()
    state, done_at_kill, _ = _catalog_state(pg_url)
    assert state == "RUNNING" and done_at_kill is not None and done_at_kill < staged_window - 2
    assert _pids(ctl) == set(workers)  # orphans, waiting for a controller

    # 2. restart (with a crash point armed): the orphans are adopted, the job resumes on the
    #    worker that ran it; the controller dies again right after staging `staged_window`
    t_start = time.time()
    ctl.start(env={"LOCKGATE_FAULT": f"after_stage:{staged_window}"})
    client = ctl.client()
    srv.wait_for(lambda: (client.get_job(JOB).last_window or 0) > done_at_kill, 120, "the next window",
                 every=0.05)
    timings["start_to_next_window_s"] = round(time.time() - t_start, 2)
    adopted = _workers(client)
    assert set(adopted) == set(workers), (adopted, workers)  # the same processes: none started
    assert adopted[busy] == "BUSY"
    assert ctl.proc.wait(900) is not None  # the fault killed it
    client.close()
    state, done, cycles = _catalog_state(pg_url)
    assert done == staged_window - 1
    staged = [c for c in cycles if c.state == CycleState.STAGED]
    assert [c.window for c in staged] == [staged_window]  # staged, never committed
    assert _pids(ctl) == set(workers)

    # 3. restart: adopted again, the staged commit is replayed, the job finishes
    t_restart = time.time()
    ctl.start()
    client = ctl.client()
    final = srv.wait_for(lambda: (j := client.get_job(JOB)).state in ("FINISHED", "FAILED") and j, 900,
                         "the job to finish")
    timings["restart_to_finished_s"] = round(time.time() - t_restart, 2)
    assert final.state == "FINISHED", final.last_error
    assert final.last_window == last
    assert srv.outputs(client.read_sink, JOB, out) == reference(events_n)

    cat = Catalog(pg_url)
    try:
        trans = [(t.to_state.value, t.reason) for t in cat.transitions(JOB)]
        cycles = cat.list_cycles(JOB, limit=1000)
        checkpoints = cat.list_checkpoints(JOB)
    finally:
        cat.close()
    restarts = [r for s, r in trans if s == "RECOVERING" and "controller restarted" in r]
    assert len(restarts) == 2, trans
    assert trans[-1][0] == "FINISHED"
    committed = sorted(c.window for c in cycles if c.state == CycleState.COMMITTED)
    assert committed == list(range(first, last + 1))  # each window committed exactly once
    assert [c.window for c in checkpoints] == list(range(first, last + 1))
    assert "replayed" in ctl.log_text() or any(c.window == staged_window for c in cycles
                                                 if c.state == CycleState.COMMITTED)
    for restarted in ctl.logs[1:]:  # both restarts adopted both workers and started none
        assert _adopted(restarted) == set(workers), restarted.read_text()[-3000:]
        assert "worker_spawned" not in restarted.read_text()
    print("\ncontroller restart:", json.dumps(timings))
    idle = {w["job"]: w["id"] for w in client.list_workers() if w["state"] == "IDLE"}
    assert sorted(idle) == ["", JOB]  # the standby, and the job's worker kept for its next run
    standby = [idle[""]]
    client.close()

    # 4. a controller with another token refuses the orphans: they leave at once (not at
    #    the end of their grace period), their JVMs with them
    ctl.kill9()
    ctl.token, ctl.args = "another-token", ["--standby-workers", "0"]
    t_start = time.time()
    ctl.start()
    srv.wait_for(lambda: not _pids(ctl), 30, "the refused orphans to leave")
    assert time.time() - t_start < 30
    orphan_log = (ctl.home / "logs" / "workers" / f"{standby[0]}.log").read_text(errors="replace")
    assert "refused this worker (UNAUTHENTICATED)" in orphan_log, orphan_log[-2000:]
