"""Updating results: an aggregate over a running aggregate's output, and a PostgreSQL sink
that keeps the current row of each key; checked window by window against pandas over the same
records (never against Lockgate's own operators).

- ``final`` is a running ``max`` per (item, category): an updating stream keyed by both;
- ``per_category`` aggregates it again per category (count, sum, avg, min, max of the current
  maxima): a key's old row is taken back when its new row comes;
- ``histogram`` counts items per running count (``n``): an item moves from group ``n`` to
  ``n + 1``, so groups empty and are deleted (``op = '-D'``); it goes to a collect sink, to a
  keyed PostgreSQL table and to a keyed file sink (a changelog and its compacted current view).

After each window the changelog applied in order (the sink's rows up to that window, the
last row of each key, deleted keys dropped) must equal pandas over every record so far.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.errors import CompileError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W0 = int(T0.timestamp()) // 10
WINDOWS = 6


def _write_events(folder: Path) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for w in range(WINDOWS):
        n = 40
        df = pd.DataFrame({
            "item": rng.integers(0, 12, n).astype("int64"),
            "price": rng.integers(1, 500, n).astype("int64"),
            "ts": pd.to_datetime(T0.timestamp() * 1e6 + w * 10e6 + rng.integers(0, 10_000_000, n), unit="us",
                                 utc=True).astype("datetime64[us, UTC]"),
        })
        df["category"] = df["item"] % 3
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), folder / f"part-{w}.parquet")
        parts.append(df.assign(window=W0 + w))
    return pd.concat(parts, ignore_index=True)


def updates_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("updates", cycle_window=timedelta(seconds=10), parallelism=2)
    events = p.source(lg.FileSource(os.environ["LG_TEST_UPDATES_PATH"], event_time="ts"), name="events")
    final = events.key_by("item", "category").aggregate(top=lg.max("price"), name="final")
    (
        final.key_by("category")
        .aggregate(items=lg.count(), total=lg.sum("top"), mean=lg.avg("top"), lo=lg.min("top"), hi=lg.max("top"),
                   name="per_category")
        .sink(lg.CollectSink("per_category"), name="per_category_out")
    )
    counts = events.key_by("item").aggregate(n=lg.count(), name="counts")
    histogram = counts.key_by("n").aggregate(items=lg.count(), name="histogram")
    histogram.sink(lg.CollectSink("histogram"), name="histogram_out")
    histogram.sink(lg.PostgresSink(os.environ["LG_TEST_UPDATES_PG"], os.environ["LG_TEST_UPDATES_TABLE"], key=["n"]),
                   name="histogram_pg")
    histogram.sink(lg.FileSink(os.environ["LG_TEST_UPDATES_OUT"], key=["n"]), name="histogram_files")
    return p


def _current(changelog: pd.DataFrame, keys: list[str], upto: int) -> pd.DataFrame:
    """The table a changelog describes after window ``upto``: each key's last row, deletes dropped."""
    rows = changelog[changelog["lg_window"] <= upto].sort_values("lg_window", kind="stable")
    last = rows.groupby(keys, as_index=False).tail(1)
    return last[last["op"] != "-D"].drop(columns=["op", "lg_window", "as_of"]).sort_values(keys).reset_index(drop=True)


def _want_per_category(events: pd.DataFrame, upto: int) -> pd.DataFrame:
    final = events[events["window"] <= upto].groupby(["item", "category"], as_index=False)["price"].max()
    out = final.groupby("category").agg(items=("price", "size"), total=("price", "sum"), mean=("price", "mean"),
                                        lo=("price", "min"), hi=("price", "max")).reset_index()
    return out.sort_values("category").reset_index(drop=True)


def _want_histogram(events: pd.DataFrame, upto: int) -> pd.DataFrame:
    counts = events[events["window"] <= upto].groupby("item").size().rename("n").reset_index()
    out = counts.groupby("n").size().rename("items").reset_index()
    return out.sort_values("n").reset_index(drop=True)


def _same(got: pd.DataFrame, want: pd.DataFrame, where: str) -> None:
    got = got[list(want.columns)].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=False, rtol=1e-12, obj=where)


def _file_view(folder: str) -> pd.DataFrame:
    """A keyed FileSink's compacted current view."""
    view = pq.read_table(Path(folder) / "_current" / "current.parquet").to_pandas()
    return view[["n", "items"]].sort_values("n").reset_index(drop=True)


def _file_changelog(folder: str) -> pd.DataFrame:
    import pyarrow.dataset as ds

    return ds.dataset(folder, format="parquet", partitioning="hive").to_table().to_pandas()


def _pg_table(url: str, table: str) -> pd.DataFrame:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT n, items FROM {table} ORDER BY n").fetchall()
    return pd.DataFrame(rows, columns=["n", "items"])


@pytest.fixture
def updates_env(tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    events = _write_events(tmp_path / "events")
    table = f"histogram_{os.getpid()}_{abs(hash(str(tmp_path))) % 10_000}"
    monkeypatch.setenv("LG_TEST_UPDATES_PATH", str(tmp_path / "events"))
    monkeypatch.setenv("LG_TEST_UPDATES_PG", pg_url)
    monkeypatch.setenv("LG_TEST_UPDATES_TABLE", table)
    monkeypatch.setenv("LG_TEST_UPDATES_OUT", str(tmp_path / "histogram_files"))
    yield events
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        for bookkeeping in ("lockgate_sink_commits", "lockgate_sink_history"):
            if conn.execute("SELECT to_regclass(%s)", (bookkeeping,)).fetchone()[0] is not None:
                conn.execute(f"DELETE FROM {bookkeeping} WHERE sink = %s", (f"histogram_pg@{table}",))


def test_an_aggregate_over_updates_takes_back_old_rows_and_deletes_empty_groups(
    spark, tmp_path: Path, pg_url: str, updates_env: pd.DataFrame
) -> None:
    events = updates_env
    ref = f"{__file__}:updates_pipeline"
    last = W0 + WINDOWS - 1
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        client.run(ref, first=W0, last=last)
        per_category = client.read_sink("updates", "per_category").to_pandas()
        histogram = client.read_sink("updates", "histogram").to_pandas()
        for w in range(W0, last + 1):
            _same(_current(per_category, ["category"], w), _want_per_category(events, w), f"per_category @ {w}")
            _same(_current(histogram, ["n"], w), _want_histogram(events, w), f"histogram @ {w}")
        assert (histogram["op"] == "-D").any(), "no group emptied: the data do not exercise deletes"
        table, files = os.environ["LG_TEST_UPDATES_TABLE"], os.environ["LG_TEST_UPDATES_OUT"]
        _same(_pg_table(pg_url, table), _want_histogram(events, last), "PostgreSQL table")
        _same(_file_view(files), _want_histogram(events, last), "the file sink's current view")
        changelog = _file_changelog(files)  # the window folders: the changelog, op included
        assert set(changelog["op"]) == {"+U", "-D"}
        _same(_current(changelog, ["n"], last), _want_histogram(events, last), "the file sink's changelog")

        # a restore to an earlier window puts back the rows later windows replaced or deleted
        target = W0 + 2
        client.restore("updates", target)
        _same(_pg_table(pg_url, table), _want_histogram(events, target), f"PostgreSQL table after restore to {target}")
        _same(_file_view(files), _want_histogram(events, target), f"the current view after restore to {target}")
        client.run(ref, first=target + 1, last=last)
        _same(_pg_table(pg_url, table), _want_histogram(events, last), "PostgreSQL table after the rerun")
        _same(_file_view(files), _want_histogram(events, last), "the current view after the rerun")
        again = client.read_sink("updates", "histogram").to_pandas()
        _same(_current(again, ["n"], last), _want_histogram(events, last), "histogram after the rerun")


def _counts_then(consume) -> lg.Pipeline:
    """A running count per item (an updating stream keyed by item), then ``consume(counts)``."""
    p = lg.Pipeline("bad_updates", cycle_window=timedelta(seconds=10))
    events = p.source(lg.FileSource(os.environ["LG_TEST_UPDATES_PATH"], event_time="ts"), name="events")
    consume(events.key_by("item").aggregate(n=lg.count(), name="counts"))
    return p


BAD = {
    "filter_over_updates": lambda c: c.filter("n > 2", name="busy").sink(lg.CollectSink("busy"), name="busy_out"),
    "select_dropping_the_key": lambda c: c.select("n", name="no_key").sink(lg.CollectSink("n"), name="n_out"),
    "sink_keyed_by_a_missing_column": lambda c: c.sink(
        lg.PostgresSink("postgresql://x@127.0.0.1/db", "t", key=["bidder"]), name="pg"),
}


@pytest.mark.parametrize(("factory", "operator", "message"), [
    ("filter_over_updates", "busy", r"filter\(\) over an updating stream .*'counts' replaces its rows by key \(item\)"),
    ("select_dropping_the_key", "no_key", r"updates rows by key \(item\) but drops item"),
    ("sink_keyed_by_a_missing_column", "pg", r"the sink's key column 'bidder' is not in its input"),
])
def test_what_would_misread_updates_is_refused_at_compile_time(
    spark, tmp_path: Path, updates_env: pd.DataFrame, factory: str, operator: str, message: str
) -> None:
    from lockgate.runtime.compiler import compile_pipeline

    with pytest.raises(CompileError, match=message) as err:
        compile_pipeline(_counts_then(BAD[factory]), spark)
    assert err.value.operator == operator
