"""Two real runs of one job, started close together on one home: the later run takes the
job over, the earlier one stops with one line (fenced), removes what it wrote late, and
the output is the reference's, row for row.

Run A pauses (``LOCKGATE_FAULT_PAUSE``, long enough for B's Spark to start on a loaded
machine) at the start of a round, after its cycle row was written; run B starts meanwhile, takes the job over, deletes A's staging and runs every
window. A then wakes, runs its round in Spark (writing staged output and a snapshot for
an attempt that can never commit), and finds itself fenced when it stages: it must
exit 2 with the fenced error and leave no file behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from small_disk import mount, unmount

from lockgate.api.loader import load_pipeline
from lockgate.checkpoint.catalog import Catalog
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.client.embedded import EmbeddedClient
from lockgate.control.scheduler import CycleScheduler
from lockgate.runtime.compiler import compile_pipeline
from lockgate.runtime.staging import staging_uri
from lockgate.states import JobState

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s windows
LAST = FIRST + 3
PAUSED = FIRST + 1
LOCKGATE = str(Path(sys.executable).with_name("lockgate"))  # the installed CLI

PIPELINE = """
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("fenced", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=200, seed=11, start="2026-01-01T00:00:00", max_events=4_000),
    name="bids",
)
totals = bids.key_by("bidder").aggregate(bids=lg.count(), spent=lg.sum("price"), name="totals")
totals.sink(lg.FileSink({out!r}), name="totals_files")
"""


def _cli(home: Path, pipeline: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LOCKGATE, "--home", str(home), "run", pipeline, "--job", "fenced",
         "--from-window", str(FIRST), "--to-window", str(LAST), "--no-progress"],
        env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _rows(out: Path) -> list[tuple]:
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    return sorted(tuple(r.values()) for r in table.select(sorted(table.column_names)).to_pylist())


def test_the_earlier_of_two_runs_is_fenced_cleanly_and_leaves_nothing(tmp_path: Path, spark: Any) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    path = tmp_path / "fenced.py"
    path.write_text(PIPELINE.format(out=str(out)))
    ref = f"{path}:pipeline"

    a = _cli(home, ref, {"LOCKGATE_FAULT": f"before_run:{PAUSED}", "LOCKGATE_FAULT_PAUSE": "50"})
    catalog_db = home / "catalog.db"
    _wait_for(catalog_db.exists, 120, "run A's catalog")
    catalog = Catalog(f"sqlite:///{catalog_db}")

    def a_paused() -> bool:
        try:
            return any(c.window == PAUSED for c in catalog.list_cycles("fenced", limit=100))
        except Exception:
            return False

    _wait_for(a_paused, 120, "run A to begin its round of the paused window")
    b = _cli(home, ref)
    b_out, b_err = b.communicate(timeout=240)
    a_out, a_err = a.communicate(timeout=240)

    assert b.returncode == 0, b_err
    assert a.returncode == 2, (a_out, a_err)
    lines = [ln for ln in a_err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lockgate: error: "), a_err
    assert "another run took the job over" in lines[0]
    # A is fenced in the paused window, or (when B took longer than A's pause to take the job over,
    # on a loaded machine) in a later one: either way at its next catalog write after B acquired it
    fenced_at = re.search(r"window (\d+)", lines[0])
    assert fenced_at is not None and PAUSED <= int(fenced_at.group(1)) <= LAST, lines[0]
    assert "Traceback" not in a_err and "at org.apache" not in a_err

    # the job is B's and healthy; A recorded nothing over it
    job = catalog.get_job("fenced")
    assert (job.state.value, job.last_error) == ("FINISHED", None)
    assert [cp.window for cp in catalog.list_checkpoints("fenced")] == list(range(FIRST, LAST + 1))

    # nothing left behind: no staged attempt, no snapshot but the checkpoints'
    staging = out / "_staging"
    assert not staging.exists() or not any(p.is_dir() for p in staging.rglob("w=*")), list(staging.rglob("*"))
    kept = {Path(cp.snapshot_uri).name for cp in catalog.list_checkpoints("fenced")}
    on_disk = {p.name for p in (home / "snapshots" / "fenced").iterdir()}
    assert on_disk == kept

    # the output, row for row, is that of one uninterrupted run (in this process's Spark)
    ref_out = tmp_path / "ref_out"
    ref_path = tmp_path / "reference.py"
    ref_path.write_text(PIPELINE.format(out=str(ref_out)))
    client = EmbeddedClient(home=str(tmp_path / "ref_home"))
    try:
        assert client.run(f"{ref_path}:pipeline", job="fenced", first=FIRST, last=LAST).windows_run == 4
    finally:
        client.close()
    want = _rows(ref_out)
    assert want and _rows(out) == want


def test_a_folder_the_sweep_cannot_delete_is_left_to_the_next_sweep(tmp_path: Path, spark: Any) -> None:
    """The run that takes a job over deletes every staged attempt and unneeded snapshot.
    One it cannot delete (a fenced run's executors still writing into it; here, for a
    failure that does not depend on timing, a mount inside it) is left: nothing refers to
    it, so the run goes on instead of failing, and the next sweep takes it."""
    home, out = tmp_path / "home", tmp_path / "out"
    path = tmp_path / "fenced.py"
    path.write_text(PIPELINE.format(out=str(out)))
    graph = compile_pipeline(load_pipeline(f"{path}:pipeline"), spark).graph
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    snapshots = SnapshotStore(home / "snapshots")
    sink = graph.vertices["totals_files"].config["sink"]
    snapshot = Path(snapshots.snapshot_uri("fenced", PAUSED, 2))
    staged = Path(staging_uri(sink, job="fenced", sink_name="totals_files", window=PAUSED, attempt=2, home=str(home)))

    def take_over() -> CycleScheduler:
        scheduler = CycleScheduler(catalog, snapshots, graph, "fenced", str(home), executor=None)  # type: ignore[arg-type]
        scheduler.prepare()
        return scheduler

    for folder in (snapshot, staged):
        mount(folder / "op", "size=1m")
        (folder / "op" / "part-0.parquet").write_bytes(b"x")
    try:
        first = take_over()
        assert first.state == JobState.SCHEDULING and catalog.get_job("fenced").last_error is None
        assert snapshot.is_dir() and staged.is_dir()
    finally:
        for folder in (snapshot, staged):
            unmount(folder / "op")

    second = take_over()
    assert second.generation == first.generation + 1
    assert not snapshot.exists() and not staged.exists()
    catalog.close()
