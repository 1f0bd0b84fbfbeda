"""Incremental state: rounds write deltas, chains fold into one delta or a new base, retention
keeps every layer a retained checkpoint needs, a restore in the middle of a chain replays
exactly, a snapshot written before layers existed still restores, and a damaged delta is a
clear error. Results are checked against pandas over the same Nexmark bids (``reference``).

``LOCKGATE_STATE_MAX_DELTAS=2`` makes chains fold every few rounds of a short run.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

import lockgate as lg
from lockgate.checkpoint.catalog.schema import checkpoints_table
from lockgate.checkpoint.layers import needed_by_all, table_layers
from lockgate.errors import SnapshotError

if str(Path(__file__).resolve().parent.parent) not in sys.path:  # reference.py, in the runtime tests
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reference import (
    CYCLE_US,
    T0_ISO,
    W0,
    S,
    aggregate,
    assert_same_rows,
    emit_cycle,
    nexmark_events,
    read_sink,
    running_totals,
    tumbling,
)

SOURCE = {"events_per_second": 60, "seed": 21}
LAST = W0 + 7
TOTALS = "totals.main"


def layered_pipeline() -> lg.Pipeline:
    p = lg.Pipeline("layered", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    bids.key_by("bidder").aggregate(n=lg.count(), total=lg.sum("price"), name="totals").sink(
        lg.CollectSink("totals"), name="totals_out")
    (bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=20)))
         .aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
         .sink(lg.CollectSink("per_auction"), name="per_auction_out"))
    return p


REF = f"{__file__}:layered_pipeline"


@pytest.fixture(scope="module")
def bids():
    return nexmark_events("bid", W0, LAST, **SOURCE)


def windowed_reference(bids: pd.DataFrame, last: int) -> pd.DataFrame:
    df = tumbling(bids, 20 * S)
    out = aggregate(df, ["auction", "window_start", "window_end"], {"n": ("count", None), "top": ("max", "price")})
    out["lg_window"] = emit_cycle(out["window_end"].astype("int64").to_numpy())
    return out[out["lg_window"] <= last]


def check_results(client, job: str, bids: pd.DataFrame, last: int) -> None:
    assert_same_rows(read_sink(client, job, "totals"), running_totals(bids, "bidder", {"n": ("count", None), "total": ("sum", "price")}, last), ["bidder", "lg_window"],
                     what="running totals")
    assert_same_rows(read_sink(client, job, "per_auction"), windowed_reference(bids, last),
                     ["auction", "window_start"], what="tumbling windows")


@pytest.fixture
def client(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "2")
    c = lg.connect("embedded", home=str(tmp_path / "home"), keep_checkpoints=3)
    yield c
    c.close()


def _snapshot_folders(client, job: str) -> set[str]:
    return set(client.snapshots.list_snapshots(job))


def test_rounds_write_deltas_chains_fold_and_a_restore_inside_a_chain_replays(client, bids):
    res = client.run(REF, first=W0, last=LAST)
    assert res.state == "FINISHED" and res.windows_run == LAST - W0 + 1
    check_results(client, "layered", bids, LAST)

    written = []
    for cp in client.catalog.list_checkpoints("layered", include_inactive=True):
        entry = cp.snapshot_manifest[TOTALS]
        written.append(entry["written"])
        layers = table_layers(cp.snapshot_uri, entry)
        deltas = [layer for layer in layers if layer["kind"] == "delta"]
        assert len(deltas) <= 2, f"window {cp.window}: a chain of {len(deltas)} deltas"
        assert layers[0]["kind"] == "base"
        assert entry["rows"] == sum(layer["rows"] for layer in layers)
    # the first round writes a base; later rounds write deltas, and a third delta folds the chain
    assert written[0] == "base" and written[1:3] == ["delta", "delta"]
    assert written[3] in ("base", "folded") and "delta" in written[4:]
    # a delta holds what its round changed: the bidders of its window, not every bidder so far
    for cp in client.catalog.list_checkpoints("layered"):
        entry = cp.snapshot_manifest[TOTALS]
        if entry["written"] == "delta":
            own = [layer for layer in entry["layers"] if layer["snapshot"] == cp.snapshot_uri]
            assert own[0]["rows"] == bids.loc[bids["cycle"] == cp.window, "bidder"].nunique()
            assert own[0]["rows"] < (bids["cycle"] <= cp.window).sum()

    # retention: 3 checkpoints kept, and on disk exactly the folders their layers name
    kept = client.catalog.list_checkpoints("layered")
    assert [cp.window for cp in kept] == [LAST - 2, LAST - 1, LAST]
    assert any(len(cp.snapshot_manifest[TOTALS]["layers"]) > 1 for cp in kept[:-1])
    needed = needed_by_all((cp.snapshot_uri, cp.snapshot_manifest) for cp in kept)
    assert _snapshot_folders(client, "layered") == needed
    for cp in kept:
        client.snapshots.verify(cp.snapshot_uri, cp.snapshot_manifest)

    # the state read back (merged from its layers, without Spark), as pandas computes it
    for cp in (kept[0], kept[-1]):
        totals = aggregate(bids[bids["cycle"] <= cp.window], ["bidder"], {"n": ("count", None),
                                                                          "total": ("sum", "price")})
        state = client.read_state("layered", "totals", window=cp.window).to_pandas()
        assert_same_rows(state, totals, ["bidder"], what=f"totals state at {cp.window}")
    seen = tumbling(bids[bids["cycle"] <= LAST], 20 * S)
    open_windows = seen[seen["window_end"] > (LAST + 1) * CYCLE_US]
    expected = aggregate(open_windows, ["auction", "window_start"], {"n": ("count", None), "top": ("max", "price")})
    state = client.read_state("layered", "per_auction").to_pandas()
    state["window_start"] = state["window_start"].astype("int64") // 1000  # ns -> us
    assert_same_rows(state, expected, ["auction", "window_start"], what="open windows' state")

    # a restore in the middle of a chain: the checkpoint with the most layers of earlier rounds
    target = max(kept[:-1], key=lambda cp: len(cp.snapshot_manifest[TOTALS]["layers"]))
    client.restore("layered", target.window)
    assert _snapshot_folders(client, "layered") >= needed_by_all([(target.snapshot_uri, target.snapshot_manifest)])
    res = client.run(REF, until_caught_up=False, last=LAST)
    assert res.first_window == target.window + 1 and res.windows_run == LAST - target.window
    check_results(client, "layered", bids, LAST)


def test_a_snapshot_written_before_layers_still_restores(client, bids):
    os.environ["LOCKGATE_STATE_MAX_DELTAS"] = "0"  # full snapshots, each in its own folder
    client.run(REF, first=W0, last=W0 + 3)
    # rewrite the latest checkpoint's manifest as Lockgate wrote it before layers existed
    last = client.catalog.last_checkpoint("layered")
    old = {}
    for table, entry in last.snapshot_manifest.items():
        layers = table_layers(last.snapshot_uri, entry)
        assert [layer["snapshot"] for layer in layers] in ([last.snapshot_uri], [])
        old[table] = {"files": layers[0]["files"] if layers else [], "rows": entry["rows"]}
    with client.catalog.engine.begin() as conn:
        conn.execute(sa.update(checkpoints_table).where(checkpoints_table.c.id == last.id)
                     .values(snapshot_manifest=old))
    os.environ["LOCKGATE_STATE_MAX_DELTAS"] = "2"
    res = client.run(REF, last=LAST)
    assert res.first_window == W0 + 4 and res.state == "FINISHED"
    check_results(client, "layered", bids, LAST)


def test_a_damaged_delta_is_a_clear_error(client, bids):
    client.run(REF, first=W0, last=W0 + 4)
    last = client.catalog.last_checkpoint("layered")
    delta = next(layer for layer in last.snapshot_manifest[TOTALS]["layers"][::-1] if layer["kind"] == "delta")
    path = Path(client.snapshots.operator_uri(delta["snapshot"], TOTALS).removeprefix("file:")) / \
        delta["files"][0]["path"]
    path.write_bytes(b"x" * path.stat().st_size)  # the same size: only its footer tells
    with pytest.raises(SnapshotError) as err:
        client.run(REF, last=W0 + 6)
    own = delta["snapshot"] == last.snapshot_uri
    folder = "" if own else delta["snapshot"].rstrip("/").rsplit("/", 1)[-1] + "/"
    message = str(err.value)
    assert f"file '{folder}{TOTALS}/{delta['files'][0]['path']}' has an unreadable Parquet footer" in message, message
    # an earlier checkpoint without the damaged layer is the fix
    damaged_at = int(delta["snapshot"].rstrip("/").rsplit("=", 1)[-1].split("-")[0])
    assert f"`lockgate restore layered --window W` (W < {damaged_at})" in message
    assert client.catalog.last_checkpoint("layered").window == W0 + 4  # nothing committed was touched


def test_the_fold_policy(spark, tmp_path):
    """A chain at its limit folds into one delta while the deltas are small next to the base,
    into a new base once they are not; both hold the live rows, tombstones resolved."""
    from lockgate.runtime.state.compaction import plan_write
    from lockgate.runtime.state.layers import DELETED, LayeredState, StateDelta

    schema = "k BIGINT, v BIGINT"
    base = tmp_path / "base"
    spark.createDataFrame([(k, k) for k in range(100)], schema).write.parquet(str(base))
    deltas = []
    for i, rows in enumerate(([(1, 10, False), (2, None, True)], [(3, 30, False), (200, 2, False)])):
        folder = tmp_path / f"d{i}"
        spark.createDataFrame(rows, f"{schema}, {DELETED} BOOLEAN").write.parquet(str(folder))
        deltas.append(folder)
    struct = spark.createDataFrame([], schema).schema
    state = LayeredState(spark, struct, [(str(base), False), (str(deltas[0]), True), (str(deltas[1]), True)], None)
    chain = [{"snapshot": "b", "kind": "base", "rows": 100}, {"snapshot": "d0", "kind": "delta", "rows": 2},
             {"snapshot": "d1", "kind": "delta", "rows": 2}]
    change = StateDelta(spark.createDataFrame([(1, 11), (300, 3)], schema), ("k",),
                        deletes=spark.createDataFrame([(4,)], "k BIGINT"))

    folded = plan_write(chain, state, change, limit=2, pending_rows=3)
    assert folded.kind == "folded" and folded.kept == chain[:1]
    got = {(r.k, r.v, r[DELETED]) for r in folded.rows.collect()}
    assert got == {(1, 11, False), (2, None, True), (3, 30, False), (200, 2, False), (300, 3, False), (4, None, True)}

    chain[1]["rows"] = 60  # the deltas now hold more than half the base's rows
    rebased = plan_write(chain, state, change, limit=2, pending_rows=3)
    assert rebased.kind == "base" and rebased.kept == []
    live = {(r.k, r.v) for r in rebased.rows.collect()}
    expected = {(k, k) for k in range(100) if k not in (1, 2, 3, 4)} | {(1, 11), (3, 30), (200, 2), (300, 3)}
    assert live == expected

    assert plan_write(chain[:2], state, change, limit=2, pending_rows=3).kind == "delta"
    assert plan_write(chain, state, change, limit=0, pending_rows=3).kind == "base"

    # a lookup reads the newest version of the keys asked for, tombstones hide keys
    keys = spark.createDataFrame([(1,), (2,), (5,), (200,)], "k BIGINT")
    assert {(r.k, r.v) for r in state.lookup(("k",), keys, ["k"]).collect()} == {(1, 10), (5, 5), (200, 2)}


def per_price_pipeline() -> lg.Pipeline:
    """A running count keyed by (auction, price): nearly every bid a key of its own, so a
    delta holds about one window of rows and the base grows by one a round."""
    p = lg.Pipeline("per_price", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    bids.key_by("auction", "price").aggregate(n=lg.count(), name="per_price").sink(
        lg.CollectSink("per_price"), name="per_price_out")
    return p


def test_the_round_after_a_fold_is_sized_by_the_delta_not_by_the_new_base(client, bids, monkeypatch):
    """Which path writes a layer is decided by the rows it is expected to hold. A fold's base
    holds the whole state; the delta of the round after it holds one window's changes, as the
    delta before the fold did, and goes through the driver when that fits its limit, while
    the bases too large for it go through Spark's writer."""
    per_window = bids.groupby("cycle").size()
    limit = int(per_window.max() * 3 // 2)
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "1")  # every other round folds into a base
    monkeypatch.setenv("LOCKGATE_DRIVER_SNAPSHOT_ROWS", str(limit))
    res = client.run(f"{__file__}:per_price_pipeline", first=W0, last=LAST)
    assert res.state == "FINISHED"

    seen = []
    for cp in client.catalog.list_checkpoints("per_price", include_inactive=True):
        entry = cp.snapshot_manifest["per_price.main"]
        own = [layer for layer in table_layers(cp.snapshot_uri, entry) if layer["snapshot"] == cp.snapshot_uri]
        if own:
            driver = all(f["path"].endswith("part-00000-driver.parquet") for f in own[0]["files"])
            seen.append((cp.window, entry["written"], own[0]["rows"], driver))
    big_bases = [s for s in seen if s[1] == "base" and s[2] > limit]
    assert big_bases and not any(s[3] for s in big_bases), seen  # over the limit: Spark's writer
    after_big = [s for s in seen if s[1] == "delta" and any(b[0] < s[0] for b in big_bases)]
    assert after_big and all(s[3] and s[2] <= limit for s in after_big), seen  # one window: the driver

    totals = aggregate(bids, ["auction", "price"], {"n": ("count", None)})
    state = client.read_state("per_price", "per_price", window=LAST).to_pandas()
    assert_same_rows(state, totals, ["auction", "price"], what="per-price counts")



class _Folds(logging.Handler):
    """The ``state_folded`` events the cycle runner logs (at DEBUG), their fields."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "lockgate_event", None) == "state_folded":
            self.events.append(dict(record.lockgate_fields))


def test_small_folds_are_made_on_the_driver_and_equal_spark_folds(spark, tmp_path, monkeypatch, bids):
    """With ``LOCKGATE_DRIVER_FOLDS`` on (the default) a fold that fits the driver is made there
    from the layer files and the round's delta; off, Spark merges the chain. Both give the
    results pandas gives and the same state at every kept checkpoint."""
    monkeypatch.setenv("LOCKGATE_STATE_MAX_DELTAS", "2")
    logger = logging.getLogger("lockgate.runtime.cycle")
    states = {}
    for folds in ("1", "0"):
        monkeypatch.setenv("LOCKGATE_DRIVER_FOLDS", folds)
        seen, level = _Folds(), logger.level
        logger.addHandler(seen)
        logger.setLevel(logging.DEBUG)
        c = lg.connect("embedded", home=str(tmp_path / f"home{folds}"), keep_checkpoints=3)
        try:
            assert c.run(REF, first=W0, last=LAST).state == "FINISHED"
            check_results(c, "layered", bids, LAST)
            states[folds] = [c.read_state("layered", "totals", window=w).to_pandas() for w in (LAST - 1, LAST)]
        finally:
            c.close()
            logger.removeHandler(seen)
            logger.setLevel(level)
        totals = [e for e in seen.events if e["table"] == TOTALS]
        assert len(totals) >= 2 and {e["into"] for e in totals} <= {"base", "folded"}
        assert {e["folded_by"] for e in totals} == ({"driver"} if folds == "1" else {"spark"}), totals
    for on, off in zip(states["1"], states["0"], strict=True):
        assert len(on) > 10
        assert_same_rows(on, off, ["bidder"], what="totals state, driver folds against Spark's")
