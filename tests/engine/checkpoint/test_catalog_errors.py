"""A read-only, locked or full catalog raises a clear error naming the database and the fix.

Real databases only: SQLite files opened read-only (a ``mode=ro`` URL, and ``chmod 444`` files
opened by an unprivileged user in a subprocess, since root ignores file permissions), a
SQLite write lock held by another connection, and a real PostgreSQL server that is
read-only, refuses the user's writes, or has a table locked by another session.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from lockgate.checkpoint.catalog import Catalog
from lockgate.errors import (
    CatalogError,
    CatalogFullError,
    CatalogLockedError,
    CatalogReadOnlyError,
    CatalogUnavailableError,
    InvalidArgumentError,
)

PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
PG_BASE = "postgresql://postgres@127.0.0.1:5432"
ENGINE_DIR = Path(__file__).resolve().parents[3] / "engine"


def test_error_classes():
    assert issubclass(CatalogReadOnlyError, CatalogUnavailableError)
    assert issubclass(CatalogLockedError, CatalogUnavailableError)
    assert issubclass(CatalogUnavailableError, CatalogError)
    assert CatalogReadOnlyError.code == "FAILED_PRECONDITION"  # retrying cannot help
    assert CatalogLockedError.code == "UNAVAILABLE"  # retrying can


# -- SQLite: read-only -------------------------------------------------------------------


def test_sqlite_opened_read_only_by_url(tmp_path, monkeypatch):
    path = tmp_path / "catalog.db"
    writable = Catalog(path)
    writable.ensure_job("orders", "a.py:p")
    writable.close()
    monkeypatch.chdir(tmp_path)

    ro = Catalog(f"sqlite:///file:{path}?mode=ro&uri=true")
    assert [j.name for j in ro.list_jobs()] == ["orders"]  # reads work
    with pytest.raises(CatalogReadOnlyError) as err:
        ro.ensure_job("clicks", "b.py:p")
    message = str(err.value)
    assert f"the catalog database {path} is opened read-only by its URL (mode=ro)" in message
    assert "attempt to write a readonly database" in message
    assert "Drop mode=ro from the catalog URL" in message
    assert isinstance(err.value.__cause__, Exception)  # the driver's error stays attached
    ro.close()
    assert not (tmp_path / "file:").exists()  # the URI is not mistaken for a folder name
    assert [j.name for j in Catalog(path).list_jobs()] == ["orders"]


@pytest.fixture
def shared_dir():
    """A folder that an unprivileged user can enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="lockgate-catalog-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def open_as_nobody(location: Path) -> dict[str, str]:
    """Open the catalog at ``location`` and create a job, as the user nobody; what happened."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ENGINE_DIR)!r})
        from lockgate.checkpoint.catalog import Catalog
        try:
            Catalog(sys.argv[1]).ensure_job("clicks", "b.py:p")
            print(json.dumps({{"error": None, "message": ""}}))
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))
        """
    )
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    done = subprocess.run(
        [*nobody, sys.executable, "-c", script, str(location)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env={**os.environ, "HOME": "/tmp"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_catalog(path: Path) -> None:
    cat = Catalog(path)
    cat.ensure_job("orders", "a.py:p")
    cat.close()


def test_sqlite_chmod_444_files(shared_dir):
    """The issue's case: the catalog files are chmod 444 (read-only for their non-owner user)."""
    folder = shared_dir / "home"
    path = folder / "catalog.db"
    make_catalog(path)
    folder.chmod(0o755)
    for file in folder.iterdir():
        file.chmod(0o444)

    result = open_as_nobody(path)
    assert result["error"] == "CatalogReadOnlyError"
    message = result["message"]
    assert f"the catalog database {path} is read-only for this process (user nobody)" in message
    assert "attempt to write a readonly database" in message
    assert f"Make {path} and its folder {folder} writable by this user" in message
    assert "--catalog URL, or LOCKGATE_HOME" in message

    # With the folder writable, the catalog opens (SQLite can make its -wal and -shm files)
    # and reads work, but a write is still refused by the read-only file itself.
    folder.chmod(0o777)
    result = open_as_nobody(path)
    assert result["error"] == "CatalogReadOnlyError"
    assert f"{path} is read-only for this process (user nobody)" in result["message"]
    path.chmod(0o644)
    assert [j.name for j in Catalog(path).list_jobs()] == ["orders"]  # root wrote nothing either


def test_sqlite_folder_not_writable(shared_dir):
    folder = shared_dir / "home"
    folder.mkdir(mode=0o755)
    result = open_as_nobody(folder / "catalog.db")  # no file yet, and it cannot be created
    assert result["error"] == "CatalogReadOnlyError"
    assert f"cannot open the catalog database {folder / 'catalog.db'} (user nobody)" in result["message"]
    assert f"its folder {folder} exists and is writable by this user" in result["message"]

    result = open_as_nobody(folder / "nested" / "catalog.db")  # the folder cannot be created
    assert result["error"] == "CatalogReadOnlyError"
    assert f"cannot create the catalog folder {folder / 'nested'} (user nobody)" in result["message"]
    assert "Permission denied" in result["message"]


# -- SQLite: locked ----------------------------------------------------------------------


def test_sqlite_write_lock_held_by_another_connection(tmp_path):
    path = tmp_path / "catalog.db"
    make_catalog(path)
    cat = Catalog(f"sqlite:///{path}?timeout=0.5")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's open write transaction
    holder.execute("UPDATE lg_jobs SET pipeline_ref = 'held.py:p'")
    try:
        start = time.monotonic()
        with pytest.raises(CatalogLockedError) as err:
            cat.ensure_job("clicks", "b.py:p")
        assert time.monotonic() - start >= 0.5  # it waited the busy timeout first
        message = str(err.value)
        assert f"the catalog database {path} is locked" in message
        assert "another process held its write lock for longer than the busy timeout (0.5 s)" in message
        assert "database is locked" in message
        assert f"--catalog 'sqlite:///{path}?timeout=120'" in message
        assert [j.pipeline_ref for j in cat.list_jobs()] == ["a.py:p"]  # reads go on (WAL)
        with pytest.raises(CatalogLockedError):
            Catalog(f"sqlite:///{path}?timeout=0.2")  # opening writes (the schema check) too
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert cat.ensure_job("clicks", "b.py:p").name == "clicks"  # free again: writes go through
    cat.close()


def test_sqlite_busy_timeout_url_parameter(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"timeout='soon'.*seconds >= 0 \(default 30\)"):
        Catalog(f"sqlite:///{tmp_path / 'catalog.db'}?timeout=soon")


# -- PostgreSQL --------------------------------------------------------------------------


@pytest.fixture
def pg_database():
    name = f"lockgate_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_postgresql_read_only_database(pg_database):
    Catalog(f"{PG_BASE}/{pg_database}").close()
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                sql.Identifier(pg_database)
            )
        )
    cat = Catalog(f"postgresql://postgres:s3cret@127.0.0.1:5432/{pg_database}")
    assert cat.list_jobs() == []
    with pytest.raises(CatalogReadOnlyError) as err:
        cat.ensure_job("orders", "a.py:p")
    cat.close()
    message = str(err.value)
    assert f"the PostgreSQL catalog postgresql+psycopg://postgres:***@127.0.0.1:5432/{pg_database}" in message
    assert "s3cret" not in message
    assert "read-only transaction" in message
    assert "not a read-only standby" in message


def test_postgresql_user_without_write_access(pg_database):
    Catalog(f"{PG_BASE}/{pg_database}").close()
    role = f"lockgate_reader_{secrets.token_hex(4)}"
    with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={pg_database}", autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        c.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role)))
    try:
        cat = Catalog(f"postgresql://{role}@127.0.0.1:5432/{pg_database}")
        assert cat.list_jobs() == []
        with pytest.raises(CatalogReadOnlyError) as err:
            cat.ensure_job("orders", "a.py:p")
        cat.close()
        message = str(err.value)
        assert f"the PostgreSQL catalog postgresql+psycopg://{role}@127.0.0.1:5432/{pg_database}" in message
        assert "permission denied" in message
        assert f"Grant the catalog user '{role}' write access" in message
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(pg_database)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_postgresql_table_locked_by_another_session(pg_database):
    cat = Catalog(f"{PG_BASE}/{pg_database}?options=-c%20lock_timeout%3D500")
    cat.ensure_job("orders", "a.py:p")
    with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={pg_database}") as holder:
        holder.execute("LOCK TABLE lg_jobs IN EXCLUSIVE MODE")  # plain reads still pass
        with pytest.raises(CatalogLockedError) as err:
            cat.acquire("orders")
        assert cat.get_job("orders").generation == 0
        holder.rollback()
    message = str(err.value)
    assert f"the PostgreSQL catalog postgresql+psycopg://postgres@127.0.0.1:5432/{pg_database}" in message
    assert "lock timeout" in message
    assert "raise lock_timeout" in message
    assert cat.acquire("orders") == 1
    cat.close()


def test_sqlite_catalog_on_a_full_disk_then_room_again(small_disk):
    """A full disk under a SQLite catalog: a new catalog (SQLite cannot create its -wal file)
    and a write to an existing one both raise CatalogFullError naming the file and the free
    space; once there is room the catalog works again and holds what was committed."""
    path = small_disk.path / "home" / "catalog.db"
    cat = Catalog(f"sqlite:///{path}")
    cat.ensure_job("orders", "a.py:p")
    assert cat.acquire("orders") == 1
    small_disk.fill()
    with pytest.raises(CatalogFullError) as err:
        for i in range(200):  # the WAL has some room left in its pages: write until it is gone
            cat.ensure_job(f"job{i}", "a.py:p")
    message = str(err.value)
    assert f"the disk under the catalog database {path} is full" in message
    assert "0 KiB free" in message and "Free space there" in message
    cat.close()
    with pytest.raises(CatalogFullError) as fresh:
        Catalog(f"sqlite:///{small_disk.path / 'other' / 'catalog.db'}")
    assert "is full" in str(fresh.value)

    small_disk.free()
    cat = Catalog(f"sqlite:///{path}")
    assert cat.get_job("orders").generation == 1
    cat.ensure_job("later", "a.py:p")
    assert "later" in {j.name for j in cat.list_jobs()}
    cat.close()
