"""Fixtures of the plugin tests: a real Airflow api-server with the Lockgate plugin loaded
(from the provider's entry point), on loopback, with Airflow's simple auth manager and three
users (``admin``, ``viewer`` who may only read, ``editor`` who may edit DAGs), over the
session's metadata DB; a small Lockgate pipeline to run into it; and a small graph job (connected
components, two windows), run once per session into a home of its own.

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
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from loopback import free_port, wait_for

import lockgate

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


GRAPH_JOB = "graph_ui"
GRAPH_PIPELINE = '''
from datetime import datetime, timedelta
import lockgate as lg
from lockgate.graph.library import ConnectedComponents

EDGES_DIR = {edges!r}
pipeline = lg.Pipeline("{name}", cycle_window=timedelta(minutes=1), origin=datetime(2026, 1, 1))
links = pipeline.source(lg.FileSource(EDGES_DIR, event_time="ts"), name="links")
g = pipeline.graph(links.select("src", "dst"), name="g")
g.compute(ConnectedComponents(), name="components").sink(lg.CollectSink("components"), name="components_out")
'''


def _write_edges(folder: Path, windows: int = 2, stars: int = 10, leaves: int = 10) -> None:
    """``windows`` one-minute windows of edges from 2026-01-01T00:00: in each, ``stars`` new stars
    of ``leaves`` edges (a center and its leaves; 200 edges by default). Components of diameter
    two: connected components halts after four supersteps a window."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, dst, ts = [], [], []
    for w in range(windows):
        for c in range(stars):
            center = (w * stars + c) * (leaves + 1)
            for i in range(leaves):
                src.append(center)
                dst.append(center + 1 + i)
                ts.append(datetime(2026, 1, 1) + timedelta(minutes=w, seconds=(c * leaves + i) * 59 / (stars * leaves)))
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us"))}), folder / "edges.parquet")


@pytest.fixture(scope="session")
def graph_job(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """GRAPH_JOB (connected components over the edges of :func:`_write_edges`) run until caught up
    (windows 0 and 1) on an embedded home of its own, once per session: point the plugin's
    connection at ``home`` to show it."""
    root = tmp_path_factory.mktemp("graph")
    _write_edges(root / "edges")
    path = root / f"{GRAPH_JOB}.py"
    path.write_text(GRAPH_PIPELINE.format(edges=str(root / "edges"), name=GRAPH_JOB))
    client = lockgate.connect("embedded", home=str(root / "home"))
    result = client.run(f"{path}:pipeline", job=GRAPH_JOB, until_caught_up=True)
    assert result.state == "FINISHED" and result.windows_run == 2, result
    return SimpleNamespace(client=client, home=root / "home", job=GRAPH_JOB, windows=[0, 1])


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


@pytest.fixture(scope="session")
def api_server_class() -> type[ApiServer]:
    """:class:`ApiServer`, for a module that starts one with settings of its own (``.env``)."""
    return ApiServer


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
