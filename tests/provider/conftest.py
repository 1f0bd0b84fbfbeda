"""Fixtures of the provider tests: a real Airflow (SQLite metadata DB, migrated once per
session), DAG runs through ``dag.test()``, a Lockgate home per test, and a real
``lockgate server`` for the gRPC tests.

Airflow reads its configuration when it is first imported, so the environment is set when
this file is imported, before any test module imports Airflow.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from loopback import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="lockgate-airflow-"))
TEST_DAGS = AIRFLOW_HOME / "test_dags"
TEST_DAGS.mkdir()

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [
            {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
            {
                "name": "lockgate-tests",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(TEST_DAGS)},
            },
        ]
    ),
}
os.environ.update(AIRFLOW_ENV)
for _var in [k for k in os.environ if k.startswith("AIRFLOW_CONN_")]:
    del os.environ[_var]


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB (``airflow db migrate`` once per session)."""
    db = AIRFLOW_HOME / "airflow.db"
    if not db.exists():
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
            env={**os.environ, **AIRFLOW_ENV}, timeout=300,
        )
        if proc.returncode != 0:
            pytest.fail(f"airflow db migrate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}", pytrace=False)
    return AIRFLOW_HOME


@pytest.fixture
def lg_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A fresh Lockgate home and examples output folder for the test (the embedded default)."""
    home, out = tmp_path / "lockgate_home", tmp_path / "examples_out"
    home.mkdir()
    out.mkdir()
    monkeypatch.setenv("LOCKGATE_HOME", str(home))
    monkeypatch.setenv("LOCKGATE_EXAMPLES_OUT", str(out))
    monkeypatch.delenv("AIRFLOW_CONN_LOCKGATE_DEFAULT", raising=False)
    return SimpleNamespace(home=home, out=out, tmp=tmp_path)


@dataclass
class DagRunResult:
    """What a ``dag.test()`` run left in the metadata DB."""

    dag_id: str
    run_id: str
    state: str
    tasks: dict[str, tuple[str | None, int]] = field(default_factory=dict)

    def state_of(self, task_id: str) -> str | None:
        return self.tasks[task_id][0]

    def tries(self, task_id: str) -> int:
        return self.tasks[task_id][1]

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            row = session.execute(
                select(XComModel.value).where(
                    XComModel.dag_id == self.dag_id, XComModel.run_id == self.run_id,
                    XComModel.task_id == task_id, XComModel.key == key,
                )
            ).first()
        if row is None:
            return None
        value = row[0]
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return json.loads(value)
        return value


def _dags_in(path: Path) -> dict[str, Any]:
    from airflow.sdk import DAG

    name = "lockgate_test_dagfile_" + str(abs(hash(str(path))))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return {v.dag_id: v for v in vars(module).values() if isinstance(v, DAG)}


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[..., DagRunResult]:
    """``run_dag(dag_id, logical_date=None, conf=None)``: one DAG run through ``dag.test()``
    (tasks in this process, triggers in line); the DAG is looked up in ``dags/`` and in the
    test DAG folder."""

    def run(dag_id: str, logical_date: datetime | None = None, conf: dict[str, Any] | None = None) -> DagRunResult:
        dag = None
        for folder in (TEST_DAGS, DAGS):
            for path in sorted(folder.glob("*.py")):
                if dag_id in path.read_text():
                    dag = _dags_in(path).get(dag_id) or dag
            if dag is not None:
                break
        assert dag is not None, f"no DAG {dag_id!r} in {DAGS} or {TEST_DAGS}"
        kwargs: dict[str, Any] = {"run_conf": conf}
        if logical_date is not None:
            kwargs["logical_date"] = logical_date
        dr = dag.test(**kwargs)
        tis = {ti.task_id: (ti.state, ti.try_number) for ti in dr.get_task_instances()}
        return DagRunResult(dag_id, dr.run_id, str(dr.state), tis)

    return run


@pytest.fixture
def test_dag() -> Iterator[Callable[[str, str], Path]]:
    """``test_dag(name, source)`` writes a DAG file into the test DAG bundle."""
    written: list[Path] = []

    def write(name: str, source: str) -> Path:
        path = TEST_DAGS / f"{name}.py"
        path.write_text(source)
        written.append(path)
        return path

    yield write
    for p in written:
        p.unlink(missing_ok=True)


TINY_PIPELINE = '''
import os
from datetime import timedelta
import lockgate as lg

OUT = os.path.join(os.environ.get("LOCKGATE_EXAMPLES_OUT", "/tmp"), "{name}")
pipeline = lg.Pipeline("{name}", cycle_window=timedelta(minutes=1), parallelism=1)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=2, seed=5, start="2026-01-01T00:00:00"), name="bids")
{body}
'''


@pytest.fixture
def tiny_pipeline(tmp_path: Path) -> Callable[..., str]:
    """``tiny_pipeline(name, body=None)`` writes a small Nexmark pipeline and returns its reference."""

    def make(name: str, body: str | None = None) -> str:
        body = body or (
            'bids.key_by("bidder").aggregate(bids=lg.count(), name="totals")'
            '.sink(lg.FileSink(os.path.join(OUT, "totals")), name="files")'
        )
        path = tmp_path / f"{name}.py"
        path.write_text(TINY_PIPELINE.format(name=name, body=body))
        return f"{path}:pipeline"

    return make


# -- a real controller ------------------------------------------------------------------

def _references(args: list[str]) -> list[str]:
    """A test controller accepts any pipeline reference (loopback, development) unless the
    test confines them itself."""
    return [] if {"--pipelines", "--pipeline-modules"} & set(args) else ["--allow-any-pipeline"]


class Controller:
    """A ``lockgate server`` process on loopback, in its own process group."""

    def __init__(self, root: Path, args: tuple[str, ...] = ()):
        self.root = root
        self.home = root / "home"
        self.out = root / "examples_out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.args = list(args)
        self.log = root / "controller.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def conn_json(self) -> str:
        return json.dumps({"conn_type": "lockgate", "host": "127.0.0.1", "port": self.port, "extra": {"timeout": 60}})

    def start(self, timeout: float = 180) -> Controller:
        env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_FAULT")}
        env["LOCKGATE_EXAMPLES_OUT"] = str(self.out)
        cmd = [
            sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(self.home), "--port", str(self.port),
            "--heartbeat-interval", "1", "--heartbeat-timeout", "20", "--max-restarts", "0", "--standby-workers", "2",
            *self.args, *_references(self.args),
        ]
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                         start_new_session=True)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"lockgate server exited with {proc.returncode}:\n{self.log.read_text()[-3000:]}",
                            pytrace=False)
            return "listening on" in self.log.read_text(errors="replace")

        wait_for(ready, timeout, "the Lockgate controller to listen")
        return self

    def client(self) -> Any:
        import lockgate

        return lockgate.connect(self.url, timeout=60)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._kill_workers()

    def _kill_workers(self) -> None:
        import psutil

        for p in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                cmd = p.info["cmdline"] or []
                if "lockgate.server.worker" in " ".join(cmd) and str(self.home) in " ".join(cmd):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(p.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    """One Lockgate controller for the session (``--max-restarts 0``: a failing run FAILs at
    once, so that Airflow's retry is what resumes it)."""
    ctl = Controller(tmp_path_factory.mktemp("controller")).start()
    try:
        yield ctl
    finally:
        ctl.stop()
        shutil.rmtree(ctl.root / "home" / "snapshots", ignore_errors=True)


@pytest.fixture
def grpc_env(controller: Controller, monkeypatch: pytest.MonkeyPatch) -> Controller:
    """``lockgate_default`` points at the session's controller; examples write where it does."""
    monkeypatch.setenv("AIRFLOW_CONN_LOCKGATE_DEFAULT", controller.conn_json)
    monkeypatch.setenv("LOCKGATE_EXAMPLES_OUT", str(controller.out))
    return controller


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """This module's helpers, for test files (conftest modules cannot be imported by them)."""
    return SimpleNamespace(free_port=free_port, wait_for=wait_for, REPO=REPO, DAGS=DAGS, TEST_DAGS=TEST_DAGS,
                           AIRFLOW_HOME=AIRFLOW_HOME, Controller=Controller)
