"""Catch-up groups: several due windows run by the worker in one go, each still committed on
its own with its own checkpoint row.

The same pipeline (a tumbling aggregate, a deduplication with ``within``, a running
aggregate) runs over the same Nexmark bids one window per round (``LOCKGATE_CATCHUP=off``)
and in groups of three; every sink and the state at the last window must be the same (the
operator tests check the grouped default against pandas references). That plan is not
window-exact: each window of its groups is a round with its own snapshot. A window-exact plan's
group runs in one pass with one snapshot, and the checkpoints before it are derived: restoring
to one replays the group's windows with sinks muted, and the run that follows writes exactly
what an uninterrupted run wrote.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.control.catchup import AUTO_MAX, GROWTH, GroupSizer
from lockgate.errors import InvalidArgumentError, StateNotFoundError

T0_ISO = "2026-01-01T00:00:00"
W0 = 1767225600 // 10
LAST = W0 + 8
SINKS = ("per_auction", "first_bids", "totals")


def catchup_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("catchup", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, events_per_second=40, seed=5), name="bids")
    (
        bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=20)))
        .aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
        .sink(lg.CollectSink("per_auction"), name="per_auction_out")
    )
    (
        bids.key_by("bidder").deduplicate(within=timedelta(seconds=25), name="first_bids")
        .sink(lg.CollectSink("first_bids"), name="first_bids_out")
    )
    (
        bids.key_by("bidder").aggregate(n=lg.count(), spent=lg.sum("price"), name="totals")
        .sink(lg.CollectSink("totals"), name="totals_out")
    )
    return p


REF = f"{__file__}:catchup_pipeline"


def _rows(table: pa.Table) -> list[tuple]:
    cols = sorted(table.column_names)
    # (is null, value): an outer join's unmatched side is null, and None does not sort
    return sorted(tuple((True, 0) if row[c] is None else (False, row[c]) for c in cols)
                  for row in table.select(cols).to_pylist())


def _outputs(client, job: str) -> dict[str, list[tuple]]:
    return {s: _rows(client.read_sink(job, s)) for s in SINKS}


# -- the group size setting ------------------------------------------------------------------
def test_group_sizer_parses_the_setting_and_refuses_nonsense():
    auto = GroupSizer.from_setting("auto")
    assert auto.adaptive and auto.next(1) == 1 and auto.next(100) == auto.size
    assert GroupSizer.from_setting("off").next(50) == 1
    fixed = GroupSizer.from_setting("5")
    assert (fixed.next(3), fixed.next(50)) == (3, 5)
    fixed.observe(5, 100.0)
    assert fixed.next(50) == 5  # a fixed size does not adapt
    for bad in ("0", "-2", "many"):
        with pytest.raises(InvalidArgumentError, match="LOCKGATE_CATCHUP"):
            GroupSizer.from_setting(bad)


def test_a_run_refuses_a_bad_catchup_before_anything_runs(spark, tmp_path):
    client = lg.connect("embedded", home=str(tmp_path / "home"))
    try:
        for bad in ("0", "lots", 0, 10_001):
            with pytest.raises(InvalidArgumentError, match=r"catchup=.*'auto'.*'off'.*1 to 10000"):
                client.run(REF, first=W0, last=W0, catchup=bad)
        with pytest.raises(lg.JobNotFoundError):
            client.get_job("catchup")  # nothing was registered
    finally:
        client.close()
    assert lg.check_catchup(" AUTO ") == "auto" and lg.check_catchup(3) == "3" and lg.check_catchup("off") == "off"


def test_adaptive_groups_grow_while_windows_are_cheap_and_shrink_when_slow():
    sizer = GroupSizer.from_setting("auto")
    start = sizer.size
    sizer.observe(start, 0.1 * start)  # 0.1 s a window: grows, at most GROWTH times
    assert sizer.size == GROWTH * start
    sizer = GroupSizer.from_setting("auto")
    sizer.observe(start, 1.0 * start)  # 1 s a window: about TARGET_S of them (below the growth cap)
    assert sizer.size == 10
    for _ in range(10):
        sizer.observe(sizer.size, 0.01 * sizer.size)
    assert sizer.size == AUTO_MAX
    sizer.observe(sizer.size, 5.0 * sizer.size)  # 5 s a window: two windows a group
    assert sizer.size == 2


def test_an_adaptive_group_takes_a_small_tail_along():
    sizer = GroupSizer.from_setting("auto")
    sizer.size = AUTO_MAX
    assert sizer.next(AUTO_MAX + AUTO_MAX // 4) == AUTO_MAX + AUTO_MAX // 4  # not 64, then a group of 16
    assert sizer.next(AUTO_MAX + AUTO_MAX // 4 + 1) == AUTO_MAX
    assert sizer.next(3) == 3
    fixed = GroupSizer.from_setting("8")
    assert fixed.next(9) == 8  # a size the run gave is the most a group takes


def test_a_run_sizes_its_first_group_from_what_the_jobs_windows_took():
    sizer = GroupSizer.from_setting("auto")
    sizer.seed(None)  # no history: the usual first group
    assert sizer.size == 4
    sizer.seed(0.5)  # half a second a window: about TARGET_S of them
    assert sizer.size == 20
    sizer.seed(0.001)
    assert sizer.size == AUTO_MAX
    sizer.seed(30.0)  # slow windows: never below the usual first group
    assert sizer.size == 4
    fixed = GroupSizer.from_setting("5")
    fixed.seed(0.01)
    assert fixed.size == 5  # a size the run gave is kept


def test_the_next_run_of_a_job_starts_with_a_group_its_history_sizes(spark, tmp_path, monkeypatch):
    """A job's second run (the next queued DAG run) takes its backlog in one group: its first
    group is sized from the first run's windows, not ramped up from four again."""
    ref = f"{__file__}:one_pass_pipeline"
    monkeypatch.setenv("LOCKGATE_CATCHUP", "auto")
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        client.run(ref, first=W0, last=W0 + 5)  # no history: groups of 4, then 2
        assert [c.timings.get("group") for c in _cycles(client, W0, W0 + 5)] == [4] * 4 + [2] * 2
        client.run(ref, first=W0 + 6, last=LAST)
        assert [c.timings.get("group") for c in _cycles(client, W0 + 6, LAST)] == [3] * 3


def _cycles(client, first: int, last: int) -> list:
    cycles = [c for c in client.list_cycles("onepass", limit=50).cycles if first <= c.window <= last]
    return sorted(cycles, key=lambda c: c.window)


# -- grouped runs against one window per round ----------------------------------------------
@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """The pipeline run one window per round and in groups of three (deltas folded often)."""
    mp = pytest.MonkeyPatch()
    homes = {mode: Path(tmp_path_factory.mktemp(f"catchup_{mode}")) for mode in ("off", "3")}
    clients = {}
    try:
        for mode, home in homes.items():
            mp.setenv("LOCKGATE_CATCHUP", "auto")  # the run's catchup= wins over the default
            mp.setenv("LOCKGATE_STATE_MAX_DELTAS", "1")
            client = lg.connect("embedded", home=str(home))
            client.run(REF, first=W0, last=LAST, catchup=mode if mode == "off" else int(mode))
            clients[mode] = client
        mp.setenv("LOCKGATE_CATCHUP", "3")
        yield clients
    finally:
        mp.undo()
        for client in clients.values():
            client.close()


def test_a_grouped_run_writes_what_one_window_per_round_writes(runs):
    single, grouped = _outputs(runs["off"], "catchup"), _outputs(runs["3"], "catchup")
    assert all(single[s] for s in SINKS)
    assert grouped == single


def test_each_window_of_a_group_of_a_plan_not_window_exact_is_a_round_with_its_own_snapshot(runs):
    grouped = {cp.window: cp for cp in runs["3"].list_checkpoints("catchup")}
    single = {cp.window: cp for cp in runs["off"].list_checkpoints("catchup")}
    assert sorted(grouped) == sorted(single) == list(range(LAST - 9 + 1, LAST + 1))
    assert all(cp.snapshot_uri for cp in grouped.values()) and all(cp.snapshot_uri for cp in single.values())
    groups = {c.window: c.timings.get("group") for c in runs["3"].list_cycles("catchup", limit=20).cycles}
    assert groups == {w: 3 for w in range(W0, LAST + 1)}  # groups [0..2], [3..5], [6..8]
    assert [grouped[w].rows_in for w in sorted(grouped)] == [single[w].rows_in for w in sorted(single)]


def test_the_state_after_a_group_is_the_state_after_its_windows_one_by_one(runs):
    for op in ("per_auction", "first_bids", "totals"):
        want = runs["off"].read_state("catchup", op, window=LAST)
        got = runs["3"].read_state("catchup", op, window=LAST)
        assert got.num_rows == want.num_rows > 0
        assert _rows(got) == _rows(want)


def test_restore_to_a_window_inside_a_group_runs_on_exactly_once(runs):
    client = runs["3"]
    client.restore("catchup", W0 + 4)  # the middle of the group [3..5]
    assert max(cp.window for cp in client.list_checkpoints("catchup")) == W0 + 4
    client.run(REF, first=W0 + 5, last=LAST)
    assert _outputs(client, "catchup") == _outputs(runs["off"], "catchup")
    for op in ("per_auction", "first_bids", "totals"):
        assert _rows(client.read_state("catchup", op, window=LAST)) == _rows(
            runs["off"].read_state("catchup", op, window=LAST))


def test_restore_to_a_stored_window_before_a_fold_runs_on_exactly_once(runs):
    client = runs["3"]
    stored = sorted(cp.window for cp in client.list_checkpoints("catchup") if cp.snapshot_uri)
    target = stored[0]
    client.restore("catchup", target)
    client.run(REF, first=target + 1, last=LAST)
    assert _outputs(client, "catchup") == _outputs(runs["off"], "catchup")


# -- the one-pass form (window-exact plans) ------------------------------------------------------
def one_pass_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("onepass", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, events_per_second=40, seed=9), name="bids")
    cheap = bids.filter("price < 5000000", name="cheap").with_column("band", "price % 3", name="banded")
    cheap.select("auction", "bidder", "band", "date_time", name="q1").sink(lg.CollectSink("q1"), name="q1_out")
    (
        cheap.key_by("band").window(lg.Tumbling(timedelta(seconds=20)))
        .aggregate(n=lg.count(), top=lg.max("price"), name="per_band")
        .sink(lg.CollectSink("per_band"), name="per_band_out")
    )
    (
        bids.key_by("auction").window(lg.Sliding(timedelta(seconds=20), timedelta(seconds=10)))
        .aggregate(n=lg.count(), name="sliding")
        .sink(lg.CollectSink("sliding"), name="sliding_out")
    )
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, events_per_second=40, seed=9), name="auctions")
    (
        bids.select("auction", "bidder", "date_time", name="bid_keys")
        .join(auctions.select("id", "seller", "date_time", name="auction_keys"), left_on=["auction"],
              right_on=["id"], window=lg.Tumbling(timedelta(seconds=20)), how="full", name="bid_auction")
        .sink(lg.CollectSink("joined"), name="joined_out")
    )
    return p


ONE_PASS_SINKS = ("q1", "per_band", "sliding", "joined")


def test_a_window_exact_plan_runs_its_groups_in_one_pass_and_writes_the_same(spark, tmp_path, monkeypatch):
    from lockgate.plan.one_pass import one_pass
    from lockgate.runtime.compiler import compile_pipeline

    ref = f"{__file__}:one_pass_pipeline"
    assert one_pass(compile_pipeline(one_pass_pipeline(), spark).graph)
    assert not one_pass(compile_pipeline(catchup_pipeline(), spark).graph)
    outputs, states = {}, {}
    for mode in ("off", "4"):
        monkeypatch.setenv("LOCKGATE_CATCHUP", mode)
        with lg.connect("embedded", home=str(tmp_path / mode)) as client:
            client.run(ref, first=W0, last=LAST)
            outputs[mode] = {s: _rows(client.read_sink("onepass", s)) for s in ONE_PASS_SINKS}
            states[mode] = _rows(client.read_state("onepass", "per_band", window=LAST))
            if mode == "4":
                stored = sorted(cp.window for cp in client.list_checkpoints("onepass") if cp.snapshot_uri)
                assert stored == [W0 + 3, W0 + 7, W0 + 8]
                with pytest.raises(StateNotFoundError, match=r"derived .*replaying"):
                    client.read_state("onepass", "per_band", window=W0 + 5)
                client.restore("onepass", W0 + 5)  # derived: windows 4 and 5 replayed in one pass
                client.run(ref, first=W0 + 6, last=LAST)
                replayed = {s: _rows(client.read_sink("onepass", s)) for s in ONE_PASS_SINKS}
                assert replayed == outputs["4"]
    assert all(outputs["off"][s] for s in ONE_PASS_SINKS)
    # pairs, and auctions no bid of their window matched; columns sorted: auction, bidder, ..., seller, ...
    cols = sorted(["window_start", "window_end", "auction", "bidder", "date_time", "id", "seller", "date_time_right"])
    b, s = cols.index("bidder"), cols.index("seller")
    assert {(row[b][0], row[s][0]) for row in outputs["off"]["joined"]} >= {(False, False), (True, False)}
    assert outputs["4"] == outputs["off"]
    assert states["4"] == states["off"]


def head_join_pipeline(lateness_s: int = 0) -> lg.Pipeline:
    p = lg.Pipeline("headjoin", cycle_window=timedelta(seconds=10), parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(seconds=lateness_s), late="drop"))
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, events_per_second=40, seed=4), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, events_per_second=40, seed=4), name="auctions")
    (
        bids.join(auctions, left_on=["auction"], right_on=["id"], window=lg.Tumbling(timedelta(seconds=20)),
                  name="bid_auction")
        .sink(lg.CollectSink("joined"), name="joined_out")
    )
    return p


def test_a_join_of_two_sources_buffers_nothing_after_a_group_that_ends_on_a_window_boundary(
    spark, tmp_path, monkeypatch
):
    """Groups of 3 windows of 10 s over 20 s windows end on a window boundary every other
    time: then no record can be in a window still open, and the join's state is neither
    counted nor written; otherwise its open windows are buffered as usual."""
    from lockgate.runtime.catchup import Span, opens_no_window
    from lockgate.runtime.compiler import compile_pipeline

    graph = compile_pipeline(head_join_pipeline(), spark).graph
    join = next(v for v in graph.vertices.values() if v.op == "join")
    spec = join.config["window"]
    ups = [graph.vertices[e.source] for e in graph.inputs(join.id)]
    size = graph.clock.size_us

    def span(last: int, lateness_us: int = 0) -> Span:
        return Span(W0, last, graph.clock.origin_us, size, lateness_us)

    on, off = (W0 + 1, W0 + 2) if (graph.clock.origin_us + (W0 + 2) * size) % spec["size_us"] == 0 else (W0 + 2, W0 + 1)
    assert all(opens_no_window(span(on), spec, up) for up in ups)
    assert not any(opens_no_window(span(off), spec, up) for up in ups)
    assert not any(opens_no_window(span(on, 1), spec, up) for up in ups)  # late records may come
    assert not opens_no_window(span(on), {**spec, "type": "sliding"}, ups[0])
    assert not opens_no_window(span(on), spec, graph.vertices[join.id])  # not a source

    ref = f"{__file__}:head_join_pipeline"
    outputs, states = {}, {}
    stored: list[int] = []
    for mode in ("3", "off"):
        monkeypatch.setenv("LOCKGATE_CATCHUP", mode)
        with lg.connect("embedded", home=str(tmp_path / mode)) as client:
            client.run(ref, first=W0, last=LAST)
            outputs[mode] = _rows(client.read_sink("headjoin", "joined"))
            if mode == "3":  # each group's last window
                stored = sorted(cp.window for cp in client.list_checkpoints("headjoin") if cp.snapshot_uri)
            states[mode] = {(w, t): client.read_state("headjoin", "bid_auction", window=w, table=t)
                            for w in stored for t in ("left", "right")}
    assert outputs["off"] and outputs["3"] == outputs["off"]
    assert stored == [W0 + 2, W0 + 5, W0 + 8]
    # the same rows, and the same types whichever path wrote each layer (Spark or the driver)
    assert {k: (t.schema, _rows(t)) for k, t in states["3"].items()} == {
        k: (t.schema, _rows(t)) for k, t in states["off"].items()}
    # a group that ends inside a window buffers its open half; one that ends on a boundary nothing
    ends_inside = {w: bool((graph.clock.origin_us + (w + 1) * size) % spec["size_us"]) for w in stored}
    assert set(ends_inside.values()) == {True, False}
    for (w, _t), table in states["3"].items():
        assert bool(table.num_rows) == ends_inside[w]


def arrival_pipeline() -> lg.Pipeline:
    import os

    p = lg.Pipeline("arrival", cycle_window=timedelta(seconds=10), parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(seconds=5), late="drop"))
    events = p.source(lg.FileSource(os.environ["LG_TEST_ARRIVAL_PATH"], event_time="ts", arrival="arrived"),
                      name="events")
    events.filter("v % 2 = 0", name="even").sink(lg.CollectSink("even"), name="even_out")
    (
        events.key_by("k").window(lg.Tumbling(timedelta(seconds=20)))
        .aggregate(n=lg.count(), total=lg.sum("v"), name="per_k")
        .sink(lg.CollectSink("per_k"), name="per_k_out")
    )
    return p


def test_one_pass_groups_slice_by_the_arrival_column_and_drop_the_same_late_records(
    spark, tmp_path, monkeypatch
):
    """A file source sliced by an arrival column: a group tags each record with the window it
    arrived in, so the records the watermark makes late are dropped exactly as single rounds drop them."""
    import random
    from datetime import datetime

    import pyarrow.parquet as pq

    from lockgate.plan.one_pass import one_pass
    from lockgate.runtime.compiler import compile_pipeline

    folder = tmp_path / "events"
    folder.mkdir()
    rnd = random.Random(3)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for w in range(9):  # one file per arrival window; event time lags arrival by up to 25 s
        arrived = [t0 + timedelta(seconds=10 * w + rnd.random() * 10) for _ in range(60)]
        ts = [a - timedelta(seconds=rnd.random() * 25) for a in arrived]
        pq.write_table(pa.table({
            "k": pa.array([rnd.randrange(5) for _ in arrived], pa.int64()),
            "v": pa.array([rnd.randrange(100) for _ in arrived], pa.int64()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "arrived": pa.array(arrived, pa.timestamp("us", tz="UTC")),
        }), folder / f"part-{w}.parquet")
    monkeypatch.setenv("LG_TEST_ARRIVAL_PATH", str(folder))
    ref = f"{__file__}:arrival_pipeline"
    assert one_pass(compile_pipeline(arrival_pipeline(), spark).graph)
    runs, outputs = {}, {}
    for mode in ("off", "4"):
        monkeypatch.setenv("LOCKGATE_CATCHUP", mode)
        with lg.connect("embedded", home=str(tmp_path / mode)) as client:
            runs[mode] = client.run(ref, first=W0, last=LAST)
            outputs[mode] = {s: _rows(client.read_sink("arrival", s)) for s in ("even", "per_k")}
            if mode == "4":
                assert any(cp.snapshot_uri is None for cp in client.list_checkpoints("arrival"))
    assert runs["off"].late_rows > 20 and runs["off"].rows_in == 9 * 60
    assert (runs["4"].late_rows, runs["4"].rows_in, runs["4"].rows_out) == (
        runs["off"].late_rows, runs["off"].rows_in, runs["off"].rows_out)
    assert outputs["4"] == outputs["off"] and outputs["off"]["per_k"]
