"""The workload of the lakehouse sink tests (``test_sink_delta.py``, ``test_sink_iceberg.py``)
and its independent reference.

Orders (id, customer, amount, event time) over four one-minute cycle windows, read by a
``FileSource``. The pipeline writes three streams to the sink under test:

- ``kept``: the positive orders, appended (an append-only stream);
- ``totals``: a running count and sum per customer, keyed by customer (an updating stream:
  each window replaces the rows of the customers it touched);
- ``hist``: how many customers have each count ``n``, keyed by ``n``: an aggregate over the
  updating totals, whose groups empty as customers move on to ``n + 1`` (``op = '-D'``
  rows, which delete their key).

The reference computes each table after window ``W`` with pandas from the same rows, sharing
nothing with Spark or Lockgate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lockgate.runtime.sinks import stage_table

T0 = datetime(2026, 4, 1, 8, 0, tzinfo=UTC)
FIRST = int(T0.timestamp()) // 60
WINDOWS = 4

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(minutes=1))
orders = pipeline.source(lg.FileSource({src!r}, event_time="ts"), name="orders")
kept = orders.filter("amount > 0")
kept.sink({kept}, name="kept")
totals = kept.key_by("customer").aggregate(n=lg.count(), total=lg.sum("amount"), name="totals")
totals.sink({totals}, name="totals_sink")
totals.key_by("n").aggregate(customers=lg.count(), name="hist").sink({hist}, name="hist_sink")
'''


def orders() -> pd.DataFrame:
    """36 orders, 9 a window, over 6 customers; some not positive."""
    rows = [(i, f"c{(i * 7) % 6}", (i % 5) - 1, T0 + timedelta(seconds=20 * (i // 3) + i % 3)) for i in range(36)]
    df = pd.DataFrame(rows, columns=["id", "customer", "amount", "ts"])
    df["ts"] = df["ts"].astype("datetime64[us, UTC]")
    return df


def write_pipeline(root: Path, job: str, kept: str, totals: str, hist: str) -> str:
    """Write the input and the pipeline file under ``root``; return the pipeline reference."""
    src = root / "orders"
    src.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(orders(), preserve_index=False), src / "part-0.parquet")
    path = root / f"{job}.py"
    path.write_text(PIPELINE.format(job=job, src=str(src), kept=kept, totals=totals, hist=hist))
    return f"{path}:pipeline"


def _kept(upto: int) -> pd.DataFrame:
    df = orders()
    df = df[df["amount"] > 0].copy()
    df["lg_window"] = (df["ts"].astype("int64") // 60_000_000).astype("int64")
    return df[df["lg_window"] <= upto]


def kept_rows(upto: int) -> list[tuple]:
    """The appended table after window ``upto``: (id, customer, amount, ts, lg_window), sorted."""
    df = _kept(upto)
    return sorted((int(r.id), r.customer, int(r.amount), r.ts.to_pydatetime(), int(r.lg_window))
                  for r in df.itertuples())


def totals_rows(upto: int) -> list[tuple]:
    """The keyed totals after window ``upto``: (customer, n, total, lg_window: the customer's
    last window), sorted."""
    g = _kept(upto).groupby("customer").agg(n=("id", "size"), total=("amount", "sum"), last=("lg_window", "max"))
    return sorted((c, int(r["n"]), int(r["total"]), int(r["last"])) for c, r in g.iterrows())


def hist_rows(upto: int) -> list[tuple]:
    """The keyed histogram after window ``upto``: (n, customers), sorted; no row for a count
    no customer has."""
    g = _kept(upto).groupby("customer").size()
    return sorted((int(n), int(c)) for n, c in g.value_counts().items())


def table_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """A read-back table's rows as sorted tuples of ``columns`` (instants as UTC datetimes)."""
    cols = []
    for c in columns:
        values = table[c].to_pylist()
        if pa.types.is_timestamp(table[c].type):
            values = [v if v is None or v.tzinfo else v.replace(tzinfo=UTC) for v in values]
            values = [v if v is None else v.astimezone(UTC) for v in values]
        cols.append(values)
    return sorted(zip(*cols, strict=True))


def check_tables(read, upto: int) -> None:
    """The three tables (``read(name) -> pa.Table``) equal the reference after window ``upto``."""
    assert table_rows(read("kept"), ["id", "customer", "amount", "ts", "lg_window"]) == kept_rows(upto)
    assert table_rows(read("totals"), ["customer", "n", "total", "lg_window"]) == totals_rows(upto)
    assert table_rows(read("hist"), ["n", "customers"]) == hist_rows(upto)


def rows(window: int, n: int = 3) -> pa.Table:
    """``n`` rows ``(id, name)`` of window ``window``, for a committer on its own."""
    return pa.table({"id": pa.array(range(window * 10, window * 10 + n), pa.int64()),
                     "name": [f"r{window}-{i}" for i in range(n)]})


def staged(home: Path, sink: dict, window: int, table: pa.Table, job: str, attempt: int = 1) -> dict:
    """``table`` staged as window ``window`` of sink ``out`` of ``job``, as a worker stages it."""
    return stage_table(table, sink, job=job, sink_name="out", window=window, attempt=attempt, home=str(home))
