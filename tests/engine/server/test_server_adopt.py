"""Orphan workers: what happens to the workers of a controller that died (kill -9).

- A new controller on the same address adopts them, up to ``--max-workers``; an orphan it
  does not take is refused (ABORTED) and leaves. A job the new controller does not resume
  (it was stopped meanwhile) holds none of them: they are idle, and they serve new work
  (a compile) with their warm SparkSession.
- An orphan that no controller adopts leaves when its grace period ends, its Spark JVM
  with it; with no grace period it leaves at once (the old behaviour).

The adoption and recovery of a running job, exactly once, is in test_server_restart.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from lockgate.checkpoint.catalog import Catalog
from lockgate.control.transitions import JobTransitions

pytestmark = pytest.mark.slow

JOB = "orphaned"


def _alive(client) -> dict[int, dict]:
    return {w["pid"]: w for w in client.list_workers() if w["state"] in ("STARTING", "IDLE", "BUSY")}


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _group_gone(pgid: int, within: float = 10.0) -> bool:
    """The worker's process group (its JVM included) is gone, now or within a few seconds: a
    worker leaves by SIGKILL of its own group, and the kernel takes a moment to tear a large JVM
    down on a loaded machine."""
    deadline = time.monotonic() + within
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_orphans_are_adopted_idle_up_to_max_workers_when_their_job_is_not_resumed(srv, make_controller, tmp_path):
    events_n = 16000
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    ctl = make_controller("adopt", args=("--standby-workers", "1")).start()
    client = ctl.client()
    ref, _ = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    client.start_run(ref, job=JOB, first=first, last=last)
    srv.wait_for(lambda: (client.get_job(JOB).last_window or 0) >= first, 600, "a complete window")
    srv.wait_for(lambda: sorted(w["state"] for w in _alive(client).values()) == ["BUSY", "IDLE"], 300,
                 "the standby")
    before = _alive(client)
    client.close()
    ctl.kill9()

    # the job is stopped while no controller runs: the next one does not resume it
    cat = Catalog(f"sqlite:///{ctl.home / 'catalog.db'}")
    try:
        JobTransitions(cat, JOB, cat.acquire(JOB)).stop("stopped while no controller ran")
    finally:
        cat.close()
    ctl.args = ["--standby-workers", "1", "--max-workers", "1"]
    ctl.start()
    client = ctl.client()
    srv.wait_for(lambda: len(ctl.worker_processes()) == 1, 90, "one orphan adopted, the other refused")
    adopted = _alive(client)
    assert len(adopted) == 1 and set(adopted) < set(before), (adopted, before)
    (pid, w), = adopted.items()
    assert w["state"] == "IDLE" and not w["job"]  # the stopped job holds no worker
    assert client.get_job(JOB).state == "STOPPED"
    refused_pid, refused = next((p, info["id"]) for p, info in before.items() if p != pid)
    refused_log = (ctl.home / "logs" / "workers" / f"{refused}.log").read_text(errors="replace")
    assert re.search(r"refused this worker \(ABORTED\).*its limit \(--max-workers 1\)", refused_log), refused_log[-2000:]
    srv.wait_for(lambda: _group_gone(refused_pid), 10, "the refused orphan's JVM to go")

    # the adopted worker serves new work with its warm session; no worker was started
    t0 = time.monotonic()
    compiled = client.compile(ref)
    assert compiled.pipeline == "srv" and "auction_windows" in compiled.operators
    assert time.monotonic() - t0 < 30
    assert set(_alive(client)) == {pid}
    assert "worker_spawned" not in ctl.log.read_text()
    client.close()
    ctl.stop()
    srv.wait_for(lambda: not ctl.worker_processes(), 30, "the adopted worker to be shut down with its controller")


def _worker(tmp_path, name: str, grace: float) -> tuple[subprocess.Popen, str]:
    """A worker started by hand for a controller that is not there."""
    home = tmp_path / name
    home.mkdir()
    log = home / "worker.log"
    cmd = [sys.executable, "-m", "lockgate.server.worker", "--controller", f"127.0.0.1:{_free_port()}",
           "--worker-id", name, "--spark-master", "local[1]", "--home", str(home), "--snapshots",
           # the timeout outlasts a JVM start on a loaded runner: the worker must reach Spark first
           str(home / "snapshots"), "--heartbeat-interval", "0.5", "--heartbeat-timeout", "120",
           "--orphan-grace", str(grace)]
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_TOKEN"}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return proc, str(log)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_orphan_nobody_adopts_leaves_at_the_end_of_its_grace_with_its_jvm(tmp_path):
    # no controller listens: each worker starts Spark, fails to connect, becomes an orphan
    procs = {grace: _worker(tmp_path, f"grace{int(grace)}", grace) for grace in (0.0, 3.0)}
    try:
        for proc, _ in procs.values():
            proc.wait(180)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    texts = {grace: Path(log).read_text() for grace, (_, log) in procs.items()}
    for grace, text in texts.items():
        assert "spark_started" in text, text[-2000:]  # its JVM was up when it left
        assert _group_gone(procs[grace][0].pid)
    # grace 0: leaves as soon as the controller is found missing
    assert "orphaned" not in texts[0.0]
    assert re.search(r"worker_exit reason=\"the task stream failed \(UNAVAILABLE", texts[0.0]), texts[0.0][-2000:]
    # grace 3: an orphan for 3 s, then leaves
    orphaned = re.search(r"^(\S+) INFO lockgate.server.worker orphaned ", texts[3.0], re.M)
    left = re.search(r"^(\S+) INFO lockgate.server.worker worker_exit reason=\"no controller at \S+ adopted this "
                     r"orphan within --orphan-grace 3s\"", texts[3.0], re.M)
    assert orphaned and left, texts[3.0][-2000:]
    waited = (datetime.fromisoformat(left.group(1)) - datetime.fromisoformat(orphaned.group(1))).total_seconds()
    assert 3.0 <= waited < 15.0, waited  # the grace, plus a reconnect interval on a busy machine
