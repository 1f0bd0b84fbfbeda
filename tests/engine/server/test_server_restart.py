"""kill -9 of the controller, with its catalog on the real PostgreSQL server: restarted over
the same catalog, the controller resumes the job from its last complete window, and
nothing is lost or duplicated.

The first kill is at a random instant of a round; the second is at a precise one, the
controller's worst moment: right after the worker's output of a window was staged and
before it was committed (``LOCKGATE_FAULT=after_stage:W``), so the restart must replay
that commit. The workers the dead controller leaves behind leave by themselves.
"""

from __future__ import annotations

import json
import random
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


def test_controller_kill9_and_restart_resume_exactly_on_postgres(srv, make_controller, reference, tmp_path, pg_url):
    events_n = 16000  # 8 cycle windows
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    staged_window = last - 1
    ctl = make_controller("restart", catalog=pg_url, args=("--standby-workers", "1")).start()
    client = ctl.client()
    ref, out = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    info = client.start_run(ref, job=JOB, first=first, last=last)
    assert info.state in ("SCHEDULING", "RUNNING")
    timings = {}

    # 1. kill -9 at a random instant of a round, once two windows are complete
    srv.wait_for(lambda: (client.get_job(JOB).last_window or 0) >= first + 1, 900, "two complete windows")
    time.sleep(random.Random(7).uniform(0.0, 2.0))
    client.close()
    t_kill = time.time()
    ctl.kill9()
    state, done_at_kill, _ = _catalog_state(pg_url)
    assert state == "RUNNING" and done_at_kill is not None and done_at_kill < staged_window
    srv.wait_for(lambda: not ctl.worker_processes(), 60, "the dead controller's workers to leave")

    # 2. restart (with a crash point armed): the job resumes; the controller dies again
    #    right after staging window `staged_window`
    ctl.start(env={"LOCKGATE_FAULT": f"after_stage:{staged_window}"})
    client = ctl.client()
    srv.wait_for(lambda: client.get_job(JOB).state == "RUNNING", 600, "the job to run again")
    timings["kill_to_running_s"] = round(time.time() - t_kill, 2)
    assert ctl.proc.wait(900) is not None  # the fault killed it
    client.close()
    state, done, cycles = _catalog_state(pg_url)
    assert done == staged_window - 1
    staged = [c for c in cycles if c.state == CycleState.STAGED]
    assert [c.window for c in staged] == [staged_window]  # staged, never committed
    srv.wait_for(lambda: not ctl.worker_processes(), 60, "the dead controller's workers to leave")

    # 3. restart: the staged commit is replayed, the job finishes
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
    print("\ncontroller restart:", json.dumps(timings))
    client.close()
