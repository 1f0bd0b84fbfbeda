"""kill -9 at every step of a compaction, on real keyed state.

A running total per customer (30 keys, every round changes most of them) with
``LOCKGATE_STATE_MAX_DELTAS=1``: every other round would stack a second delta, so it folds
its delta and the one before into a new base instead. Each case kills the run in a folding
round at one point of it: before the fold is written (``before_stage``), with the new base
written and nothing committed (``after_stage``), with one sink committed (``mid_commit``),
with every sink committed and no checkpoint row (``after_commit``), and right after the
checkpoint row, before retention deletes what no checkpoint needs any more
(``after_checkpoint``, once retention has started to expire checkpoints). One more kill lands in
the round after a fold, as it releases the base it held in Spark's cache for the new one
(``warm_swapped``: :mod:`lockgate.runtime.state.warm`). After each kill the
catalog and every sink (files and PostgreSQL) are checked against the pandas reference; the
finished job is checked row for row, and the job is then restored on purpose to a window
before a fold and run on: the same output again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from faultlib import LOCKGATE, FaultCheckError, Run, Tally, Workload

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ALL_POINTS = ("before_stage", "after_stage", "mid_commit", "after_commit", "after_checkpoint")
#: the test command's short form: the kill before an expiry's deletes; ``make faults``
#: (``LOCKGATE_FAULTS_FULL=1``) kills at every step
POINTS = (*ALL_POINTS, "warm_swapped") if os.environ.get("LOCKGATE_FAULTS_FULL") else ("after_checkpoint",
                                                                                       "warm_swapped")
ENV = {"LOCKGATE_STATE_MAX_DELTAS": "1", "LOCKGATE_CATCHUP": "off"}
RETAINED = 10  # the CLI's retention: after this many checkpoints the oldest expire


def _manifests(wl: Workload) -> dict[int, dict]:
    rows = wl._query("SELECT \"window\", snapshot_uri, snapshot_manifest FROM lg_checkpoints "
                     "WHERE job = ? AND status = 'COMPLETE' ORDER BY \"window\"", wl.job)
    return {w: {"uri": uri, "manifest": json.loads(m) if m else {}} for w, uri, m in rows}


def _chain(entry: dict) -> list[str]:
    return [layer["kind"] for layer in entry["manifest"]["running.main"]["layers"]]


def _next_fold(wl: Workload, at_least: int) -> int:
    """The first window from ``at_least`` on whose round folds (its chain holds a delta now)."""
    w = max(wl.next_window(), at_least)
    last = _manifests(wl).get(w - 1)
    return w if last is not None and _chain(last) == ["base", "delta"] else w + 1


def test_kills_at_every_step_of_a_compaction_lose_and_duplicate_nothing(tmp_path: Path, sink_postgres, tally: Tally):
    wl = Workload(tmp_path, "compaction", windows=22, per_window=60, seed=11, pg_url=sink_postgres.url,
                  running=True)
    # a first run with no fault: a base, then a delta (the chain the next round folds)
    warm = Run(wl, {**ENV, "LOCKGATE_FAULT": f"before_run:{wl.first + 2}"})
    assert warm.wait() == -signal.SIGKILL, warm.error_text()[-2000:]
    folded = []
    for point in POINTS:
        # after_checkpoint is aimed past the retention, so the kill lands before an expiry's deletes
        window = _next_fold(wl, wl.first + RETAINED + 1 if point == "after_checkpoint" else wl.first)
        if point == "warm_swapped":  # the round after the fold, in the run that folded
            window += 1
        run = Run(wl, {**ENV, "LOCKGATE_FAULT": f"{point}:{window}"})
        rc = run.wait()
        if rc != -signal.SIGKILL:
            raise FaultCheckError(f"{point}:{window} did not kill the run (exit {rc}): {run.error_text()[-2000:]}")
        tally.fault("aimed", f"compaction: {point} at window {window - wl.first}")
        wl.check_partial(f"after {point}:{window}")
        if point != "warm_swapped":
            folded.append(window)
    finish = Run(wl, ENV)
    assert finish.wait() == 0, finish.error_text()[-2000:]
    assert wl.last_complete() == wl.last
    result = tally.job_done(wl)  # raises on any row lost, duplicated or wrong, or a staged file left
    assert result["rows"] > 0 and (result["lost"], result["duplicated"], result["wrong"]) == (0, 0, 0)

    # every killed round did fold: its checkpoint's chain is one base, in its own snapshot
    manifests = _manifests(wl)
    for w in folded:
        if w in manifests:  # the earliest may have expired by retention
            entry = manifests[w]
            layers = entry["manifest"]["running.main"]["layers"]
            assert _chain(entry) == ["base"] and layers[0]["snapshot"] == entry["uri"], (w, layers)
    # no snapshot folder outlives the checkpoints that need it
    needed = {layer["snapshot"].rstrip("/").rsplit("/", 1)[-1] for m in manifests.values()
              for e in m["manifest"].values() if isinstance(e, dict) and "layers" in e for layer in e["layers"]}
    on_disk = {p.name for p in (wl.home / "snapshots" / wl.job).iterdir()}
    assert on_disk == needed, (sorted(on_disk - needed), sorted(needed - on_disk))

    # restore on purpose to a window whose state is a base and a delta (before the next fold)
    target = max(w for w, m in manifests.items() if _chain(m) == ["base", "delta"] and w < wl.last - 2)
    subprocess.run([LOCKGATE, "--home", str(wl.home), "restore", wl.job, "--window", str(target)], check=True,
                   capture_output=True)
    again = Run(wl, ENV)
    assert again.wait() == 0, again.error_text()[-2000:]
    result = wl.check_final()
    assert (result["lost"], result["duplicated"], result["wrong"], result["staged_left"]) == (0, 0, 0, 0), result
