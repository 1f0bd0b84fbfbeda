"""Fixtures of the CLI tests: the ``lockgate`` command as a process, and controllers
(``lockgate server``) as real processes on loopback that a test can kill -9 and start again
over the same home and port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from loopback import free_port, wait_for


def _references(args: list[str]) -> list[str]:
    """A test controller accepts any pipeline reference (loopback, development) unless the
    test confines them itself."""
    return [] if {"--pipelines", "--pipeline-modules"} & set(args) else ["--allow-any-pipeline"]


class Controller:
    """A ``lockgate server`` over ``root/home`` on a fixed port (so a restart keeps its URL)."""

    def __init__(self, root: Path, args: tuple[str, ...] = ()):
        self.root = root
        self.home = root / "home"
        self.port = free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self, timeout: float = 60) -> Controller:
        cmd = [sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(self.home), "--port",
               str(self.port), "--heartbeat-interval", "1", "--heartbeat-timeout", "6", "--restart-backoff", "0.5",
               "--restart-backoff-max", "4", *self.args, *_references(self.args)]
        env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_FAULT")}
        log = self.root / f"ctl-{len(self.logs)}.log"
        self.logs.append(log)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, cwd=self.root)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"lockgate server exited with {proc.returncode}:\n{log.read_text()[-3000:]}",
                            pytrace=False)
            return "listening on" in log.read_text(errors="replace")

        wait_for(ready, timeout, "the controller to listen")
        return self

    def kill9(self) -> None:
        """kill -9 the controller (its process group; its workers have their own and live on)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def workers(self) -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            with contextlib.suppress(psutil.Error):
                cmd = p.info["cmdline"] or []
                if "lockgate.server.worker" in cmd and str(self.home) in cmd \
                        and p.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(p)
        return found

    def cleanup(self) -> list[int]:
        """Stop the controller (SIGTERM), then kill any worker of this home still alive, by pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.kill9()
        left: list[psutil.Process] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = self.workers()
            if not left:
                return []
            time.sleep(0.5)
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        return [p.pid for p in left]


@pytest.fixture
def make_controller(tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    made: list[Controller] = []

    def make(name: str = "ctl", args: tuple[str, ...] = ()) -> Controller:
        c = Controller(tmp_path / name, args)
        made.append(c)
        return c

    yield make
    leftovers = [pid for c in made for pid in c.cleanup()]
    assert not leftovers, f"worker processes outlived their controller: {leftovers}"


def lockgate_cmd(*args: str) -> list[str]:
    """The ``lockgate`` command line, run with this interpreter."""
    return [sys.executable, "-m", "lockgate.cli.main", *args]


@pytest.fixture(scope="session")
def cli() -> Any:
    """This module's helpers, for test files (conftest modules cannot be imported by them)."""
    import types

    return types.SimpleNamespace(free_port=free_port, wait_for=wait_for, cmd=lockgate_cmd)
