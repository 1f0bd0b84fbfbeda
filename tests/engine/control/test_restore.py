"""Restore through the embedded client, in this process (the test session's SparkSession):
window gaps, deliberate rollback, plan changes, damaged snapshots, checkpoint retention.

The pipeline: Nexmark bids in 6 cycle windows of 5 s; a 10 s tumbling aggregate per
auction (its windows span two cycles) written to a Parquet FileSink and a CollectSink, and
a running aggregate per bidder written to a PostgresSink. Every test compares with one
uninterrupted run, row for row and window by window.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.dataset as ds
import pytest

from lockgate.checkpoint.catalog import CheckpointStatus
from lockgate.checkpoint.layers import needed_by_all
from lockgate.client.embedded import EmbeddedClient
from lockgate.errors import (
    CheckpointNotFoundError,
    SinkNotFoundError,
    SnapshotError,
    StateLayoutError,
    StorageAccessError,
    WindowGapError,
)
from lockgate.runtime.committers import read_collected

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
WINDOWS = list(range(FIRST, FIRST + 6))
SINKS = ("auction_files", "auction_collect", "bidder_pg")

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("restorable", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=5, start="2026-01-01T00:00:00", max_events=12_000),
    name="bids",
)
auctions = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds={window_s})))
    .aggregate(bids=lg.count(), top=lg.max("price"){extra_agg}, name="auction_windows")
)
auctions{filter}.sink(lg.FileSink({out!r}), name="auction_files")
auctions.sink(lg.CollectSink("auctions"), name="auction_collect")
bidders = bids.key_by("bidder").aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
bidders.sink(lg.PostgresSink({pg!r}, {table!r}), name="bidder_pg")
'''


class Job:
    """One job in its own home, with its own output folder and PostgreSQL table."""

    def __init__(self, root: Path, name: str, pg_url: str, keep_checkpoints: int = 10):
        self.name = f"restore_{name}"
        self.root = root / name
        self.root.mkdir(parents=True)
        self.out = self.root / "out" / "auction_windows"
        self.pg_url = pg_url
        self.table = f"restore_{name}_bidders"
        self.client = EmbeddedClient(home=str(self.root / "home"), keep_checkpoints=keep_checkpoints)

    def pipeline(self, variant: str = "base") -> str:
        extra_agg = ', low=lg.min("price")' if variant == "new_aggregate" else ""
        flt = '.filter("bids > 0", name="only_bids")' if variant == "filtered" else ""
        window_s = 20 if variant == "wider_window" else 10
        path = self.root / f"{variant}.py"
        path.write_text(
            PIPELINE.format(extra_agg=extra_agg, filter=flt, window_s=window_s, out=str(self.out), pg=self.pg_url,
                            table=self.table)
        )
        return f"{path}:pipeline"

    def run(self, first: int | None, last: int, variant: str = "base", **kw: Any) -> Any:
        return self.client.run(self.pipeline(variant), job=self.name, first=first, last=last, **kw)

    def output(self) -> dict[str, Counter]:
        return read_outputs(self.client.home, self.name, self.out, self.pg_url, self.table)

    def catalog_state(self) -> dict[str, Any]:
        """Everything the catalog holds about the job."""
        cat = self.client.catalog
        j = cat.get_job(self.name)
        return {
            "job": (j.state, j.plan_version, j.generation, j.pipeline_ref, j.last_error, j.options),
            "transitions": [(t.from_state, t.to_state, t.reason) for t in cat.transitions(self.name)],
            "checkpoints": checkpoints(self),
            "cycles": cycles(self),
        }

    def complete(self) -> list[int]:
        return [cp.window for cp in self.client.catalog.list_checkpoints(self.name)]


def without_error(state: dict[str, Any]) -> dict[str, Any]:
    """A catalog state without the job's last_error (a refused run records why)."""
    return {**state, "job": state["job"][:4] + state["job"][5:]}


def checkpoints(job: Job) -> list[tuple]:
    return [
        (c.id, c.window, c.status, c.plan_version, c.snapshot_uri, c.sink_commits)
        for c in job.client.catalog.list_checkpoints(job.name, include_inactive=True)
    ]


def cycles(job: Job) -> list[tuple]:
    return [(c.id, c.window, c.attempt, c.state) for c in job.client.catalog.list_cycles(job.name, limit=1000)]


def _by_window(rows: list[dict[str, Any]]) -> Counter:
    return Counter((int(r.pop("lg_window")), tuple(sorted(r.items()))) for r in rows)


def read_outputs(home: str, job: str, out: Path, pg_url: str, table: str) -> dict[str, Counter]:
    """Every sink's committed rows, as a multiset of ``(lg_window, row)``."""
    result: dict[str, Counter] = {}
    rows = []  # window by window: after a plan change, windows may differ in columns
    for folder in sorted(out.glob("lg_window=*")):
        window = int(folder.name.split("=", 1)[1])
        rows += [{**r, "lg_window": window} for r in ds.dataset(str(folder), format="parquet").to_table().to_pylist()]
    result["auction_files"] = _by_window(rows)
    try:
        result["auction_collect"] = _by_window(read_collected(home, job, "auctions").to_pylist())
    except SinkNotFoundError:
        result["auction_collect"] = Counter()
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            result["bidder_pg"] = Counter()
        else:
            cur = conn.execute(f"SELECT * FROM {table}")
            names = [d.name for d in cur.description]
            result["bidder_pg"] = _by_window([dict(zip(names, r, strict=True)) for r in cur.fetchall()])
    return result


def upto(out: dict[str, Counter], last: int) -> dict[str, Counter]:
    return {s: Counter({k: n for k, n in rows.items() if k[0] <= last}) for s, rows in out.items()}


def assert_output(job: Job, reference: dict[str, Counter], last: int) -> None:
    """The job's sinks hold exactly the reference's windows up to ``last``, once."""
    out, want = job.output(), upto(reference, last)
    for sink in SINKS:
        assert out[sink] == want[sink], (
            f"{sink}: missing {sum((want[sink] - out[sink]).values())} rows, "
            f"extra {sum((out[sink] - want[sink]).values())} (windows {sorted({w for w, _ in out[sink]})})"
        )


@pytest.fixture
def make_job(tmp_path: Path, pg_url: str, spark: Any):
    jobs: list[Job] = []

    def make(name: str, **kw: Any) -> Job:
        job = Job(tmp_path, name, pg_url, **kw)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.client.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, pg_url: str, spark: Any) -> dict[str, Counter]:
    job = Job(tmp_path_factory.mktemp("restore"), "reference", pg_url)
    try:
        res = job.run(FIRST, WINDOWS[-1])
        assert res.state == "FINISHED" and res.windows_run == len(WINDOWS)
        out = job.output()
    finally:
        job.client.close()
    for sink in SINKS:
        assert out[sink] and max(out[sink].values()) == 1, sink
    assert {w for w, _ in out["auction_files"]} == set(WINDOWS[1::2])  # 10 s windows span 2 cycles
    assert {w for w, _ in out["bidder_pg"]} == set(WINDOWS)
    return out


def test_window_gap_is_refused_and_changes_no_checkpoint(make_job, reference):
    job = make_job("gap")
    job.run(FIRST, FIRST + 2)
    before = job.catalog_state()
    with pytest.raises(WindowGapError) as info:
        job.run(FIRST + 5, FIRST + 6)
    assert info.value.missing == (FIRST + 3, FIRST + 4)
    assert f"windows {FIRST + 3}..{FIRST + 4} not complete yet" in str(info.value)
    after = job.catalog_state()
    assert after["checkpoints"] == before["checkpoints"]
    assert after["cycles"] == before["cycles"]
    assert_output(job, reference, FIRST + 2)
    # the refused run left the job resting (FAILED, saying why), not half-started
    rec = job.client.catalog.get_job(job.name)
    assert rec.state.value == "FAILED" and "WindowGapError" in (rec.last_error or "")
    # the windows in between, then the ones asked for
    assert job.run(FIRST + 3, FIRST + 4).windows_run == 2
    assert job.run(FIRST + 5, FIRST + 5).windows_run == 1
    assert job.complete() == WINDOWS
    assert_output(job, reference, WINDOWS[-1])


def test_restore_rolls_back_retracts_and_a_rerun_reproduces(make_job, reference):
    job = make_job("rollback")
    job.run(FIRST, FIRST + 4)
    assert_output(job, reference, FIRST + 4)
    snaps_before = job.client.snapshots.list_snapshots(job.name)
    assert len(snaps_before) == 5

    # a window with no checkpoint: refused, nothing rolled back
    before = checkpoints(job)
    with pytest.raises(CheckpointNotFoundError, match=f"no complete checkpoint for window {FIRST + 7}"):
        job.client.restore(job.name, FIRST + 7)
    assert checkpoints(job) == before
    assert_output(job, reference, FIRST + 4)

    info = job.client.restore(job.name, FIRST + 1)
    assert info.state == "STOPPED" and info.last_window == FIRST + 1
    assert job.complete() == [FIRST, FIRST + 1]
    statuses = {c[1]: c[2] for c in checkpoints(job)}
    assert statuses == {
        **{w: CheckpointStatus.COMPLETE for w in (FIRST, FIRST + 1)},
        **{w: CheckpointStatus.ROLLED_BACK for w in (FIRST + 2, FIRST + 3, FIRST + 4)},
    }
    # FileSink, CollectSink and PostgreSQL output of later windows is gone, the rest intact
    assert_output(job, reference, FIRST + 1)

    res = job.run(None, FIRST + 4)  # resumes at the window after the restored one
    assert (res.first_window, res.windows_run) == (FIRST + 2, 3)
    assert_output(job, reference, FIRST + 4)
    assert job.complete() == WINDOWS[:5]
    # the rolled-back windows' snapshots were collected, the new ones are referenced
    live = {cp.snapshot_uri for cp in job.client.catalog.list_checkpoints(job.name)}
    assert set(job.client.snapshots.list_snapshots(job.name)) == live


def test_restore_onto_a_read_only_sink_folder_fails_the_job_and_a_second_restore_finishes(
    make_job, reference, small_disk
):
    """The sink's folder turns read-only: the restore stops with one clear error, leaves the
    job FAILED with it (its checkpoints rolled back, some output not), and the same restore
    run again once the folder is writable finishes the retraction."""
    job = make_job("read_only_sink")
    job.out = small_disk.path / "auction_windows"
    job.run(FIRST, FIRST + 4)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk.path)], check=True)
    try:
        with pytest.raises(StorageAccessError) as refused:
            job.client.restore(job.name, FIRST + 1)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk.path)], check=True)
    message = str(refused.value)
    assert message.startswith(f"job '{job.name}', sink 'auction_files': cannot retract the committed output")
    assert "read-only file system" in message
    assert f"run `lockgate restore {job.name} --window {FIRST + 1}` again" in message
    assert refused.value.folder == str(job.out)
    record = job.client.catalog.get_job(job.name)
    assert record.state.value == "FAILED" and "restore to window" in (record.last_error or "")

    info = job.client.restore(job.name, FIRST + 1)
    assert info.state == "STOPPED" and not info.last_error
    assert_output(job, reference, FIRST + 1)
    res = job.run(None, FIRST + 4)
    assert (res.first_window, res.windows_run) == (FIRST + 2, 3)
    assert_output(job, reference, FIRST + 4)


def test_restore_is_a_catalog_change_that_starts_no_spark(make_job, reference):
    job = make_job("nospark")
    job.run(FIRST, FIRST + 3)
    job.client.close()
    probe = (
        "import sys, psutil\n"
        "from lockgate.client.embedded import EmbeddedClient\n"
        f"c = EmbeddedClient(home={job.client.home!r})\n"
        f"info = c.restore({job.name!r}, {FIRST + 1})\n"
        "from pyspark import SparkContext\n"
        "kids = [p.name() for p in psutil.Process().children(recursive=True)]\n"
        "print(info.state, info.last_window, SparkContext._active_spark_context is None, kids)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(maxsplit=3) == ["STOPPED", str(FIRST + 1), "True", "[]"], done.stdout
    job.client = EmbeddedClient(home=job.client.home)
    assert job.complete() == WINDOWS[:2]
    assert job.run(None, FIRST + 3).windows_run == 2
    assert_output(job, reference, FIRST + 3)


def test_incompatible_state_layout_is_refused_unless_state_is_reset(make_job, reference):
    job = make_job("layout")
    job.run(FIRST, FIRST + 2)
    before, out_before = job.catalog_state(), job.output()
    with pytest.raises(StateLayoutError) as info:
        job.run(FIRST + 3, FIRST + 3, variant="new_aggregate")
    msg = str(info.value)
    assert "operator 'auction_windows' state 'main' changed" in msg and "__low" in msg
    assert f"checkpoint {FIRST + 2}" in msg and "reset_state=True" in msg
    # nothing changed: job (state, plan, generation, pipeline), transitions, checkpoints, cycles,
    # output; the job's record says why the run was refused
    assert without_error(job.catalog_state()) == without_error(before)
    assert job.client.get_job(job.name).last_error == f"StateLayoutError: {msg}"
    assert job.output() == out_before

    res = job.run(FIRST + 3, FIRST + 4, variant="new_aggregate", reset_state=True)
    assert res.state == "FINISHED" and res.windows_run == 2
    cps = job.client.catalog.list_checkpoints(job.name)
    assert [cp.window for cp in cps] == WINDOWS[:5]
    assert len({cp.plan_version for cp in cps[:3]} | {cp.plan_version for cp in cps[3:]}) == 2
    out = job.output()
    # the new plan's windows have the new column
    assert {w for w, r in out["auction_files"] if "low" in dict(r)} == {FIRST + 3}
    assert {w for w, r in out["auction_collect"] if dict(r).get("low") is not None} == {FIRST + 3}
    out = {
        sink: Counter({(w, tuple(kv for kv in r if kv[0] != "low")): n for (w, r), n in rows.items()})
        for sink, rows in out.items()
    }
    for sink in SINKS:  # the windows before the change are untouched
        assert upto(out, FIRST + 2)[sink] == upto(reference, FIRST + 2)[sink]
    # empty state after the change: bidder totals start again from the new window's bids
    new = [dict(r) for (w, r) in out["bidder_pg"] if w == FIRST + 3]
    old = [dict(r) for (w, r) in reference["bidder_pg"] if w == FIRST + 3]
    assert sum(r["bids"] for r in new) < sum(r["bids"] for r in old)


def test_a_changed_window_with_the_same_state_columns_is_refused(make_job, reference):
    """10 s windows made 20 s: the state tables keep their columns, but the partial counts in
    the checkpoint belong to 10 s windows; carrying them on would give wrong counts silently."""
    job = make_job("settings")
    job.run(FIRST, FIRST + 2)
    before, out_before = job.catalog_state(), job.output()
    with pytest.raises(StateLayoutError) as info:
        job.run(FIRST + 3, FIRST + 3, variant="wider_window")
    msg = str(info.value)
    assert "operator 'auction_windows' settings changed (window " in msg and "10000000" in msg and "20000000" in msg
    assert "state 'main' changed" not in msg and "reset_state=True" in msg
    assert without_error(job.catalog_state()) == without_error(before)
    assert job.output() == out_before
    res = job.run(FIRST + 3, FIRST + 3, variant="wider_window", reset_state=True)
    assert res.state == "FINISHED" and res.windows_run == 1


def test_compatible_plan_change_continues_with_state(make_job, reference):
    job = make_job("compatible")
    job.run(FIRST, FIRST + 2)  # the 10 s window [10 s, 20 s) is half in the state now
    res = job.run(FIRST + 3, WINDOWS[-1], variant="filtered")  # a filter before a stateless sink
    assert res.state == "FINISHED" and res.windows_run == 3
    cps = job.client.catalog.list_checkpoints(job.name)
    assert [cp.window for cp in cps] == WINDOWS
    assert cps[2].plan_version != cps[3].plan_version
    # the windowed counts that straddle the change are whole: the state came along
    assert_output(job, reference, WINDOWS[-1])


def _state_files(job: Job, snapshot_uri: str) -> list[Path]:
    return sorted(p for p in Path(snapshot_uri).rglob("*.parquet") if not p.name.startswith(("_", ".")))


def test_damaged_snapshots_are_refused_and_an_earlier_checkpoint_recovers(make_job, reference):
    job = make_job("damaged")
    job.run(FIRST, FIRST + 3)

    # 1. a truncated state file of the last checkpoint
    last = job.client.catalog.last_checkpoint(job.name)
    victim = next(p for p in _state_files(job, last.snapshot_uri) if p.stat().st_size > 0)
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    before, out_before = job.catalog_state(), job.output()
    with pytest.raises(SnapshotError) as info:
        job.run(FIRST + 4, FIRST + 4)
    rel = victim.relative_to(last.snapshot_uri).as_posix()
    assert f"file '{rel}' changed" in str(info.value)
    assert f"window {FIRST + 3}" in str(info.value) and "lockgate restore" in str(info.value)
    # same checkpoints, same state and generation; the job's record says why it did not run
    assert without_error(job.catalog_state()) == without_error(before)
    assert job.client.get_job(job.name).last_error == f"SnapshotError: {info.value}"
    assert job.output() == out_before

    # a rollback to a window whose own snapshot is damaged is refused now, changing nothing
    earlier = job.client.catalog.get_checkpoint(job.name, FIRST + 1)
    next(p for p in _state_files(job, earlier.snapshot_uri) if p.stat().st_size > 0).unlink()
    before = job.catalog_state()
    with pytest.raises(SnapshotError, match=f"window {FIRST + 1}"):
        job.client.restore(job.name, FIRST + 1)
    assert job.catalog_state() == before

    # later checkpoints build on that snapshot's layers (a delta): a rollback to them is
    # refused too, and the message points before the damaged layer
    with pytest.raises(SnapshotError, match=rf"\(W < {FIRST + 1}\)"):
        job.client.restore(job.name, FIRST + 2)
    assert job.catalog_state() == before

    job.client.restore(job.name, FIRST)
    assert job.run(None, FIRST + 4).windows_run == 4
    assert_output(job, reference, FIRST + 4)
    healthy = job.client.get_job(job.name)
    assert (healthy.state, healthy.last_error) == ("FINISHED", None)  # the old error no longer shown

    # 2. the last checkpoint's snapshot folder deleted
    last = job.client.catalog.last_checkpoint(job.name)
    assert last.window == FIRST + 4
    files = [p.relative_to(last.snapshot_uri).as_posix() for p in _state_files(job, last.snapshot_uri)]
    shutil.rmtree(last.snapshot_uri)
    before = job.catalog_state()
    with pytest.raises(SnapshotError) as info:
        job.run(FIRST + 5, FIRST + 5)
    for rel in files:
        assert f"file '{rel}' is missing" in str(info.value)
    assert without_error(job.catalog_state()) == without_error(before)

    job.client.restore(job.name, FIRST + 3)
    assert job.run(None, WINDOWS[-1]).windows_run == 2
    assert job.complete() == WINDOWS
    assert_output(job, reference, WINDOWS[-1])


def test_retention_keeps_the_latest_snapshots_and_restore_works(make_job, reference):
    job = make_job("retention", keep_checkpoints=2)
    job.run(FIRST, FIRST + 4)
    every = job.client.catalog.list_checkpoints(job.name, include_inactive=True)
    assert [(cp.window, cp.status) for cp in every] == [
        *[(w, CheckpointStatus.EXPIRED) for w in WINDOWS[:3]],
        *[(w, CheckpointStatus.COMPLETE) for w in WINDOWS[3:5]],
    ]
    # on disk: exactly the folders the retained checkpoints' layers name (their base and
    # deltas may have been written by rounds whose own checkpoints expired)
    on_disk = job.client.snapshots.list_snapshots(job.name)
    needed = needed_by_all((cp.snapshot_uri, cp.snapshot_manifest) for cp in every[3:])
    assert set(on_disk) == needed and {cp.snapshot_uri for cp in every[3:]} <= needed

    with pytest.raises(CheckpointNotFoundError, match="EXPIRED"):
        job.client.restore(job.name, FIRST + 1)
    job.client.restore(job.name, FIRST + 3)
    assert job.complete() == [FIRST + 3]
    assert Path(every[3].snapshot_uri).exists()  # the latest's snapshot is never deleted
    assert_output(job, reference, FIRST + 3)

    assert job.run(None, WINDOWS[-1]).windows_run == 2
    assert job.complete() == WINDOWS[4:]
    retained = job.client.catalog.list_checkpoints(job.name)
    assert set(job.client.snapshots.list_snapshots(job.name)) == needed_by_all(
        (cp.snapshot_uri, cp.snapshot_manifest) for cp in retained)
    assert_output(job, reference, WINDOWS[-1])
