"""Sliding windows by pane, round by round: each round reads the live panes once and merges
the window's records into them in one aggregation, so a round with state runs one Spark job
(the collect of its delta and output), no broadcast of its panes before it; the emitted windows
equal pandas' over the same bids, the state holds only the panes still in an open window, and a
restore to a kept checkpoint gives the windows of the run that was not interrupted."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lockgate.api.loader import load_pipeline
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.checkpoint.state_reader import read_state_table
from lockgate.runtime.compiler import compile_pipeline
from lockgate.runtime.cycle import CycleRunner
from lockgate.runtime.results import RestorePoint

if str(Path(__file__).resolve().parent) not in sys.path:  # reference.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import CYCLE_US, T0_ISO, W0, S, emit_cycle, nexmark_events, sliding

SOURCE = {"events_per_second": 150, "seed": 11}
ROUNDS = 5
SIZE_S, SLIDE_S = 10, 4  # panes of 2 s; a window spans two cycles

PIPELINE = f'''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("panes", cycle_window=timedelta(seconds=10), parallelism=2)
bids = pipeline.source(lg.NexmarkSource("bid", start={T0_ISO!r}, **{SOURCE!r}), name="bids")
(bids.key_by("auction").window(lg.Sliding(timedelta(seconds={SIZE_S}), timedelta(seconds={SLIDE_S})))
     .aggregate(bids=lg.count(), top=lg.max("price"), name="per_auction")
     .sink(lg.FileSink({{out!r}}), name="out"))
'''


def _with_start_us(t: pa.Table) -> pa.Table:
    """``t`` with its windows' start in microseconds since the epoch, as the reference has it."""
    return t.append_column("start_us", pc.cast(pc.cast(t["window_start"], pa.timestamp("us", tz="UTC")), pa.int64()))


@pytest.fixture(autouse=True)
def one_window_per_round(monkeypatch):
    """One window per round: a catch-up group would run several windows in one job."""
    monkeypatch.setenv("LOCKGATE_CATCHUP", "off")


def _runner(spark, tmp_path: Path) -> CycleRunner:
    """A runner of the sliding pipeline (a new one stands for a restarted process)."""
    path = tmp_path / "panes.py"
    if not path.exists():
        path.write_text(PIPELINE.replace("{out!r}", repr(str(tmp_path / "out"))))
    plan = compile_pipeline(load_pipeline(f"{path}:pipeline"), spark)
    return CycleRunner(spark, plan, "panes", str(tmp_path / "run"), SnapshotStore(tmp_path / "snapshots"))


def _rounds(spark, runner: CycleRunner, windows: range, restore: RestorePoint | None, attempt: int = 1,
            ) -> list[tuple[int, str, RestorePoint, int]]:
    """Run ``windows`` one round each from ``restore``: per round, its window, its staged output
    (a committed run renames it into the sink's folder), its restore point and its Spark jobs
    (counted by the round's job group)."""
    sc = spark.sparkContext
    out = []
    for window in windows:
        group = f"panes-{window}-{attempt}"
        sc.setJobGroup(group, "a sliding round")
        try:
            result = runner.run(window, attempt, restore)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        restore = RestorePoint(window, result.snapshot_uri, result.snapshot_manifest, result.positions)
        out.append((window, result.staged["out"]["uri"], restore, len(sc.statusTracker().getJobIdsForGroup(group))))
    return out


def _output(rounds: list[tuple[int, str, RestorePoint, int]]) -> list[tuple]:
    """Every round's staged windows: (cycle window, window start µs, auction, bids, top), sorted."""
    got = pd.concat([_with_start_us(pq.read_table(uri)).to_pandas().assign(lg_window=w) for w, uri, _, _ in rounds],
                    ignore_index=True)
    return sorted(zip(got["lg_window"], got["start_us"], got["auction"], got["bids"], got["top"], strict=True))


def _expected(first: int) -> list[tuple]:
    """pandas' windows over the same bids, as :func:`_output` gives them, emitted from cycle
    window ``first`` on."""
    bids = nexmark_events("bid", W0, W0 + ROUNDS - 1, **SOURCE)
    ref = sliding(bids, SIZE_S * S, SLIDE_S * S).groupby(["window_start", "window_end", "auction"]).agg(
        bids=("price", "size"), top=("price", "max")).reset_index()
    ref["lg_window"] = emit_cycle(ref["window_end"].to_numpy())
    ref = ref[(ref["lg_window"] >= first) & (ref["lg_window"] < W0 + ROUNDS)]
    return sorted(zip(ref["lg_window"], ref["window_start"], ref["auction"], ref["bids"], ref["top"], strict=True))


def test_a_sliding_round_with_state_runs_one_spark_job_and_equals_pandas(tmp_path, spark):
    rounds = _rounds(spark, _runner(spark, tmp_path), range(W0, W0 + ROUNDS), None)
    for i, (window, _uri, restore, _jobs) in enumerate(rounds):
        # the state keeps only panes a window still open holds: starts above watermark - size
        table = "per_auction.main"
        panes = read_state_table(restore.snapshot_uri, table, restore.snapshot_manifest[table])
        starts = panes["pane_start"].cast("int64").to_numpy()
        assert len(starts) > 0
        assert (starts > (window + 1) * CYCLE_US - SIZE_S * S).all(), f"round {i}: an expired pane kept"
    # from the second round on there is state to merge: still one job (the collect), no broadcast
    jobs = [j for _, _, _, j in rounds]
    assert jobs[1:] == [1] * (ROUNDS - 1), jobs

    expected = _expected(W0)
    assert len(expected) > 0
    assert _output(rounds) == expected


def test_a_restore_to_a_kept_checkpoint_gives_the_uninterrupted_windows(tmp_path, spark):
    """A new runner (a restarted process) restored to the checkpoint of the second round runs the
    rounds after it again, from the panes that checkpoint holds: the same windows as the run that
    was not interrupted, and as pandas'."""
    first = _rounds(spark, _runner(spark, tmp_path), range(W0, W0 + ROUNDS), None)
    again = _rounds(spark, _runner(spark, tmp_path), range(W0 + 2, W0 + ROUNDS), first[1][2], attempt=2)
    assert _output(again) == _output(first[2:]) == _expected(W0 + 2)
