"""kill -9 inside catch-up groups (``LOCKGATE_CATCHUP=4``: the worker runs four windows in one
go, then each is staged and committed on its own): before the group ran, with part of it
staged, after one window's sink commit, between two windows' checkpoint rows, with all of it
staged; a run that resumes from a derived checkpoint (state replayed) is killed again. After
each kill the catalog and the sinks (files and PostgreSQL) are checked against the pandas
reference, and the finished job's output is checked row for row: nothing lost, duplicated or
wrong, no staged file left.

Two plans: the faults' window-exact plan (a filter, 20 s tumbling windows over 10 s cycles: keyed
state crosses every other group end), whose groups run in one pass with one snapshot and derived
checkpoints before it; and (``make test-long``) the same with a running total per customer, not
window-exact, whose groups run each window as a round with its own snapshot.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from faultlib import FaultCheckError, Run, Tally, Workload, full_loop

pytestmark = [pytest.mark.faults, pytest.mark.slow]

#: (crash point, window offset from the next window to run): each run starts a group there
CASES = [
    ("before_stage", 2),  # the group computed, none of it staged (a group stages together): it runs again
    ("after_checkpoint", 1),  # between two windows' commits, the rest staged
    ("mid_commit", 2),  # one sink of window +2 committed
    ("before_run", 0),  # the group's cycles begun, nothing computed
    ("after_stage", 3),  # the whole group staged, nothing committed
]
#: the test command's short form: a group computed but not staged, and one sink of a window committed;
#: ``make faults`` (``LOCKGATE_FAULTS_FULL=1``) kills at every point
SHORT = [CASES[0], CASES[2]]


def _derived(wl: Workload) -> list[int]:
    rows = wl._query('SELECT "window", snapshot_manifest FROM lg_checkpoints WHERE job = ? ORDER BY "window"', wl.job)
    return [w for w, m in rows if m and "__replay" in json.loads(m)]


def _grouped(wl: Workload) -> list[int]:
    """Windows a committed cycle of which ran in a catch-up group."""
    rows = wl._query("SELECT \"window\", timings FROM lg_cycles WHERE job = ? AND state = 'COMMITTED'", wl.job)
    return sorted(w for w, t in rows if t and (json.loads(t) if isinstance(t, str) else t).get("group", 1) > 1)


@pytest.mark.parametrize("running", [
    pytest.param(False, id="window_exact"),
    pytest.param(True, id="running_total", marks=() if full_loop() else pytest.mark.long),  # make faults runs it
])
def test_kills_inside_catch_up_groups_lose_and_duplicate_nothing(
    tmp_path: Path, sink_postgres, tally: Tally, running: bool
):
    full = full_loop()
    wl = Workload(tmp_path, "catchup", windows=22 if full else 14, per_window=60, seed=7, pg_url=sink_postgres.url,
                  running=running)
    env = {"LOCKGATE_CATCHUP": "4"}
    for point, offset in CASES if full else SHORT:
        start = wl.next_window()
        staged = wl.staged()  # windows left staged are committed by the recovery, not run
        if staged is not None and staged >= start:
            start = staged + 1
        window = start + offset
        run = Run(wl, {**env, "LOCKGATE_FAULT": f"{point}:{window}"})
        rc = run.wait()
        if rc != -signal.SIGKILL:
            raise FaultCheckError(f"{point}:{window} did not kill the run (exit {rc}): {run.error_text()[-2000:]}")
        tally.fault("aimed", f"catch-up: {point} at window {window - wl.first}")
        wl.check_partial(f"after {point}:{window}")
    assert _grouped(wl), "no window ran in a catch-up group"
    if running:  # a plan that is not window-exact: each window of a group a round with its own snapshot
        assert not _derived(wl)
    else:
        assert _derived(wl), "no derived checkpoint: the runs did not run one-pass catch-up groups"
    finish = Run(wl, env)
    assert finish.wait() == 0, finish.error_text()[-2000:]
    assert wl.last_complete() == wl.last
    result = tally.job_done(wl)  # raises on any row lost, duplicated or wrong, or a staged file left
    assert result["rows"] > 0 and (result["lost"], result["duplicated"], result["wrong"]) == (0, 0, 0)
