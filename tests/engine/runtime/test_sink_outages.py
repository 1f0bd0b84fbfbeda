"""Sink and storage outages: each ends a run with one clear Lockgate error, never a traceback,
and the next run commits what failed exactly once.

- a PostgreSQL sink down at start (through the ``lockgate`` command) or going down mid-run
  (at the instant before ``COMMIT``, and between two windows): the private server of the
  ``private_postgres`` fixture, never the machine's; the table is compared row for row with
  a plain-Python computation over the input;
- a full disk (a 2 MiB tmpfs, filled) under a file sink, under the home's staging, under
  the snapshots, and while a commit creates its folder; a read-only one refuses for good.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import lockgate
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.errors import (
    SinkRefusedError,
    SinkUnavailableError,
    StorageAccessError,
    StorageFullError,
)
from lockgate.runtime.committers import PostgresCommitter, committer_for
from lockgate.runtime.sinks import stage_table
from lockgate.server.runner import is_transient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = "outage"

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(minutes=1))
orders = pipeline.source(lg.FileSource({src!r}, event_time="ts"), name="orders")
(orders.filter("amount > 0")
       .key_by("customer")
       .window(lg.Tumbling(timedelta(minutes=2)))
       .aggregate(n=lg.count(), total=lg.sum("amount"), name="per_customer")
       .sink({sink}, name="totals"))
'''


# -- input and the independent reference -----------------------------------------------
def input_rows() -> list[tuple[int, str, int, datetime]]:
    """40 orders over 4 minutes (two 2-minute tumbling windows)."""
    return [(i, f"c{i % 3}", (i % 7) - 1, T0 + timedelta(seconds=6 * i)) for i in range(40)]


def reference() -> dict[tuple[datetime, str], tuple[int, int]]:
    """(window start, customer) -> (count, total) of the positive orders, in plain Python."""
    out: dict[tuple[datetime, str], tuple[int, int]] = {}
    for _, customer, amount, ts in input_rows():
        if amount <= 0:
            continue
        start = T0 + timedelta(minutes=2) * ((ts - T0) // timedelta(minutes=2))
        n, total = out.get((start, customer), (0, 0))
        out[(start, customer)] = (n + 1, total + amount)
    return out


def as_dict(rows) -> dict[tuple[datetime, str], tuple[int, int]]:
    """Rows ``(window_start, customer, n, total)`` as a dict; fails on a duplicate key."""
    out = {}
    for start, customer, n, total in rows:
        start = start if start.tzinfo else start.replace(tzinfo=UTC)
        assert (start, customer) not in out, f"duplicate row for {(start, customer)}"
        out[(start.astimezone(UTC), customer)] = (int(n), int(total))
    return out


@pytest.fixture
def pipeline_file(tmp_path):
    """Write the input once and return ``make(sink_expr, job)`` -> pipeline reference."""
    src = tmp_path / "orders"
    src.mkdir()
    ids, customers, amounts, times = zip(*input_rows(), strict=True)
    table = pa.table({
        "id": pa.array(ids, pa.int64()), "customer": list(customers), "amount": pa.array(amounts, pa.int64()),
        "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
    })
    pq.write_table(table, src / "part-0.parquet")

    def make(sink: str, job: str = JOB) -> str:
        path = tmp_path / f"{job}.py"
        path.write_text(PIPELINE.format(job=job, src=str(src), sink=sink))
        return f"{path}:pipeline"

    return make


def windows(client, ref: str) -> tuple[int, int]:
    first, last = client.windows_for(ref, T0, T0 + timedelta(minutes=4))
    return first, last + 2  # two more windows close the last tumbling window


def pg_rows(url: str, table: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT window_start, customer, n, total FROM {table}").fetchall()


def pg_markers(url: str, job: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute('SELECT "window" FROM lockgate_sink_commits WHERE job = %s ORDER BY 1', (job,))
        return [r[0] for r in rows]


# -- PostgreSQL ------------------------------------------------------------------------
def test_postgres_down_at_start_one_line_then_committed_once(private_postgres, pipeline_file, tmp_path, spark):
    pg = private_postgres
    ref = pipeline_file(f"lg.PostgresSink({pg.url!r}, 'totals')")
    home = tmp_path / "home"
    # a database that refuses (no such role) is not worth retrying
    bad = PostgresCommitter({"kind": "postgres", "url": pg.url.replace("postgres@", "nobody@"), "table": "t"},
                            str(home))
    with pytest.raises(SinkRefusedError) as refused:
        bad.is_committed(JOB, "totals", 0)
    assert 'role "nobody" does not exist' in str(refused.value) and not is_transient(refused.value)

    pg.stop()
    client = lockgate.connect("embedded", home=str(home))
    try:
        first, last = windows(client, ref)
        proc = subprocess.run(
            [sys.executable, "-m", "lockgate", "--home", str(home), "run", ref,
             "--from-window", str(first), "--to-window", str(last), "--no-progress"],
            capture_output=True, text=True, timeout=240, env={**os.environ, "LOCKGATE_HOME": str(home)},
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "OperationalError" not in proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, proc.stderr
        message = lines[0]
        assert message.startswith(f"lockgate: error: job '{JOB}', sink 'totals', window {first}: ")
        assert f"PostgreSQL at 127.0.0.1:{pg.port}" in message and "connection refused" in message
        assert "start it" in message and "run the job again" in message

        # nothing checkpointed; the window whose commit failed waits, staged (with the rest of
        # its catch-up group)
        assert client.list_checkpoints(JOB) == []
        staged = [c.window for c in client.catalog.staged_cycles(JOB)]
        assert staged and staged == list(range(first, first + len(staged)))
        assert client.get_job(JOB).state == "FAILED"

        pg.start()
        res = client.run(ref, first=first, last=last)
        # the staged windows are committed by the recovery, the others run
        assert res.state == "FINISHED" and res.windows_run == last - first + 1 - len(staged)
    finally:
        client.close()
    assert as_dict(pg_rows(pg.url, "totals")) == reference()
    assert pg_markers(pg.url, JOB) == list(range(first, last + 1))


def test_postgres_lost_mid_commit_and_between_windows(private_postgres, pipeline_file, tmp_path, spark, monkeypatch):
    pg = private_postgres
    ref = pipeline_file(f"lg.PostgresSink({pg.url!r}, 'totals')")
    # one window per round: the outages are aimed at single windows' commits (catch-up groups
    # under outages and kills: tests/faults/test_catchup_faults.py)
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")
    client = lockgate.connect("embedded", home=str(tmp_path / "home"))
    try:
        first, last = windows(client, ref)
        # 1. the server dies with window first+1's rows inserted, before COMMIT
        calls = []

        def die_before_second_commit(conn) -> None:
            calls.append(1)
            if len(calls) == 2:
                pg.stop("immediate")

        monkeypatch.setattr(PostgresCommitter, "_before_commit", staticmethod(die_before_second_commit))
        with pytest.raises(SinkUnavailableError) as lost:
            client.run(ref, first=first, last=last)
        message = str(lost.value)
        assert f"window {first + 1}: PostgreSQL at 127.0.0.1:{pg.port}" in message
        assert "while committing the transaction" in message and is_transient(lost.value)
        assert lost.value.code == "UNAVAILABLE"
        assert client.catalog.last_checkpoint(JOB).window == first
        (staged,) = client.catalog.staged_cycles(JOB)
        assert staged.window == first + 1 and staged.rows_out > 0  # rows were inserted, then lost
        monkeypatch.setattr(PostgresCommitter, "_before_commit", None)

        # 2. still down: the replay of the staged window fails the same clean way
        with pytest.raises(SinkUnavailableError, match="connection refused"):
            client.run(ref, first=first, last=last)

        # 3. back (the lost transaction left nothing); it goes down again between two windows
        pg.start()
        assert pg_markers(pg.url, JOB) == [first]
        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT count(*) FROM totals WHERE lg_window > %s", (first,)).fetchone() == (0,)

        def stop_after(event) -> None:
            if event.kind == "cycle_done" and event.window == first + 2:
                pg.stop()

        with pytest.raises(SinkUnavailableError, match=f"window {first + 3}: .*connection refused"):
            client.run(ref, first=first, last=last, on_event=stop_after)
        assert client.catalog.last_checkpoint(JOB).window == first + 2

        # 4. back for good: the failed window is committed once, the rest run
        pg.start()
        res = client.run(ref, first=first, last=last)
        assert res.state == "FINISHED" and res.windows_skipped == 4  # first+3 replayed

        # 5. down while a complete job restarts: its recovery touches the table first
        pg.stop()
        with pytest.raises(SinkUnavailableError, match=f"sink 'totals': PostgreSQL at 127.0.0.1:{pg.port} .*"
                           f"while removing any rows of windows after window {last}, the last checkpoint"):
            client.run(ref, first=first, last=last)
        pg.start()
    finally:
        client.close()
    assert as_dict(pg_rows(pg.url, "totals")) == reference()
    assert pg_markers(pg.url, JOB) == list(range(first, last + 1))


# -- full and read-only disks ------------------------------------------------------------
def test_full_file_sink_disk_then_room_again(small_disk, pipeline_file, tmp_path, spark):
    out = small_disk.path / "totals"
    ref = pipeline_file(f"lg.FileSink({str(out)!r})")
    client = lockgate.connect("embedded", home=str(tmp_path / "home"))
    try:
        first, last = windows(client, ref)
        small_disk.fill()
        with pytest.raises(StorageFullError) as full:
            client.run(ref, first=first, last=last)
        err = full.value
        assert str(err).startswith(f"job '{JOB}', sink 'totals', window {first}: cannot write the staged output to {out}/")
        assert "its disk is full" in str(err) and "Free space there" in str(err)
        assert err.folder.startswith(str(out)) and err.code == "UNAVAILABLE" and is_transient(err)
        assert "\n" not in str(err) and "Exception" not in str(err)
        assert client.list_checkpoints(JOB) == []

        small_disk.free()
        res = client.run(ref, first=first, last=last)
        assert res.state == "FINISHED" and res.windows_run == last - first + 1
    finally:
        client.close()
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    rows = zip(*(table[c].to_pylist() for c in ("window_start", "customer", "n", "total")), strict=True)
    assert as_dict(rows) == reference()
    assert {int(w) for w in table["lg_window"].to_pylist()} <= set(range(first, last + 1))


def test_full_snapshot_and_staging_disks_name_their_folder(small_disk, pipeline_file, tmp_path, spark):
    ref = pipeline_file("lg.CollectSink('totals')")
    small_disk.fill()
    # the snapshots on the full disk: the state snapshot fails first
    snapshots = small_disk.path / "snapshots"
    client = lockgate.connect("embedded", home=str(tmp_path / "home"), snapshots=str(snapshots))
    try:
        first, last = windows(client, ref)
        with pytest.raises(StorageFullError) as full:
            client.run(ref, first=first, last=first)
    finally:
        client.close()
    message = str(full.value)
    assert message.startswith(f"job '{JOB}', window {first}: cannot write the state snapshot of ")
    assert f"to {snapshots}/{JOB}/" in message and "point --snapshots at another disk" in message
    assert not list(snapshots.glob(f"{JOB}/*/*/*.parquet"))  # nothing half-written is left

    # the home on the full disk (its catalog elsewhere): staging the collect sink fails
    home = small_disk.path / "home"
    client = lockgate.connect("embedded", home=str(home), catalog_url=f"sqlite:///{tmp_path / 'catalog.db'}",
                              snapshots=str(tmp_path / "snapshots"))
    try:
        with pytest.raises(StorageFullError) as full:
            client.run(ref, first=first, last=first)
    finally:
        client.close()
    message = str(full.value)
    assert f"cannot write the staged output to {home}/staging/{JOB}/totals/" in message
    assert "point --home (LOCKGATE_HOME), where it is staged, at another disk" in message


def test_driver_writes_and_file_commits_on_a_full_disk(small_disk, tmp_path):
    """The driver's own writes (a small round's staged output, a small state) and a commit
    creating its folder: pyarrow's ENOSPC, not Spark's."""
    table = pa.table({"k": list(range(5000)), "v": [f"value {i}" for i in range(5000)]})
    home = small_disk.path / "home"
    collect = {"kind": "collect", "name": "totals"}
    staged = stage_table(table.slice(0, 3), collect, job=JOB, sink_name="totals", window=7, attempt=1, home=str(home))

    small_disk.fill_inodes()
    committer = committer_for(collect, str(home))
    with pytest.raises(StorageFullError) as full:
        committer.commit(JOB, "totals", 7, staged)
    assert f"window 7: cannot write the window's folder (lg_window=7) to {home}/collect/{JOB}/totals" in str(full.value)
    assert not committer.is_committed(JOB, "totals", 7)

    small_disk.free()
    small_disk.fill()
    with pytest.raises(StorageFullError, match=r"window 8: cannot write the staged output to .*its disk is full"):
        stage_table(table, collect, job=JOB, sink_name="totals", window=8, attempt=1, home=str(home))
    assert not (home / "staging" / JOB / "totals" / "w=0000000008-a1").exists()  # the partial attempt is gone
    store = SnapshotStore(small_disk.path / "snapshots")
    with pytest.raises(StorageFullError, match=r"state snapshot of 'agg.state' to .*its disk is full"):
        store.write_table(store.snapshot_uri(JOB, 8, 1), "agg.state", table)

    small_disk.free()  # room again: the staged window commits, once
    assert committer.commit(JOB, "totals", 7, staged)["replayed"] is False
    assert committer.commit(JOB, "totals", 7, staged)["replayed"] is True


def test_read_only_disk_is_not_worth_retrying(read_only_disk):
    store = SnapshotStore(read_only_disk / "snapshots")
    with pytest.raises(StorageAccessError) as refused:
        store.write_table(store.snapshot_uri(JOB, 3, 1), "agg.state", pa.table({"k": [1]}))
    err = refused.value
    assert f"job '{JOB}', window 3: cannot write the state snapshot of 'agg.state'" in str(err)
    assert "read-only file system" in str(err) and "Make it writable" in str(err)
    assert err.code == "FAILED_PRECONDITION" and not is_transient(err)
