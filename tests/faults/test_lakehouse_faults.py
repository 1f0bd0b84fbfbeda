"""kill -9 around the lakehouse sinks' commits: ``lockgate run`` of the fault workload with a
``DeltaSink`` and an ``IcebergSink`` of the kept orders (appends) and of the per-customer
totals (keyed by window and customer), beside its file sinks, killed with ``LOCKGATE_FAULT``:

- before the table commits (``after_stage``: the round STAGED, nothing committed);
- during them (``in_sink_commit``: the Delta commit applied, the committer's own work not done;
  the same point again kills the replay of that window inside the Iceberg sink's commit);
- after them, before the checkpoint row (``after_commit``: every sink committed).

After each kill every table holds only whole windows, each the pandas reference's, and none
beyond the window being committed; the finished job's tables equal the reference row for row
(nothing lost, duplicated or wrong) and no staged file is left. One window per round
(``LOCKGATE_CATCHUP=off``), so each kill lands on the window it names. ``make faults``
(``LOCKGATE_FAULTS_FULL=1``) also kills between two sinks' commits (``mid_commit``), inside
the keyed Delta and Iceberg commits of a replay, and right after the checkpoint row.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from faultlib import FaultCheckError, Run, Tally, Workload, full_loop
from pyiceberg.catalog.sql import SqlCatalog

import lockgate as lg
from lockgate.runtime.committers import committer_for

pytestmark = [pytest.mark.faults, pytest.mark.slow]

LAKE_SINKS = '''
kept.sink(lg.DeltaSink({out!r} + "/kept_delta"), name="kept_delta")
kept.sink(lg.IcebergSink("faults.kept"), name="kept_iceberg")
totals.sink(lg.DeltaSink({out!r} + "/totals_delta", key=["window_start", "customer"]), name="totals_delta")
totals.sink(lg.IcebergSink("faults.totals", key=["window_start", "customer"]), name="totals_iceberg")
'''
KEPT = ["lg_window", "id", "customer", "amount", "ts"]
TOTALS = ["lg_window", "window_start", "window_end", "customer", "n", "total"]

#: (crash point, window offset from the next window to run; None: the window of the kill before)
SHORT = [("after_stage", 1), ("in_sink_commit", 1), ("in_sink_commit", None), ("after_commit", 1)]
FULL = [("after_stage", 1), ("in_sink_commit", 1), ("in_sink_commit", None), ("in_sink_commit", None),
        ("in_sink_commit", None), ("mid_commit", 1), ("after_commit", 1), ("after_checkpoint", 0)]


def _rows(table: pa.Table | None, kind: str, columns: list[str]) -> Counter:
    if table is None or table.num_rows == 0:
        return Counter()
    cols = [(table[c].cast(pa.int64()) if pa.types.is_timestamp(table[c].type) else table[c]).to_pylist()
            for c in columns]
    return Counter((kind, *row) for row in zip(*cols, strict=True))


class LakehouseWorkload(Workload):
    """The fault workload with the four lakehouse sinks added."""

    def __init__(self, root: Path, job: str, **kwargs):
        super().__init__(root, job, **kwargs)
        self.pipeline.write_text(self.pipeline.read_text() + LAKE_SINKS.format(out=str(self.out)))
        self.expected["kept_delta"] = self.expected["kept_iceberg"] = self.expected["kept_files"]
        self.expected["totals_delta"] = self.expected["totals_iceberg"] = self.expected["totals_files"]

    def _delta(self, name: str) -> pa.Table | None:
        path = self.out / name
        return DeltaTable(str(path)).to_pyarrow_table() if DeltaTable.is_deltatable(str(path)) else None

    def _iceberg(self, name: str) -> pa.Table | None:
        db = self.home / "iceberg" / "catalog.db"
        if not db.exists():
            return None
        catalog = SqlCatalog("lockgate", uri=f"sqlite:///{db}", warehouse=f"file://{self.home}/iceberg/warehouse")
        if not catalog.table_exists(name):
            return None
        return catalog.load_table(name).scan().to_arrow()

    def lake_sinks(self) -> dict[str, dict]:
        """The lakehouse sinks' configurations by name, in the order a round commits them."""
        return {
            "kept_delta": lg.DeltaSink(str(self.out / "kept_delta")).to_config(),
            "kept_iceberg": lg.IcebergSink("faults.kept").to_config(),
            "totals_delta": lg.DeltaSink(str(self.out / "totals_delta"), key=["window_start", "customer"]).to_config(),
            "totals_iceberg": lg.IcebergSink("faults.totals", key=["window_start", "customer"]).to_config(),
        }

    def committed_in(self, window: int) -> list[str]:
        """The lakehouse sinks that hold ``window`` (their committers say so)."""
        return [name for name, sink in self.lake_sinks().items()
                if committer_for(sink, str(self.home)).is_committed(self.job, name, window)]

    def output(self) -> dict[str, Counter]:
        got = super().output()
        got["kept_delta"] = _rows(self._delta("kept_delta"), "kept", KEPT)
        got["kept_iceberg"] = _rows(self._iceberg("faults.kept"), "kept", KEPT)
        got["totals_delta"] = _rows(self._delta("totals_delta"), "totals", TOTALS)
        got["totals_iceberg"] = _rows(self._iceberg("faults.totals"), "totals", TOTALS)
        return got


def test_kills_around_lakehouse_commits_lose_and_duplicate_nothing(tmp_path: Path, tally: Tally):
    full = full_loop()
    steps = FULL if full else SHORT
    wl = LakehouseWorkload(tmp_path, "lakehouse", windows=len(steps) + 2, per_window=30, seed=11)
    env = {"LOCKGATE_CATCHUP": "off"}
    window, again = None, 0
    for point, offset in steps:
        if offset is not None:
            window, again = wl.next_window() + offset, 0
        else:
            again += 1
        run = Run(wl, {**env, "LOCKGATE_FAULT": f"{point}:{window}"})
        rc = run.wait()
        if rc != -signal.SIGKILL:
            raise FaultCheckError(f"{point}:{window} did not kill the run (exit {rc}): {run.error_text()[-2000:]}")
        tally.fault("aimed", f"lakehouse: {point} at window {window - wl.first}")
        tally.aimed[f"lakehouse:{point}"] += 1
        wl.check_partial(f"after {point}:{window}")
        tally.partial_checks += 1
        if point == "in_sink_commit":  # each kill lands in the next lakehouse sink's commit of the window
            assert wl.committed_in(window) == list(wl.lake_sinks())[:again + 1], (again, wl.committed_in(window))
    finish = Run(wl, env)
    assert finish.wait() == 0, finish.error_text()[-2000:]
    assert wl.last_complete() == wl.last
    result = tally.job_done(wl)  # raises on any row lost, duplicated or wrong, or a staged file left
    assert result["rows"] > 0 and (result["lost"], result["duplicated"], result["wrong"]) == (0, 0, 0)
