"""Every stateful operator writes the same output, and keeps the same state, whichever way its
state is carried: deltas on a base (the default), a full snapshot every round
(``LOCKGATE_STATE_MAX_DELTAS=0``), or catch-up groups of three with a fold every other round
(``catchup=3``, ``LOCKGATE_STATE_MAX_DELTAS=1``).

The operators here are the ones ``test_catchup.py`` leaves out: a session window, a windowed
top-N, an OVER aggregation, a TTL join and a running ``top_k``. Each is checked against an
independent reference in its own ``test_operators_*.py``; this module checks that the ways of
carrying state agree with each other. Long (``make test-long``): ``test_catchup.py`` and
``test_compaction.py`` carry state the three ways in the test command.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import lockgate as lg

pytestmark = pytest.mark.long

T0_ISO = "2026-01-01T00:00:00"
W0 = 1767225600 // 10
LAST = W0 + 8
OPERATORS = ("sessions", "top3", "last5", "paired", "best")
MODES = {  # mode: (catchup, LOCKGATE_STATE_MAX_DELTAS)
    "deltas": ("off", "8"),
    "full": ("off", "0"),
    "grouped": ("3", "1"),
}


def modes_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("modes", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, events_per_second=40, seed=21), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, events_per_second=40, seed=21), name="auctions")
    (
        bids.key_by("bidder").window(lg.Session(timedelta(seconds=4)))
        .aggregate(n=lg.count(), spent=lg.sum("price"), name="sessions")
        .sink(lg.CollectSink("sessions"), name="sessions_out")
    )
    (
        bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=20)))
        .top_n(3, by="price", name="top3")
        .sink(lg.CollectSink("top3"), name="top3_out")
    )
    (
        bids.key_by("bidder").over(preceding=5, avg_price=lg.avg("price"), n=lg.count(), name="last5")
        .sink(lg.CollectSink("last5"), name="last5_out")
    )
    (
        bids.join(auctions, left_on=["auction"], right_on=["id"], ttl=timedelta(seconds=30), name="paired")
        .select("auction", "bidder", "price", "seller", name="pairs")
        .sink(lg.CollectSink("paired"), name="paired_out")
    )
    (
        bids.key_by("auction").aggregate(best=lg.top_k(1, by="price", columns=["bidder"]), name="best")
        .sink(lg.CollectSink("best"), name="best_out")
    )
    return p


REF = f"{__file__}:modes_pipeline"


def _rows(table: pa.Table) -> list[tuple]:
    cols = sorted(table.column_names)
    return sorted((tuple(row[c] for c in cols) for row in table.select(cols).to_pylist()), key=repr)


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    clients = {}
    try:
        for mode, (catchup, max_deltas) in MODES.items():
            mp.setenv("LOCKGATE_STATE_MAX_DELTAS", max_deltas)
            client = lg.connect("embedded", home=str(Path(tmp_path_factory.mktemp(f"modes_{mode}"))))
            res = client.run(REF, first=W0, last=LAST, catchup=catchup)
            assert res.state == "FINISHED" and res.windows_run == LAST - W0 + 1, (mode, res)
            clients[mode] = client
        yield clients
    finally:
        mp.undo()
        for client in clients.values():
            client.close()


@pytest.mark.parametrize("mode", ["full", "grouped"])
def test_every_sink_is_the_same_whichever_way_state_is_carried(runs, mode):
    for op in OPERATORS:
        want = _rows(runs["deltas"].read_sink("modes", op))
        assert want, f"{op}: no output to compare"
        assert _rows(runs[mode].read_sink("modes", op)) == want, f"{op} differs with {mode}"


@pytest.mark.parametrize("mode", ["full", "grouped"])
def test_every_operators_state_at_the_last_window_is_the_same(runs, mode):
    from lockgate.runtime.compiler import compile_pipeline

    layout = compile_pipeline(modes_pipeline()).graph.state_layout()
    assert set(OPERATORS) <= set(layout)
    compared = 0
    for op in OPERATORS:
        for table in layout[op]:
            want = runs["deltas"].read_state("modes", op, window=LAST, table=table)
            got = runs[mode].read_state("modes", op, window=LAST, table=table)
            assert _rows(got) == _rows(want), f"{op}.{table} state differs with {mode}"
            compared += want.num_rows
    assert compared > 0


def test_the_modes_really_differ_in_what_they_stored(runs):
    """Every mode stores a snapshot at every checkpoint (this plan is not window-exact: a group
    runs each window as a round of its own); the grouped run ran in groups of three."""
    stored = {m: [cp.window for cp in c.list_checkpoints("modes") if cp.snapshot_uri] for m, c in runs.items()}
    assert stored["deltas"] == stored["full"] == stored["grouped"] == list(range(W0, LAST + 1))
    groups = {c.window: c.timings.get("group") for c in runs["grouped"].list_cycles("modes", limit=20).cycles}
    assert groups == {w: 3 for w in range(W0, LAST + 1)}
    assert all("group" not in c.timings for c in runs["deltas"].list_cycles("modes", limit=20).cycles)
