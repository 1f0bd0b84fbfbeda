"""The environment a controller gives its workers (``lockgate.server.pool.worker_env``).

A worker holds a live gRPC channel (its heartbeats) when PySpark forks, with a ``preexec_fn``,
the child that starts its JVM. With grpcio's fork support on, that child now and then died
before its ``exec`` (the worker's Spark never started: "Java gateway process exited"). The
check here is the same fork, many times over, in a real process with a live channel and server.
"""

from __future__ import annotations

import os
import subprocess
import sys

from lockgate.server.pool import worker_env

FORKS = """
import os, subprocess, threading, time
from concurrent import futures
import grpc

server = grpc.server(futures.ThreadPoolExecutor(2))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")

def heartbeat():
    while True:
        try:
            grpc.channel_ready_future(channel).result(timeout=1)
        except grpc.FutureTimeoutError:
            pass
        time.sleep(0.01)

threading.Thread(target=heartbeat, daemon=True).start()
failed = 0
for _ in range(200):
    r, w = os.pipe()
    child = subprocess.Popen(["/bin/echo", "started"], stdout=w, stderr=w, preexec_fn=lambda: None)
    os.close(w)
    said = os.read(r, 4096)
    os.close(r)
    failed += child.wait() != 0 or b"started" not in said
print("failed", failed)
"""


def test_the_workers_environment_keeps_the_token_and_faults_out_and_grpc_fork_support_off(monkeypatch):
    monkeypatch.setenv("LOCKGATE_TOKEN", "secret")
    monkeypatch.setenv("LOCKGATE_FAULT", "mid_commit:3")
    monkeypatch.delenv("GRPC_ENABLE_FORK_SUPPORT", raising=False)
    env = worker_env()
    assert "LOCKGATE_TOKEN" not in env and "LOCKGATE_FAULT" not in env
    assert env["GRPC_ENABLE_FORK_SUPPORT"] == "false" and env["PYSPARK_PYTHON"] == sys.executable


def test_forks_with_a_live_grpc_channel_all_start_in_the_workers_environment():
    env = {**worker_env(), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", FORKS], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["failed", "0"], (proc.stdout, proc.stderr[-2000:])


def test_the_lockgate_command_turns_grpc_fork_support_off(monkeypatch, tmp_path, capsys):
    from lockgate.cli.main import main

    monkeypatch.delenv("GRPC_ENABLE_FORK_SUPPORT", raising=False)
    assert main(["--home", str(tmp_path), "jobs"]) == 0
    assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "false"
