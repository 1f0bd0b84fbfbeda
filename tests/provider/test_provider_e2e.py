"""End to end, the way it runs in production: the real Airflow components, started
separately on 127.0.0.1 (api-server, scheduler, dag-processor, triggerer; never
``airflow standalone``, whose log servers bind every interface), and a Lockgate controller.

A run of ``lockgate_failure_demo`` is triggered through Airflow's REST API. Its
``run_windows`` task starts the windows on the controller and defers; the real triggerer
follows the job. Window 4 fails on purpose (the controller runs with ``--max-restarts 0``),
so the task fails; its retry finds the job in the task state store, restores from the last
completed window and defers again. The output is exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds
import pytest

W0 = 29453760
DAG_ID = "lockgate_failure_demo"


class Airflow:
    """Airflow's components as separate processes, on a fresh home and SQLite database."""

    def __init__(self, root: Path, port: int, env: dict[str, str]):
        self.root = root
        self.home = root / "airflow"
        self.home.mkdir(parents=True)
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))},
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": env.pop("DAGS_FOLDER"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            **env,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.token: str | None = None

    def _airflow(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "airflow", *args]

    def migrate(self) -> None:
        proc = subprocess.run(self._airflow("db", "migrate"), env=self.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]

    def start(self) -> None:
        commands = {
            "api-server": self._airflow("api-server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"),
            "scheduler": self._airflow("scheduler", "--skip-serve-logs"),
            "dag-processor": self._airflow("dag-processor"),
            "triggerer": self._airflow("triggerer", "--skip-serve-logs"),
        }
        for name, cmd in commands.items():
            with open(self.root / f"{name}.log", "wb") as log:
                self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                    cwd=self.root, start_new_session=True)

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                pytest.fail(f"airflow {name} exited with {p.returncode}:\n{self.log(name)[-4000:]}", pytrace=False)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)

    # -- REST --------------------------------------------------------------------------
    def login(self) -> None:
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        user, password = next(iter(passwords.items()))
        r = httpx.post(f"{self.base}/auth/token", json={"username": user, "password": password}, timeout=30)
        r.raise_for_status()
        self.token = r.json()["access_token"]

    def api(self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, f"{self.base}/api/v2{path}", headers={**auth, **(headers or {})}, timeout=30, **kw)


@pytest.fixture
def airflow_cluster(tmp_path: Path, controller, helpers):
    af = Airflow(
        tmp_path,
        helpers.free_port(),
        {
            "DAGS_FOLDER": str(helpers.DAGS),
            "AIRFLOW_CONN_LOCKGATE_DEFAULT": controller.conn_json,
            "LOCKGATE_EXAMPLES_OUT": str(controller.out),
            "LOCKGATE_HOME": str(tmp_path / "lockgate_home"),
        },
    )
    af.migrate()
    af.start()
    try:
        yield af
    finally:
        af.stop()


def test_rest_triggered_run_defers_fails_on_purpose_and_its_retry_restores_exactly(airflow_cluster, controller, helpers):
    af = airflow_cluster

    def api_up() -> bool:
        af.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{af.base}/api/v2/version", timeout=5).status_code == 200
        return False

    helpers.wait_for(api_up, 180, "the api-server")
    helpers.wait_for(lambda: (af.home / "simple_auth_manager_passwords.json.generated").exists(), 60, "the passwords")
    af.login()

    def dag_parsed() -> bool:
        af.check_alive()
        return af.api("GET", f"/dags/{DAG_ID}").status_code == 200

    helpers.wait_for(dag_parsed, 240, "the dag-processor to parse the example DAGs")
    assert af.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    r = af.api("POST", f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]

    seen: list[str] = []
    deadline = time.monotonic() + 600
    state = None
    while time.monotonic() < deadline:
        af.check_alive()
        ti = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/run_windows").json()
        if ti.get("state") and (not seen or seen[-1] != f"{ti['try_number']}:{ti['state']}"):
            seen.append(f"{ti['try_number']}:{ti['state']}")
        state = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]
        if state in ("success", "failed"):
            break
        time.sleep(0.5)
    logs = {name: af.log(name)[-3000:] for name in ("scheduler", "triggerer")}
    assert state == "success", f"run {state}; run_windows went {seen}; logs: {logs}"

    # deferred (the real triggerer followed the job), failed on purpose, retried, succeeded
    assert "1:deferred" in seen and "2:deferred" in seen, seen
    tries = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/run_windows/tries").json()["task_instances"]
    assert [t["state"] for t in sorted(tries, key=lambda t: t["try_number"])] == ["failed", "success"]
    content = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/run_windows/logs/2",
                     headers={"Accept": "application/json"}).json()["content"]
    log2 = "\n".join(str(line.get("event", line)) if isinstance(line, dict) else str(line) for line in content)
    assert f"Windows {W0}..{W0 + 2} of job 'failure_demo' are already committed" in log2
    assert "Pausing task as DEFERRED" in log2 or "deferred" in log2.lower()

    # the output is exact: checked by the DAG itself, and here against the controller's files
    xcom = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/check_output/xcomEntries/return_value").json()
    report = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert report["bids"] == report["expected_bids"] == 5520
    client = controller.client()
    assert [c.window for c in client.list_checkpoints("failure_demo")] == list(range(W0, W0 + 5))
    attempts = client.get_job("failure_demo")
    assert attempts.state == "FINISHED" and attempts.last_window == W0 + 4
    # the operator recorded the DAG and task that run the job (the UI plugin's rights come from it)
    assert attempts.labels == {"airflow.dag_id": DAG_ID, "airflow.task_id": "run_windows"}
    table = ds.dataset(str(controller.out / "failure_demo" / "per_auction"), format="parquet", partitioning="hive").to_table()
    assert sum(table.column("bids").to_pylist()) == 5520
    assert sorted(set(table.column("lg_window").to_pylist())) == list(range(W0, W0 + 5))
