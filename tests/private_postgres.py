"""A private PostgreSQL server for tests that stop, kill or break their database.

Tests that take a sink database down must never touch the machine's own server: this one
lives in a temporary folder, listens on a free loopback port, and is stopped (or killed)
by the test. Run as root, the server runs as the ``postgres`` system user (PostgreSQL
refuses root).

    with PrivatePostgres(tmp_path) as pg:
        url = pg.url            # postgresql://postgres@127.0.0.1:PORT/postgres
        pg.stop()               # the outage
        pg.start()              # back, same data
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    raise FileNotFoundError(f"{name} not found: install PostgreSQL's server binaries (Debian: postgresql)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One throw-away PostgreSQL cluster under ``base`` (created on first :meth:`start`)."""

    def __init__(self, base: str | Path, port: int | None = None):
        self.base = Path(base) / "private-postgres"
        self.data = self.base / "data"
        self.port = port or _free_port()
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = list(cmd)
        if self._as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)

    def _init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.base, "postgres", "postgres")
            # the test's temporary folders above are root's; the server only needs to pass through
            for parent in self.base.parents:
                if str(parent) in ("/", "/tmp"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")

    def start(self) -> PrivatePostgres:
        """Start the server (initialising it the first time) and wait until it accepts connections."""
        if not (self.data / "PG_VERSION").exists():
            self._init()
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories='' -c fsync=off"
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.base / "server.log"),
                  "-w", "-t", "60", "start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._run(_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), check=False).returncode == 0:
                return self
            time.sleep(0.2)
        raise TimeoutError(f"private PostgreSQL on port {self.port} did not start: see {self.base / 'server.log'}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: smart, fast or immediate); a stopped server stays stopped."""
        if (self.data / "postmaster.pid").exists():
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def __enter__(self) -> PrivatePostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop("immediate")
