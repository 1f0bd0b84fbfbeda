"""The worker pool: its account of a lost worker (how its process ended, from a real exit
status), and how long a starting pool waits for the orphans of a controller that died."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lockgate.server import pool as pool_module
from lockgate.server.config import ServerConfig
from lockgate.server.generated import lockgate_worker_pb2 as wpb
from lockgate.server.pool import WorkerPool, exit_reason
from lockgate.server.service import worker_keepalive


def _status(code: str) -> int:
    return subprocess.run([sys.executable, "-c", code]).returncode


def test_exit_reason_names_the_signal_or_the_code():
    killed = _status("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert killed == -signal.SIGKILL
    assert exit_reason(killed) == ("the worker process was killed by SIGKILL "
                                   "(kill -9, or the kernel's out-of-memory killer)")
    assert exit_reason(_status("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")) == \
        "the worker process was killed by SIGTERM"
    assert exit_reason(_status("raise SystemExit(3)")) == "the worker process exited with code 3"


def test_the_worker_link_breaks_on_a_missed_ping_only_after_the_heartbeat_timeout():
    opts = dict(worker_keepalive(20))
    assert opts["grpc.keepalive_timeout_ms"] == 20_000
    assert opts["grpc.keepalive_time_ms"] == 10_000
    assert dict(worker_keepalive(1))["grpc.keepalive_timeout_ms"] == 5_000  # never below gRPC's usual 5 s


def _wait_exec(pid: int, wid: str) -> None:
    """Wait until ``pid`` shows its own command line: Popen returns as soon as the child starts
    its exec, and /proc/<pid>/cmdline is empty until the exec is done (most of the time when read
    at once), so the pool would take a stand-in read at once for a process that is no worker."""
    deadline = time.monotonic() + 10
    while wid.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, f"process {pid} did not show its command line within 10 s"
        time.sleep(0.01)


def _orphans(tmp_path, advertise: str, master: str, jobs: dict[str, str]) -> dict[str, subprocess.Popen]:
    """Live processes the pool takes for a dead controller's workers (their command line is a
    worker's), each noted under <home>/run/workers as that controller noted it."""
    run_dir = tmp_path / "run" / "workers"
    run_dir.mkdir(parents=True)
    procs = {}
    for wid, job in jobs.items():
        procs[wid] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                       "-m", "lockgate.server.worker", "--id", wid])
        _wait_exec(procs[wid].pid, wid)
        (run_dir / f"{wid}.json").write_text(json.dumps(
            {"pid": procs[wid].pid, "controller": advertise, "master": master, "job": job}))
    return procs


def _hello(pool: WorkerPool, wid: str, proc: subprocess.Popen, master: str, last_job: str):
    return wpb.WorkerHello(worker_id=wid, pid=proc.pid, spark_master=master, adopted=True,
                           last_job=last_job, settings=pool.settings, orphaned_s=1.0)


@pytest.mark.parametrize("job_orphan_exits", [False, True])
def test_a_resumed_job_waits_for_the_live_orphan_that_ran_it_past_the_short_adoption_wait(
    tmp_path, monkeypatch, job_orphan_exits
):
    # on a busy machine the job's orphan calls only after its cancelled round ended: later than
    # the standby, and later than the few seconds the pool waits for orphans at all
    monkeypatch.setattr(pool_module, "ADOPT_WAIT_S", 0.5)
    monkeypatch.setattr(pool_module, "ADOPT_JOB_WAIT_S", 30.0)
    master, advertise = "local[1]", "unix:" + str(tmp_path / "workers.sock")
    standby, mine = "w-standby", "w-job"
    procs = _orphans(tmp_path, advertise, master, {standby: "", mine: "resumed"})
    # no standby target: a pool one standby short would start a real worker while the test runs
    pool = WorkerPool(ServerConfig(home=str(tmp_path), spark_master=master, standby_workers=0), advertise)
    try:
        pool.register_connection(_hello(pool, standby, procs[standby], master, ""))
        taken: list = []
        t0 = time.monotonic()
        taker = threading.Thread(target=lambda: taken.append(pool.take(master, "resumed")), daemon=True)
        taker.start()
        taker.join(2.0)  # four times the short wait
        assert not taken, (f"the job took the standby instead of waiting for its own orphan (expected: "
                           f"{pool._expected}, its process alive: {procs[mine].poll() is None})")
        if job_orphan_exits:  # an orphan that exits (its round outlived its grace) is not waited for
            procs[mine].kill()
            taker.join(10)
            assert [h.id for h in taken] == [standby]
        else:
            pool.register_connection(_hello(pool, mine, procs[mine], master, "resumed"))
            taker.join(10)
            assert [h.id for h in taken] == [mine]
            assert pool.handles[standby].state.value == "IDLE"  # still the standby
        assert time.monotonic() - t0 < 12
        assert not [h for h in pool.handles.values() if not h.adopted], "the pool started a worker"
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        pool.close()


def test_only_a_cluster_masters_applications_hold_its_cores():
    assert pool_module.holds_cluster_cores("spark://127.0.0.1:7077")
    assert pool_module.holds_cluster_cores("yarn")
    assert pool_module.holds_cluster_cores("k8s://https://api:6443")
    assert not pool_module.holds_cluster_cores("local[2]")
    assert not pool_module.holds_cluster_cores("sc://127.0.0.1:15002")
