"""A PostgreSQL source that goes down: one clear Lockgate error, never a driver traceback,
and the windows it could not read run exactly once when it is back.

The database is the private server of the ``private_postgres`` fixture, never the
machine's; the file sink's output is compared row for row with a plain-Python computation
over the input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg
import pyarrow.dataset as ds
import pytest

import lockgate
from lockgate.errors import SourceRefusedError, SourceUnavailableError
from lockgate.runtime.postgres import read_slice
from lockgate.server.runner import is_transient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = "pg_source"

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(minutes=1))
orders = pipeline.source(lg.PostgresSource({url!r}, "orders", event_time="ts"), name="orders")
(orders.key_by("customer")
       .window(lg.Tumbling(timedelta(minutes=1)))
       .aggregate(n=lg.count(), total=lg.sum("amount"), name="per_customer")
       .sink(lg.FileSink({out!r}), name="totals"))
'''


def input_rows() -> list[tuple[int, str, int, datetime]]:
    """30 orders over 3 minutes."""
    return [(i, f"c{i % 4}", i % 9, T0 + timedelta(seconds=6 * i)) for i in range(30)]


def reference() -> dict[tuple[datetime, str], tuple[int, int]]:
    """(minute, customer) -> (count, total), in plain Python."""
    out: dict[tuple[datetime, str], tuple[int, int]] = {}
    for _, customer, amount, ts in input_rows():
        start = ts.replace(second=0)
        n, total = out.get((start, customer), (0, 0))
        out[(start, customer)] = (n + 1, total + amount)
    return out


@pytest.fixture
def pg(private_postgres):
    with psycopg.connect(private_postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint, customer text, amount bigint, ts timestamptz)")
        with conn.cursor().copy("COPY orders FROM STDIN") as copy:
            for row in input_rows():
                copy.write_row(row)
    return private_postgres


def test_source_down_mid_job_one_line_then_exactly_once(pg, tmp_path, spark):
    home, out = tmp_path / "home", tmp_path / "totals"
    path = tmp_path / f"{JOB}.py"
    path.write_text(PIPELINE.format(job=JOB, url=pg.url, out=str(out)))
    ref = f"{path}:pipeline"
    client = lockgate.connect("embedded", home=str(home))
    try:
        first, last = client.windows_for(ref, T0, T0 + timedelta(minutes=3))
        last += 1  # one more window closes the last tumbling window
        assert client.run(ref, first=first, last=first).state == "FINISHED"

        pg.stop()
        proc = subprocess.run(
            [sys.executable, "-m", "lockgate", "--home", str(home), "run", ref,
             "--from-window", str(first + 1), "--to-window", str(last), "--no-progress"],
            capture_output=True, text=True, timeout=240, env={**os.environ, "LOCKGATE_HOME": str(home)},
        )
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, proc.stderr
        message = lines[0]
        assert message.startswith("lockgate: error: "), message
        assert f"PostgreSQL source table 'orders' at 127.0.0.1:{pg.port} is unavailable" in message
        assert "connection refused" in message and "run the job again" in message
        assert "Traceback" not in proc.stderr and "adbc" not in proc.stderr.lower()
        assert [c.window for c in client.list_checkpoints(JOB)] == [first]  # the first window stays

        pg.start()
        res = client.run(ref, first=first + 1, last=last)
        assert res.state == "FINISHED" and res.windows_run == last - first
        assert [c.window for c in client.list_checkpoints(JOB)][-1] == last
    finally:
        client.close()
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    got: dict[tuple[datetime, str], tuple[int, int]] = {}
    for start, customer, n, total in zip(*(table[c].to_pylist() for c in ("window_start", "customer", "n", "total")),
                                         strict=True):
        start = (start if start.tzinfo else start.replace(tzinfo=UTC)).astimezone(UTC)
        assert (start, customer) not in got, f"duplicate row for {(start, customer)}"
        got[(start, customer)] = (int(n), int(total))
    assert got == reference()


def test_source_refusing_is_not_retried(pg):
    with pytest.raises(SourceRefusedError) as refused:
        read_slice(pg.url.replace("postgres@", "nobody@"), "orders", "ts", T0, T0 + timedelta(minutes=1))
    assert 'role "nobody" does not exist' in str(refused.value) and not is_transient(refused.value)
    pg.stop()
    with pytest.raises(SourceUnavailableError) as down:
        read_slice(pg.url, "orders", "ts", T0, T0 + timedelta(minutes=1))
    assert is_transient(down.value) and "\n" not in str(down.value)
