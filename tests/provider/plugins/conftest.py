"""Fixtures of the plugin tests: a real Airflow api-server with the Lockgate plugin loaded
(from the provider's entry point), on loopback, with Airflow's simple auth manager and three
users (``admin``, ``viewer`` who may only read, ``editor`` who may edit DAGs), over the
session's metadata DB; and a small Lockgate pipeline to run into it.

The plugin reads jobs through the Airflow connection ``lockgate_ui`` (``[lockgate]
ui_conn_id``); tests point it at an embedded Lockgate home or at a ``lockgate server``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopback import free_port, wait_for

UI_CONN_ID = "lockgate_ui"
USERS = "admin:admin,viewer:viewer,editor:user"
PIPELINE = '''
import os
from datetime import timedelta
import lockgate as lg

OUT = os.path.join(os.environ.get("LOCKGATE_EXAMPLES_OUT", "/tmp"), "{name}")
pipeline = lg.Pipeline("{name}", cycle_window=timedelta(minutes=1), parallelism=1)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=2, seed=5, start="2026-01-01T00:00:00"), name="bids")
(bids.key_by("bidder").aggregate(bids=lg.count(), name="totals")
     .sink(lg.FileSink(os.path.join(OUT, "totals")), name="files"))
'''


def _write_pipeline(folder: Path, name: str) -> str:
    path = folder / f"{name}.py"
    path.write_text(PIPELINE.format(name=name))
    return f"{path}:pipeline"


@pytest.fixture(scope="session")
def write_pipeline() -> Any:
    """``write_pipeline(folder, name)``: a small Nexmark pipeline (running totals per bidder, to
    Parquet; one-minute windows from 2026-01-01T00:00Z) named ``name``; returns its reference."""
    return _write_pipeline


class ApiServer:
    """``airflow api-server`` on loopback with the Lockgate plugin, in its own process group."""

    def __init__(self, root: Path, airflow_home: Path):
        self.root = root
        self.home = airflow_home
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = root / "api-server.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")},
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__LOCKGATE__UI_CONN_ID": UI_CONN_ID,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self._tokens: dict[str, str] = {}

    def start(self, timeout: float = 180) -> ApiServer:
        cmd = [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1"]
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=self.root,
                                         start_new_session=True)
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"airflow api-server exited with {proc.returncode}:\n{self.log_text()[-4000:]}",
                            pytrace=False)
            try:
                return httpx.get(f"{self.base}/api/v2/version", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout, "the Airflow api-server")
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    # -- users ----------------------------------------------------------------------------
    def password(self, user: str) -> str:
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        return passwords[user]

    def token(self, user: str) -> str:
        if user not in self._tokens:
            r = httpx.post(f"{self.base}/auth/token", json={"username": user, "password": self.password(user)},
                           timeout=30)
            r.raise_for_status()
            self._tokens[user] = r.json()["access_token"]
        return self._tokens[user]

    def request(self, method: str, path: str, user: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        headers.update(kw.pop("headers", None) or {})
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=60, follow_redirects=False, **kw)

    def connect(self, **fields: Any) -> None:
        """Point the plugin's connection at a Lockgate (embedded home, or a controller)."""
        body = {"connection_id": UI_CONN_ID, "conn_type": "lockgate", **fields}
        if isinstance(body.get("extra"), dict):
            body["extra"] = json.dumps(body["extra"])
        r = self.request("PATCH", f"/api/v2/connections/{UI_CONN_ID}", "admin", json=body)
        if r.status_code == 404:
            r = self.request("POST", "/api/v2/connections", "admin", json=body)
        assert r.status_code in (200, 201), r.text


@pytest.fixture(scope="module")
def api_server(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One api-server with the Lockgate plugin for the test module."""
    server = ApiServer(tmp_path_factory.mktemp("api-server"), airflow_db).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """Where the browser tests write their screenshots: ``$LOCKGATE_TEST_OUTPUT/screenshots``
    (default ``test-output/screenshots`` in the checkout)."""
    out = Path(os.environ.get("LOCKGATE_TEST_OUTPUT") or Path(__file__).resolve().parents[3] / "test-output")
    folder = out / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
