"""Tests of the vectorised Nexmark event generator (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lockgate.nexmark import (
    AUCTION_SCHEMA,
    BID_SCHEMA,
    FIRST_AUCTION_ID,
    FIRST_PERSON_ID,
    PERSON_SCHEMA,
    SCHEMAS,
    STREAMS,
    NexmarkConfig,
    generate,
    generate_all,
    last_base0_auction_id,
    last_base0_person_id,
    stream_event_numbers,
    write_parquet_windows,
)

START = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _us(table: pa.Table, column: str) -> np.ndarray:
    """A timestamp column as int64 epoch microseconds."""
    return table.column(column).combine_chunks().cast(pa.int64()).to_numpy()


def _ints(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy()


def test_schemas() -> None:
    assert SCHEMAS == {"person": PERSON_SCHEMA, "auction": AUCTION_SCHEMA, "bid": BID_SCHEMA}
    config = NexmarkConfig(seed=3, start=START)
    tables = generate_all(config, 0, 500)
    for stream in STREAMS:
        assert tables[stream].schema == SCHEMAS[stream]
    assert BID_SCHEMA.field("date_time").type == pa.timestamp("us", tz="UTC")
    assert AUCTION_SCHEMA.field("expires").type == pa.timestamp("us", tz="UTC")
    # extra stays short.
    for stream in STREAMS:
        lengths = tables[stream].column("extra").combine_chunks().to_numpy(zero_copy_only=False)
        assert max(len(x) for x in lengths) <= 8


def test_same_seed_same_events_different_seed_different() -> None:
    a = generate_all(NexmarkConfig(seed=7, start=START), 0, 3000)
    b = generate_all(NexmarkConfig(seed=7, start=START), 0, 3000)
    c = generate_all(NexmarkConfig(seed=8, start=START), 0, 3000)
    for stream in STREAMS:
        assert a[stream].equals(b[stream])
        assert not a[stream].equals(c[stream])
    assert not np.array_equal(_ints(a["bid"], "price"), _ints(c["bid"], "price"))
    assert a["person"].column("name") != c["person"].column("name")


def test_slicing_independence() -> None:
    config = NexmarkConfig(seed=11, start=START, out_of_order_s=2.5)
    for stream in STREAMS:
        whole = generate(config, stream, 0, 5000)
        parts = pa.concat_tables([generate(config, stream, 0, 1234), generate(config, stream, 1234, 5000)])
        assert whole.equals(parts), stream
        many = pa.concat_tables([generate(config, stream, lo, lo + 77) for lo in range(0, 5000, 77)])
        assert whole.equals(many.slice(0, whole.num_rows)), stream
        # An event far from the start is the same whether generated alone or in a range.
        n = int(stream_event_numbers(config, stream, 10_000_000, 10_000_050)[-1])
        alone = generate(config, stream, n, n + 1)
        around = stream_event_numbers(config, stream, n - 100, n + 100)
        row = int(np.nonzero(around == n)[0][0])
        assert alone.num_rows == 1
        assert alone.equals(generate(config, stream, n - 100, n + 100).slice(row, 1)), stream


def test_proportions_exactly_1_3_46() -> None:
    config = NexmarkConfig(seed=1, start=START)
    for first, blocks in [(0, 1), (0, 20), (50 * 17, 13), (123 * 50, 3)]:
        tables = generate_all(config, first, first + 50 * blocks)
        assert tables["person"].num_rows == blocks
        assert tables["auction"].num_rows == 3 * blocks
        assert tables["bid"].num_rows == 46 * blocks
    # Event kinds by offset within the block of 50.
    assert list(stream_event_numbers(config, "person", 0, 100)) == [0, 50]
    assert list(stream_event_numbers(config, "auction", 0, 100)) == [1, 2, 3, 51, 52, 53]
    assert list(stream_event_numbers(config, "bid", 45, 55)) == [45, 46, 47, 48, 49, 54]


def test_ids_follow_spec_arithmetic() -> None:
    config = NexmarkConfig(seed=2, start=START)
    tables = generate_all(config, 0, 50 * 40)
    persons, auctions = tables["person"], tables["auction"]
    assert list(_ints(persons, "id")) == list(range(FIRST_PERSON_ID, FIRST_PERSON_ID + 40))
    assert list(_ints(auctions, "id")) == list(range(FIRST_AUCTION_ID, FIRST_AUCTION_ID + 120))
    # lastBase0PersonId / lastBase0AuctionId at a few offsets.
    n = np.array([0, 1, 3, 4, 49, 50, 51, 99, 100])
    assert list(last_base0_person_id(n)) == [0, 0, 0, 0, 0, 1, 1, 1, 2]
    assert list(last_base0_auction_id(n)) == [-1, 0, 2, 2, 2, 2, 3, 5, 5]


@pytest.mark.parametrize("first", [0, 2_000_000])
def test_references_only_existing_persons_and_auctions(first: int) -> None:
    config = NexmarkConfig(seed=5, start=START, out_of_order_s=1.0)
    last = first + 200_000
    bids = generate(config, "bid", first, last)
    n = stream_event_numbers(config, "bid", first, last)
    last_auction = last_base0_auction_id(n) + FIRST_AUCTION_ID
    last_person = last_base0_person_id(n) + FIRST_PERSON_ID
    auction, bidder = _ints(bids, "auction"), _ints(bids, "bidder")
    assert (auction <= last_auction).all()
    assert (auction >= FIRST_AUCTION_ID).all()
    assert (bidder <= last_person).all()
    assert (bidder >= FIRST_PERSON_ID).all()
    # Non-hot auctions are among the last NUM_IN_FLIGHT_AUCTIONS (100).
    assert (auction >= np.maximum(last_auction - 100, FIRST_AUCTION_ID)).all()
    # Auctions' sellers exist too.
    auctions = generate(config, "auction", first, last)
    na = stream_event_numbers(config, "auction", first, last)
    seller = _ints(auctions, "seller")
    assert (seller <= last_base0_person_id(na) + FIRST_PERSON_ID).all()
    assert (seller >= FIRST_PERSON_ID).all()


def test_spec_mode_allows_id_leads() -> None:
    config = NexmarkConfig(seed=5, start=START, strict_references=False)
    n = stream_event_numbers(config, "bid", 0, 500_000)
    bids = generate(config, "bid", 0, 500_000)
    ahead = _ints(bids, "auction") - (last_base0_auction_id(n) + FIRST_AUCTION_ID)
    assert ahead.max() > 0 and ahead.max() <= 10
    ahead = _ints(bids, "bidder") - (last_base0_person_id(n) + FIRST_PERSON_ID)
    assert ahead.max() > 0 and ahead.max() <= 10


def test_hot_auctions_bidders_sellers() -> None:
    config = NexmarkConfig(seed=9, start=START)
    first, last = 1_000_000, 1_500_000
    bids = generate(config, "bid", first, last)
    n = stream_event_numbers(config, "bid", first, last)
    hot_auction = (last_base0_auction_id(n) // 100) * 100 + FIRST_AUCTION_ID
    share = (_ints(bids, "auction") == hot_auction).mean()
    # 1/2 go to the hot auction, plus the few random picks that hit it by chance.
    assert 0.48 < share < 0.53
    hot_bidder = np.minimum((last_base0_person_id(n) // 100) * 100 + 1, last_base0_person_id(n))
    share = (_ints(bids, "bidder") == hot_bidder + FIRST_PERSON_ID).mean()
    assert 0.72 < share < 0.78  # 3/4
    auctions = generate(config, "auction", first, last)
    na = stream_event_numbers(config, "auction", first, last)
    hot_seller = (last_base0_person_id(na) // 100) * 100 + FIRST_PERSON_ID
    share = (_ints(auctions, "seller") == hot_seller).mean()
    assert 0.72 < share < 0.78  # 3/4


def test_field_distributions() -> None:
    config = NexmarkConfig(seed=4, start=START)
    tables = generate_all(config, 0, 200_000)
    bids, auctions, persons = tables["bid"], tables["auction"], tables["person"]
    price = _ints(bids, "price")
    assert price.min() >= 100 and price.max() <= 100_000_000
    assert 0.45 < (price < 100 * 1000).mean() < 0.55  # log-uniform over 6 decades
    channels = bids.column("channel").to_pylist()
    hot = sum(c in ("Google", "Facebook", "Baidu", "Apple") for c in channels) / len(channels)
    assert 0.47 < hot < 0.53
    urls = bids.column("url").to_pylist()
    assert all(u.startswith("https://www.nexmark.com/") for u in urls)
    # The same channel always has the same url.
    pairs = {}
    for c, u in zip(channels, urls, strict=True):
        assert pairs.setdefault(c, u) == u
    category = _ints(auctions, "category")
    assert set(np.unique(category)) == {10, 11, 12, 13, 14}
    assert (_ints(auctions, "reserve") > _ints(auctions, "initial_bid")).all()
    assert (_us(auctions, "expires") > _us(auctions, "date_time")).all()
    for card in persons.column("credit_card").to_pylist():
        groups = card.split(" ")
        assert len(groups) == 4 and all(len(g) == 4 and g.isdigit() for g in groups)
    for email in persons.column("email_address").to_pylist():
        assert email.endswith(".com") and "@" in email
    assert set(persons.column("state").to_pylist()) <= {"AZ", "CA", "ID", "OR", "WA", "WY"}
    names = persons.column("name").to_pylist()
    assert all(len(name.split(" ")) == 2 for name in names)
    for column in ("item_name", "description"):
        values = auctions.column(column).to_pylist()
        assert all(v == v.strip() for v in values)
    assert max(len(v) for v in auctions.column("description").to_pylist()) < 100


def test_event_time_and_events_between() -> None:
    config = NexmarkConfig(events_per_second=3, seed=0, start=START, max_events=1000)
    n = np.arange(0, 1000)
    t = config.event_time_us(n)
    start_us = int(START.timestamp()) * 1_000_000
    assert t[0] == start_us
    assert list(t[:4] - start_us) == [0, 333_333, 666_666, 1_000_000]
    assert (np.diff(t) >= 0).all()
    lo_dt, hi_dt = START + timedelta(seconds=10), START + timedelta(seconds=20, microseconds=1)
    first, last = config.events_between(lo_dt, hi_dt)
    lo_us, hi_us = start_us + 10_000_000, start_us + 20_000_001
    expected = np.nonzero((t >= lo_us) & (t < hi_us))[0]
    assert (first, last) == (expected[0], expected[-1] + 1)
    # Boundaries: an event exactly at `end` is excluded, exactly at `start` included.
    assert config.events_between(START, START + timedelta(seconds=1)) == (0, 3)
    # Clipping to [0, max_events) and empty ranges.
    assert config.events_between(START - timedelta(hours=1), START) == (0, 0)
    assert config.events_between(START - timedelta(hours=1), START + timedelta(hours=10)) == (0, 1000)
    assert config.events_between(START + timedelta(hours=9), START + timedelta(hours=10)) == (1000, 1000)
    # Naive datetimes are UTC; ISO strings are accepted.
    naive = NexmarkConfig(events_per_second=3, start=START.replace(tzinfo=None))
    assert naive.start == START
    assert NexmarkConfig.from_iso("2024-03-01T12:00:00Z").start == START
    assert naive.events_between(lo_dt.replace(tzinfo=None), hi_dt.replace(tzinfo=None)) == (first, last)
    # Matches a brute-force scan for a rate that does not divide 1e6.
    config = NexmarkConfig(events_per_second=7, start=START)
    t = config.event_time_us(np.arange(0, 10_000))
    for a, b in [(0, 1), (1, 2), (3, 1000), (999, 1001), (1234, 1234)]:
        s = START + timedelta(milliseconds=a * 37)
        e = START + timedelta(milliseconds=b * 37)
        got = config.events_between(s, e)
        idx = np.nonzero((t >= start_us + a * 37_000) & (t < start_us + b * 37_000))[0]
        assert got == ((idx[0], idx[-1] + 1) if idx.size else (got[0], got[0]))


def test_max_events_clips_generation() -> None:
    config = NexmarkConfig(seed=0, start=START, max_events=120)
    tables = generate_all(config, 0, 1000)
    assert sum(t.num_rows for t in tables.values()) == 120
    assert generate(config, "bid", 500, 1000).num_rows == 0
    with pytest.raises(ValueError):
        generate(config, "nope", 0, 10)


def test_date_time_in_order_without_out_of_order() -> None:
    config = NexmarkConfig(events_per_second=1000, seed=1, start=START)
    for stream in STREAMS:
        n = stream_event_numbers(config, stream, 0, 20_000)
        table = generate(config, stream, 0, 20_000)
        assert np.array_equal(_us(table, "date_time"), config.event_time_us(n))


def test_out_of_order_bounds() -> None:
    spread_s = 3.0
    config = NexmarkConfig(events_per_second=1000, seed=1, start=START, out_of_order_s=spread_s)
    for stream in STREAMS:
        n = stream_event_numbers(config, stream, 0, 100_000)
        nominal = config.event_time_us(n)
        dt = _us(generate(config, stream, 0, 100_000), "date_time")
        assert (dt <= nominal).all()
        assert (dt >= nominal - int(spread_s * 1_000_000)).all()
        if stream == "bid":
            delay = nominal - dt
            assert 1.3e6 < delay.mean() < 1.7e6  # uniform on [0, 3 s]
            assert (np.diff(dt) < 0).any()  # really out of order


def test_write_parquet_windows(tmp_path) -> None:
    config = NexmarkConfig(events_per_second=1000, seed=3, start=START)
    num_events = 35_500
    paths = write_parquet_windows(config, tmp_path, num_events, window_s=10)
    assert set(paths) == set(STREAMS)
    start_us = int(START.timestamp()) * 1_000_000
    for stream in STREAMS:
        assert len(paths[stream]) == 4  # [0,10) [10,20) [20,30) [30,35.5)
        assert [p.split("/")[-1] for p in paths[stream]] == [f"part-{w:06d}.parquet" for w in range(4)]
        assert all(p.startswith(str(tmp_path / stream)) for p in paths[stream])
        total = 0
        for w, path in enumerate(paths[stream]):
            table = pq.read_table(path)
            assert table.schema.equals(SCHEMAS[stream])
            total += table.num_rows
            dt = _us(table, "date_time")  # == nominal time, out_of_order_s == 0
            assert (dt >= start_us + w * 10_000_000).all()
            assert (dt < start_us + (w + 1) * 10_000_000).all()
        expected = generate(config, stream, 0, num_events)
        assert total == expected.num_rows
        assert pq.read_table(tmp_path / stream).num_rows == expected.num_rows
        whole = pa.concat_tables([pq.read_table(p) for p in paths[stream]])
        assert whole.equals(expected)


def test_write_parquet_windows_out_of_order_and_chunks(tmp_path, monkeypatch) -> None:
    import lockgate.nexmark.generator as generator

    monkeypatch.setattr(generator, "_CHUNK_EVENTS", 777)  # force several chunks per window
    config = NexmarkConfig(events_per_second=500, seed=3, start=START, out_of_order_s=2.0)
    paths = write_parquet_windows(config, tmp_path, 12_345, window_s=5, streams=("bid",))
    assert list(paths) == ["bid"]
    assert len(paths["bid"]) == 5  # 24.69 s of nominal time
    start_us = int(START.timestamp()) * 1_000_000
    rows = 0
    for w, path in enumerate(paths["bid"]):
        dt = _us(pq.read_table(path), "date_time")
        rows += dt.size
        assert (dt < start_us + (w + 1) * 5_000_000).all()
        assert (dt >= start_us + w * 5_000_000 - 2_000_000).all()
    assert rows == generate(config, "bid", 0, 12_345).num_rows
