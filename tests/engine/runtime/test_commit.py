"""Committing staged sink output exactly once: real files, real PostgreSQL, no Spark.

Staged folders are written here with pyarrow in the layout the worker stages
(``lockgate.runtime.sinks``); test_sinks.py runs the same protocol from Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from lockgate.errors import SinkCommitError, SinkNotFoundError
from lockgate.runtime.committers import (
    CollectCommitter,
    FileCommitter,
    PostgresCommitter,
    committer_for,
    read_collected,
)
from lockgate.runtime.staging import staging_dir_name

JOB = "orders"
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def rows_of(window: int, n: int = 3) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([window * 100 + i for i in range(n)], pa.int64()),
            "name": [f"w{window}-{i}" for i in range(n)],
            "ts": pa.array(
                [T0 + timedelta(minutes=window, seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
        }
    )


def stage(
    folder: Path, table: pa.Table, *, kind: str, sink: str, window: int, attempt: int = 1, job: str = JOB
) -> dict:
    """Stage ``table`` like the worker does: Parquet part files plus _SUCCESS."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "part-00000.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    return {
        "kind": kind,
        "uri": str(folder),
        "rows": table.num_rows,
        "format": "parquet",
        "job": job,
        "sink": sink,
        "window": window,
        "attempt": attempt,
        "columns": table.column_names,
    }


def file_staged(out: Path, window: int, attempt: int = 1, table: pa.Table | None = None) -> dict:
    folder = out / "_staging" / JOB / staging_dir_name(window, attempt)
    return stage(
        folder,
        rows_of(window) if table is None else table,
        kind="file",
        sink="out",
        window=window,
        attempt=attempt,
    )


def home_staged(
    home: str,
    kind: str,
    sink: str,
    window: int,
    attempt: int = 1,
    table: pa.Table | None = None,
    job: str = JOB,
) -> dict:
    folder = Path(home) / "staging" / job / sink / staging_dir_name(window, attempt)
    return stage(
        folder,
        rows_of(window) if table is None else table,
        kind=kind,
        sink=sink,
        window=window,
        attempt=attempt,
        job=job,
    )


def read_file_sink(out: Path) -> pa.Table:
    part = ds.partitioning(pa.schema([("lg_window", pa.int64())]), flavor="hive")
    return (
        ds.dataset(str(out), format="parquet", partitioning=part)
        .to_table()
        .sort_by([("lg_window", "ascending"), ("id", "ascending")])
    )


# -- file ----------------------------------------------------------------------------
def test_file_commit_renames_staged_folder(tmp_path, lockgate_home):
    out = tmp_path / "out"
    sink = {"kind": "file", "path": str(out), "format": "parquet", "options": {}}
    c = committer_for(sink, lockgate_home)
    assert isinstance(c, FileCommitter)
    staged = file_staged(out, 3)
    assert not c.is_committed(JOB, "out", 3)

    info = c.commit(JOB, "out", 3, staged)
    assert info == {"target": f"{out}/lg_window=3", "rows": 3, "replayed": False}
    assert c.is_committed(JOB, "out", 3)
    assert not Path(staged["uri"]).exists()
    t = read_file_sink(out)
    assert t.column("id").to_pylist() == [300, 301, 302]
    assert set(t.column("lg_window").to_pylist()) == {3}
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_file_commit_twice_is_a_noop(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": str(out), "format": "parquet"}, lockgate_home)
    staged = file_staged(out, 0)
    c.commit(JOB, "out", 0, staged)
    # replay of the very same descriptor: staged folder gone, target there -> fine
    assert c.commit(JOB, "out", 0, staged)["replayed"] is True
    # a second attempt of a committed window (restore replayed the window): skipped,
    # its staged output thrown away
    again = file_staged(out, 0, attempt=2, table=rows_of(0, n=10))
    assert c.commit(JOB, "out", 0, again)["replayed"] is True
    assert not Path(again["uri"]).exists()
    assert read_file_sink(out).num_rows == 3


def test_file_commit_with_staged_gone_and_no_target_fails_clearly(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": str(out), "format": "parquet"}, lockgate_home)
    staged = file_staged(out, 5)
    c.discard(staged)
    with pytest.raises(SinkCommitError) as err:
        c.commit(JOB, "out", 5, staged)
    msg = str(err.value)
    assert "job 'orders'" in msg and "sink 'out'" in msg and "window 5" in msg
    assert "gone" in msg and "re-run" in msg
    assert not c.is_committed(JOB, "out", 5)


def test_commit_refuses_staged_output_of_another_window(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": str(out), "format": "parquet"}, lockgate_home)
    staged = file_staged(out, 1)
    with pytest.raises(SinkCommitError, match="belongs to window 1"):
        c.commit(JOB, "out", 2, staged)
    assert Path(staged["uri"]).exists()


def test_file_retract_after(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": str(out), "format": "parquet"}, lockgate_home)
    for w in range(5):
        c.commit(JOB, "out", w, file_staged(out, w))
    leftover = file_staged(out, 7)  # staged, never committed
    early = file_staged(out, 1, attempt=2)  # staged attempt of a kept window

    assert c.retract_after(JOB, "out", 2) == [3, 4]
    assert [c.is_committed(JOB, "out", w) for w in range(5)] == [True, True, True, False, False]
    assert sorted(set(read_file_sink(out).column("lg_window").to_pylist())) == [0, 1, 2]
    assert not Path(leftover["uri"]).exists()
    assert Path(early["uri"]).exists()
    assert sorted(p.name for p in out.iterdir()) == ["_staging", "lg_window=0", "lg_window=1", "lg_window=2"]
    assert c.retract_after(JOB, "out", 2) == []
    # the retracted window commits again after the restore
    assert c.commit(JOB, "out", 3, file_staged(out, 3, attempt=2))["replayed"] is False


def test_discard_missing_is_fine(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": str(out), "format": "parquet"}, lockgate_home)
    staged = file_staged(out, 0)
    c.discard(staged)
    assert not Path(staged["uri"]).exists()
    c.discard(staged)
    c.discard({})


def test_file_commit_to_file_uri(tmp_path, lockgate_home):
    out = tmp_path / "out"
    c = committer_for({"kind": "file", "path": f"file://{out}", "format": "parquet"}, lockgate_home)
    staged = file_staged(out, 0)
    staged["uri"] = f"file://{staged['uri']}"
    assert c.commit(JOB, "out", 0, staged)["replayed"] is False
    assert (out / "lg_window=0" / "part-00000.parquet").exists()
    assert c.is_committed(JOB, "out", 0)


def test_unknown_sink_kind():
    with pytest.raises(SinkCommitError, match="no committer for sink kind 'kafka'"):
        committer_for({"kind": "kafka"}, "/tmp")


# -- collect -------------------------------------------------------------------------
def test_collect_commit_and_read_collected(lockgate_home):
    c = committer_for({"kind": "collect", "name": "results"}, lockgate_home)
    assert isinstance(c, CollectCommitter)
    for w in (2, 0, 1):
        info = c.commit(JOB, "sink_1", w, home_staged(lockgate_home, "collect", "sink_1", w))
        assert info["target"] == f"{lockgate_home}/collect/{JOB}/results/lg_window={w}"
    assert c.commit(JOB, "sink_1", 1, home_staged(lockgate_home, "collect", "sink_1", 1, attempt=2))[
        "replayed"
    ]

    t = read_collected(lockgate_home, JOB, "results")
    assert t.column_names == ["id", "name", "ts", "lg_window"]
    assert t.schema.field("lg_window").type == pa.int64()
    assert t.column("lg_window").to_pylist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert t.column("id").to_pylist() == [0, 1, 2, 100, 101, 102, 200, 201, 202]

    assert c.retract_after(JOB, "sink_1", 0) == [1, 2]
    assert read_collected(lockgate_home, JOB, "results").column("lg_window").to_pylist() == [0, 0, 0]


def test_read_collected_errors_and_empty(lockgate_home):
    with pytest.raises(SinkNotFoundError, match=r"'missing' has no committed window.*: none"):
        read_collected(lockgate_home, JOB, "missing")
    c = committer_for({"kind": "collect", "name": "results"}, lockgate_home)
    c.commit(JOB, "s", 0, home_staged(lockgate_home, "collect", "s", 0))
    with pytest.raises(SinkNotFoundError, match=r"with committed windows: 'results'"):
        read_collected(lockgate_home, JOB, "missing")

    # a window with no rows: empty table, schema kept
    e = committer_for({"kind": "collect", "name": "empty"}, lockgate_home)
    e.commit(JOB, "s2", 0, home_staged(lockgate_home, "collect", "s2", 0, table=rows_of(0).slice(0, 0)))
    t = read_collected(lockgate_home, JOB, "empty")
    assert t.num_rows == 0 and t.column_names == ["id", "name", "ts", "lg_window"]

    # a window staged with no columns at all: an empty table
    folder = Path(lockgate_home) / "staging" / JOB / "s3" / staging_dir_name(0, 1)
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").write_bytes(b"")
    z = committer_for({"kind": "collect", "name": "nocols"}, lockgate_home)
    z.commit(JOB, "s3", 0, {"kind": "collect", "uri": str(folder), "rows": 0, "format": "parquet"})
    t = read_collected(lockgate_home, JOB, "nocols")
    assert t.num_rows == 0 and t.column_names == ["lg_window"]


# -- postgres ------------------------------------------------------------------------
# The database is shared by the whole test session: each test has its own job and table.
@pytest.fixture
def job() -> str:
    return f"orders_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def tbl() -> str:
    return f"out_{uuid.uuid4().hex[:10]}"


def _query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _markers(url: str, job: str) -> list[tuple]:
    return _query(
        url,
        "SELECT split_part(sink, '@', 1), \"window\", rows FROM lockgate_sink_commits "
        'WHERE job = %s ORDER BY "window"',
        (job,),
    )


def _pg_sink(url: str, table: str) -> dict:
    return {"kind": "postgres", "url": url, "table": table, "window_column": "lg_window"}


def test_postgres_commit_exactly_once(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    assert isinstance(c, PostgresCommitter)
    assert not c.is_committed(job, "pg", 0)
    staged = home_staged(lockgate_home, "postgres", "pg", 0, job=job)
    info = c.commit(job, "pg", 0, staged)
    assert info == {"target": f"postgres:{tbl}", "rows": 3, "replayed": False}
    assert not Path(staged["uri"]).exists()  # staged files go once committed
    assert c.is_committed(job, "pg", 0)
    assert c.committed_at(job, "pg", 0) is not None

    # replays: same descriptor (files gone), and a later attempt of the same window
    assert c.commit(job, "pg", 0, staged)["replayed"] is True
    again = home_staged(lockgate_home, "postgres", "pg", 0, attempt=2, job=job)
    assert c.commit(job, "pg", 0, again)["replayed"] is True
    assert not Path(again["uri"]).exists()

    c.commit(job, "pg", 1, home_staged(lockgate_home, "postgres", "pg", 1, job=job))
    assert _query(pg_url, f"SELECT id, name, lg_window FROM {tbl} ORDER BY id") == [
        (0, "w0-0", 0),
        (1, "w0-1", 0),
        (2, "w0-2", 0),
        (100, "w1-0", 1),
        (101, "w1-1", 1),
        (102, "w1-2", 1),
    ]
    assert _markers(pg_url, job) == [("pg", 0, 3), ("pg", 1, 3)]


def test_postgres_types_and_timestamps_round_trip(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    c.commit(job, "pg", 4, home_staged(lockgate_home, "postgres", "pg", 4, job=job))
    types = dict(
        _query(
            pg_url,
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s",
            (tbl,),
        )
    )
    assert types == {"id": "bigint", "name": "text", "ts": "timestamp with time zone", "lg_window": "bigint"}
    got = _query(pg_url, f"SELECT ts FROM {tbl} ORDER BY id")
    assert [r[0] for r in got] == [T0 + timedelta(minutes=4, seconds=i) for i in range(3)]


def test_postgres_crash_before_commit_leaves_nothing(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    staged = home_staged(lockgate_home, "postgres", "pg", 0, job=job)

    class Crash(Exception):
        pass

    def crash(conn):
        # the marker is inserted and the rows ingested, inside the open transaction
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM lockgate_sink_commits WHERE job = $1", (job,))
        assert cur.fetchone()[0] == 1
        cur.execute(f"SELECT count(*) FROM {tbl}")
        assert cur.fetchone()[0] == 3
        conn.close()  # the process "dies": connection gone, no COMMIT
        raise Crash

    c._before_commit = crash
    with pytest.raises(Crash):
        c.commit(job, "pg", 0, staged)
    assert _markers(pg_url, job) == []
    assert _query(pg_url, f"SELECT count(*) FROM {tbl}") == [(0,)]
    assert not c.is_committed(job, "pg", 0)
    assert Path(staged["uri"]).exists()

    c._before_commit = None
    assert c.commit(job, "pg", 0, staged)["replayed"] is False
    assert c.commit(job, "pg", 0, staged)["replayed"] is True
    assert _query(pg_url, f"SELECT count(*) FROM {tbl}") == [(3,)]
    assert _markers(pg_url, job) == [("pg", 0, 3)]


@pytest.mark.slow
def test_postgres_kill_9_mid_commit_then_replay(pg_url, lockgate_home, job, tbl):
    """A committer process killed with SIGKILL inside the transaction commits nothing."""
    staged = home_staged(lockgate_home, "postgres", "pg", 7, job=job)
    script = textwrap.dedent(
        """
        import json, os, signal, sys
        from lockgate.runtime.committers import committer_for
        sink, home, job, staged = json.loads(sys.argv[1])
        c = committer_for(sink, home)
        c._before_commit = lambda conn: os.kill(os.getpid(), signal.SIGKILL)
        c.commit(job, "pg", 7, staged)
        """
    )
    args = json.dumps([_pg_sink(pg_url, tbl), str(lockgate_home), job, staged])
    proc = subprocess.run(
        [sys.executable, "-c", script, args], capture_output=True, timeout=120, env=os.environ
    )
    assert proc.returncode == -9, proc.stderr.decode()
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    assert not c.is_committed(job, "pg", 7)
    assert _query(pg_url, f"SELECT count(*) FROM {tbl}") == [(0,)]
    assert c.commit(job, "pg", 7, staged) == {"target": f"postgres:{tbl}", "rows": 3, "replayed": False}
    assert _query(pg_url, f"SELECT count(*), min(lg_window), max(lg_window) FROM {tbl}") == [(3, 7, 7)]


def test_postgres_staged_gone(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    staged = home_staged(lockgate_home, "postgres", "pg", 2, job=job)
    c.discard(staged)
    with pytest.raises(SinkCommitError, match=rf"job '{job}', sink 'pg', window 2: .*gone.*re-run"):
        c.commit(job, "pg", 2, staged)
    assert not c.is_committed(job, "pg", 2)


def test_postgres_retract_after(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    assert c.retract_after(job, "pg", 0) == []  # nothing there yet
    for w in range(4):
        c.commit(job, "pg", w, home_staged(lockgate_home, "postgres", "pg", w, job=job))
    leftover = home_staged(lockgate_home, "postgres", "pg", 9, job=job)
    assert c.retract_after(job, "pg", 1) == [2, 3]
    assert _query(pg_url, f"SELECT DISTINCT lg_window FROM {tbl} ORDER BY 1") == [(0,), (1,)]
    assert [m[1] for m in _markers(pg_url, job)] == [0, 1]
    assert not c.is_committed(job, "pg", 2)
    assert not Path(leftover["uri"]).exists()
    again = home_staged(lockgate_home, "postgres", "pg", 2, attempt=2, job=job)
    assert c.commit(job, "pg", 2, again)["replayed"] is False
    assert _query(pg_url, f"SELECT count(*) FROM {tbl}") == [(9,)]


def test_postgres_existing_table(pg_url, lockgate_home, job, tbl):
    schema = f"Mart_{tbl}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(
            f'CREATE TABLE "{schema}"."Out" (win BIGINT, ts TIMESTAMPTZ, note TEXT, name TEXT, id BIGINT)'
        )
        conn.execute(f"CREATE TABLE {tbl} (id BIGINT, name TEXT, ts TIMESTAMPTZ)")
    sink = {"kind": "postgres", "url": pg_url, "table": f"{schema}.Out", "window_column": "win"}
    c = committer_for(sink, lockgate_home)
    c.commit(job, "pg", 5, home_staged(lockgate_home, "postgres", "pg", 5, job=job))
    assert _query(pg_url, f'SELECT win, id, name, note FROM "{schema}"."Out" ORDER BY id') == [
        (5, 500, "w5-0", None),
        (5, 501, "w5-1", None),
        (5, 502, "w5-2", None),
    ]
    bad = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    with pytest.raises(SinkCommitError, match="no window column 'lg_window'"):
        bad.commit(job, "pg2", 0, home_staged(lockgate_home, "postgres", "pg2", 0, job=job))
    assert not bad.is_committed(job, "pg2", 0)


def test_postgres_empty_window(pg_url, lockgate_home, job, tbl):
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    empty = home_staged(lockgate_home, "postgres", "pg", 0, table=rows_of(0).slice(0, 0), job=job)
    info = c.commit(job, "pg", 0, empty)
    assert info["rows"] == 0 and info["replayed"] is False
    assert c.is_committed(job, "pg", 0)
    assert _query(pg_url, f"SELECT count(*) FROM {tbl}") == [(0,)]


def test_postgres_markers_are_per_target_table(pg_url, lockgate_home, job, tbl):
    """The same job name writing another table (another home, a recreated job) is not
    mistaken for a replay: markers are keyed by the sink's target table too."""
    first = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    first.commit(job, "pg", 0, home_staged(lockgate_home, "postgres", "pg", 0, job=job))
    other_table = f"{tbl}_other"
    second = committer_for(_pg_sink(pg_url, other_table), lockgate_home)
    info = second.commit(job, "pg", 0, home_staged(lockgate_home, "postgres", "pg", 0, attempt=2, job=job))
    assert info["replayed"] is False
    assert len(_query(pg_url, f"SELECT id FROM {other_table}")) == 3


def test_postgres_table_takes_one_jobs_sink(pg_url, lockgate_home, job, tbl):
    """A second job (or a second sink) writing a table another job's sink writes is refused
    before anything is inserted: a restore of one would retract the other's windows."""
    c = committer_for(_pg_sink(pg_url, tbl), lockgate_home)
    c.commit(job, "pg", 0, home_staged(lockgate_home, "postgres", "pg", 0, job=job))
    other = f"{job}_two"
    for other_job, sink in ((other, "pg"), (job, "pg2")):
        staged = home_staged(lockgate_home, "postgres", sink, 1, job=other_job)
        with pytest.raises(SinkCommitError) as info:
            c.commit(other_job, sink, 1, staged)
        message = str(info.value)
        assert f"already written by job '{job}' (sink 'pg')" in message
        assert "Write to another table" in message
        assert not c.is_committed(other_job, sink, 1)
    assert _query(pg_url, f"SELECT DISTINCT lg_window FROM {tbl}") == [(0,)]
    assert _markers(pg_url, other) == []
    # the owner goes on as before
    assert c.commit(job, "pg", 1, home_staged(lockgate_home, "postgres", "pg", 1, job=job))["replayed"] is False
