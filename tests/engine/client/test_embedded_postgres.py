"""A pipeline from a PostgreSQL table to a PostgreSQL table, with the catalog on PostgreSQL too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import lockgate

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

URL = {url!r}
pipeline = lg.Pipeline("pg_orders", cycle_window=timedelta(minutes=1))
orders = pipeline.source(lg.PostgresSource(URL, "orders", event_time="ts"), name="orders")
(orders.filter("amount > 0")
       .key_by("customer")
       .window(lg.Tumbling(timedelta(minutes=2)))
       .aggregate(n=lg.count(), total=lg.sum("amount"), name="per_customer")
       .sink(lg.PostgresSink(URL, "customer_totals"), name="totals"))
'''

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def orders(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders, customer_totals, lockgate_sink_commits")
        conn.execute("CREATE TABLE orders (id bigint, customer text, amount bigint, ts timestamptz)")
        rows = [(i, f"c{i % 3}", (i % 7) - 1, T0 + timedelta(seconds=7 * i)) for i in range(100)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s)", rows)
    return rows


def reference(rows):
    out = {}
    for _, customer, amount, ts in rows:
        if amount <= 0:
            continue
        start = T0 + timedelta(minutes=2 * ((ts - T0) // timedelta(minutes=2)))
        n, total = out.get((start, customer), (0, 0))
        out[(start, customer)] = (n + 1, total + amount)
    return out


def test_postgres_to_postgres_with_postgres_catalog(tmp_path, pg_url, orders, spark):
    ref = tmp_path / "pg_pipeline.py"
    ref.write_text(PIPELINE.format(url=pg_url))
    client = lockgate.connect("embedded", home=str(tmp_path / "home"), catalog_url=pg_url)
    try:
        first, last = client.windows_for(f"{ref}:pipeline", T0, T0 + timedelta(seconds=700))
        res = client.run(f"{ref}:pipeline", first=first, last=last + 2)  # two more windows close the last one
        assert res.state == "FINISHED" and res.rows_in == 100
        cps = client.list_checkpoints("pg_orders")
        # the default retention keeps the newest 10 checkpoints
        assert res.windows_run == last + 3 - first
        assert [c.window for c in cps] == list(range(last - 7, last + 3))
    finally:
        client.close()

    with psycopg.connect(pg_url) as conn:
        got = {
            (r[0], r[1]): (r[2], r[3])
            for r in conn.execute("SELECT window_start, customer, n, total FROM customer_totals")
        }
        markers = conn.execute("SELECT count(*) FROM lockgate_sink_commits WHERE job = 'pg_orders'").fetchone()[0]
        # the session's database is shared with the other modules of this test process: this job only
        jobs = conn.execute("SELECT name, state FROM lg_jobs WHERE name = 'pg_orders'").fetchall()
    assert got == reference(orders)
    assert markers == res.windows_run
    assert jobs == [("pg_orders", "FINISHED")]
