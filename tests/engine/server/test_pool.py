"""The worker pool's account of a lost worker: how its process ended, from a real exit status."""

from __future__ import annotations

import signal
import subprocess
import sys

from lockgate.server.pool import exit_reason
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
