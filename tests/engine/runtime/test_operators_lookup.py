"""Lookup joins (Nexmark q13's bounded side input): bids enriched with a dimension table of
files or a PostgreSQL table, read whole every round, checked against a pandas merge. A change
to the table shows from the next window on; ``how="left"`` keeps bids with no row."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.errors import CompileError

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import T0_ISO, W0, assert_same_rows, embedded_client, nexmark_events, read_sink

SOURCE = {"events_per_second": 50, "seed": 13}
LAST = W0 + 3
COLUMNS = ["auction", "bidder", "price", "date_time"]


def enriched() -> lg.Pipeline:
    p = lg.Pipeline("op_lookup", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids").select(*COLUMNS, name="cols")
    table = lg.FileTable(os.environ["LG_TEST_LOOKUP_FILES"])
    bids.lookup(table, left_on=["auction"], right_on=["id"], name="with_label").sink(
        lg.CollectSink("inner"), name="inner_out")
    bids.lookup(table, left_on=["auction"], right_on=["id"], how="left", name="maybe_label").sink(
        lg.CollectSink("left"), name="left_out")
    pg = lg.PostgresTable(os.environ["LG_TEST_LOOKUP_PG"], "lookup_bidders")
    bids.lookup(pg, left_on=["bidder"], right_on=["bidder"], name="with_tier").sink(
        lg.CollectSink("tiers"), name="tiers_out")
    return p


def _labels(folder: Path, version: int) -> pd.DataFrame:
    """Labels for every other auction id of the data; version 2 relabels them."""
    ids = list(range(1000, 1400, 2))
    df = pd.DataFrame({"id": ids, "label": [f"v{version}-{i % 7}" for i in ids]})
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), folder / "labels.parquet")
    return df


@pytest.fixture(scope="module")
def setup(spark, tmp_path_factory, pg_url):
    root = tmp_path_factory.mktemp("op_lookup")
    folder = root / "labels"
    folder.mkdir()
    tiers = pd.DataFrame({"bidder": list(range(1000, 1100)), "tier": [f"t{b % 3}" for b in range(1000, 1100)]})
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS lookup_bidders")
        conn.execute("CREATE TABLE lookup_bidders (bidder BIGINT PRIMARY KEY, tier TEXT)")
        with conn.cursor().copy("COPY lookup_bidders (bidder, tier) FROM STDIN") as copy:
            for b, t in tiers.itertuples(index=False):
                copy.write_row((b, t))
    env = {"LG_TEST_LOOKUP_FILES": str(folder), "LG_TEST_LOOKUP_PG": pg_url}
    os.environ.update(env)
    try:
        for client in embedded_client(root / "home"):
            v1 = _labels(folder, 1)
            assert client.run(f"{__file__}:enriched", first=W0, last=W0 + 1).state == "FINISHED"
            v2 = _labels(folder, 2)  # the table changes between two rounds
            assert client.run(f"{__file__}:enriched", first=W0 + 2, last=LAST).state == "FINISHED"
            yield client, v1, v2, tiers
    finally:
        for k in env:
            os.environ.pop(k, None)


def _bids() -> pd.DataFrame:
    df = nexmark_events("bid", W0, LAST, **SOURCE)
    df["date_time"] = df["ts_us"]
    return df


def _expected(how: str, v1: pd.DataFrame, v2: pd.DataFrame) -> pd.DataFrame:
    bids = _bids()
    parts = []
    for labels, cycles in ((v1, (W0, W0 + 1)), (v2, (W0 + 2, LAST))):
        mine = bids[bids["cycle"].between(*cycles)][COLUMNS]
        parts.append(mine.merge(labels, left_on="auction", right_on="id", how=how))
    out = pd.concat(parts)
    out["id"] = out["id"].astype("Int64")
    return out


def test_inner_lookup_reads_the_table_as_it_is_each_round(setup):
    client, v1, v2, _ = setup
    want = _expected("inner", v1, v2)
    got = read_sink(client, "op_lookup", "inner")
    assert_same_rows(got, want, ["auction", "bidder", "date_time", "price"], what="inner lookup")
    assert got["label"].str.startswith("v1").any() and got["label"].str.startswith("v2").any()


def test_left_lookup_keeps_records_without_a_row(setup):
    client, v1, v2, _ = setup
    want = _expected("left", v1, v2)
    got = read_sink(client, "op_lookup", "left")
    assert_same_rows(got, want, ["auction", "bidder", "date_time", "price"], what="left lookup")
    assert got["label"].isna().sum() > 10


def test_lookup_against_a_postgres_table(setup):
    client, _, _, tiers = setup
    want = _bids()[COLUMNS].merge(tiers, on="bidder")
    got = read_sink(client, "op_lookup", "tiers")
    assert_same_rows(got, want.rename(columns={}), ["auction", "bidder", "date_time", "price"], what="tiers")
    assert "bidder_right" in got.columns  # the table's key column, renamed on the clash


def test_lookup_errors_name_the_problem(spark, tmp_path):
    from lockgate.runtime.compiler import compile_pipeline

    p = lg.Pipeline("bad_lookup", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    with pytest.raises(CompileError, match="'inner' or 'left'"):
        bids.lookup(lg.FileTable(str(tmp_path)), on="auction", how="outer")
    with pytest.raises(CompileError, match="key columns"):
        bids.lookup(lg.FileTable(str(tmp_path)))
    bids.lookup(lg.FileTable(str(tmp_path)), on="auction", name="empty").sink(lg.CollectSink("x"))
    with pytest.raises(CompileError, match="lookup table .* holds no Parquet files") as err:
        compile_pipeline(p, spark)
    assert err.value.operator == "empty"
