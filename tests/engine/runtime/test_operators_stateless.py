"""The stateless transforms (select, with_column, filter, map_batches, sql, union), run
through the embedded client and checked row for row against pandas over the same
Nexmark events; every record comes out in the cycle window it was read in.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lockgate as lg

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (
    T0_ISO,
    W0,
    aggregate,
    assert_same_rows,
    embedded_client,
    nexmark_events,
    read_sink,
)

SOURCE = {"events_per_second": 61, "seed": 19}
LAST = W0 + 2
MAPPED_SCHEMA = "auction BIGINT, price BIGINT, cents BIGINT, date_time TIMESTAMP"


def add_cents(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Bids over 1000 only, with the price in cents (pyarrow.compute, batch at a time)."""
    batch = batch.filter(pc.greater(batch.column("price"), 1000))
    return pa.RecordBatch.from_arrays(
        [batch.column("auction"), batch.column("price"), pc.multiply(batch.column("price"), 100),
         batch.column("date_time")],
        names=["auction", "price", "cents", "date_time"],
    )  # fmt: skip


def stateless_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("op_stateless", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    persons = p.source(lg.NexmarkSource("person", start=T0_ISO, **SOURCE), name="persons")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    (
        bids.filter("price % 3 = 0", name="div3")
        .select("auction", "bidder", "price", "date_time", "price * 2 AS double_price", name="projected")
        .with_column("price_eur", "price * 0.9", name="eur")
        .with_column("price", "price + 1", name="bumped")  # replaces a column
        .sink(lg.CollectSink("projected"), name="projected_out")
    )
    bids.map_batches(add_cents, schema=MAPPED_SCHEMA, name="cents").sink(
        lg.CollectSink("cents"), name="cents_out"
    )
    (
        bids.key_by("auction")
        .sql("SELECT auction, count(*) AS n, max(price) AS top FROM input GROUP BY auction", name="per_cycle")
        .sink(lg.CollectSink("per_cycle"), name="per_cycle_out")
    )
    # a second sql operator: each sees its own input as the view `input`
    (
        persons.sql(
            "SELECT id, upper(name) AS name, date_time FROM input WHERE id % 2 = 0", name="even"
        ).sink(lg.CollectSink("even"), name="even_out")
    )
    (
        persons.select("id", "date_time", "'person' AS kind", name="person_ids")
        .union(auctions.select("id", "date_time", "'auction' AS kind", name="auction_ids"), name="ids")
        .sink(lg.CollectSink("ids"), name="ids_out")
    )
    return p


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory):
    yield from embedded_client(tmp_path_factory.mktemp("op_stateless"))


@pytest.fixture(scope="module")
def run(client):
    return client.run(f"{__file__}:stateless_pipeline", first=W0, last=LAST)


def events(stream):
    df = nexmark_events(stream, W0, LAST, **SOURCE)
    df["date_time"] = df["ts_us"]
    df["lg_window"] = df["cycle"]
    return df


def test_select_with_column_filter(client, run):
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
    bids = events("bid")
    assert run.rows_in == len(bids) + len(events("person")) + len(events("auction"))
    expected = bids[bids["price"] % 3 == 0].assign(
        double_price=lambda f: f["price"] * 2,
        price_eur=lambda f: f["price"] * 0.9,
        price=lambda f: f["price"] + 1,
    )
    cols = ["auction", "bidder", "price", "date_time", "double_price", "price_eur", "lg_window"]
    result = read_sink(client, "op_stateless", "projected")
    assert list(result.columns) == cols
    assert_same_rows(
        result, expected[cols], ["date_time"], approx=["price_eur"], what="select/with_column/filter"
    )


def test_map_batches(client, run):
    bids = events("bid")
    expected = bids[bids["price"] > 1000].assign(cents=lambda f: f["price"] * 100)
    cols = ["auction", "price", "cents", "date_time", "lg_window"]
    result = read_sink(client, "op_stateless", "cents")
    assert list(result.columns) == cols
    assert 0 < len(expected) < len(bids)
    assert_same_rows(result, expected[cols], ["date_time"], what="map_batches")


def test_sql_per_cycle(client, run):
    bids = events("bid")
    expected = aggregate(bids, ["lg_window", "auction"], {"n": ("count", None), "top": ("max", "price")})
    assert_same_rows(
        read_sink(client, "op_stateless", "per_cycle"), expected, ["lg_window", "auction"], what="sql"
    )

    persons = events("person")
    expected = persons[persons["id"] % 2 == 0].assign(name=lambda f: f["name"].str.upper())
    cols = ["id", "name", "date_time", "lg_window"]
    assert_same_rows(read_sink(client, "op_stateless", "even"), expected[cols], ["id"], what="second sql")


def test_union(client, run):
    expected = pd.concat(
        [events("person").assign(kind="person"), events("auction").assign(kind="auction")], ignore_index=True
    )
    cols = ["id", "date_time", "kind", "lg_window"]
    assert_same_rows(read_sink(client, "op_stateless", "ids"), expected[cols], ["kind", "id"], what="union")
