"""Faults against ``lockgate server`` with real worker processes: kill -9 of the job's worker
and of the controller (restarted at once over the same home) in the middle of a round. The
job's next window must commit (the time from the kill is recorded) and every finished job's
sinks are checked row for row against a pandas reference (rows lost, duplicated, wrong: all 0).

Environment: ``LOCKGATE_FAULTS_WORKER_KILLS`` and ``LOCKGATE_FAULTS_CONTROLLER_KILLS`` (1
each in the test command, about 70 s on 2 cores; 6 and 4 in ``scripts/faults.sh``), ``LOCKGATE_FAULTS_SEED``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from faultlib import ControllerFaults, Tally, env_int, full_loop, interleave, seed

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_served_runs_survive_worker_and_controller_kills(tmp_path: Path, tally: Tally):
    full = full_loop()
    workers = env_int("LOCKGATE_FAULTS_WORKER_KILLS", 6 if full else 1)
    controllers = env_int("LOCKGATE_FAULTS_CONTROLLER_KILLS", 4 if full else 1)
    served = ControllerFaults(tmp_path, tally, random.Random(seed() + 1), windows=12 if full else 8)
    try:
        for kind in interleave(["worker"] * workers, ["controller"] * controllers):
            served.kill(kind)
        served.finish()
    finally:
        served.close()
    assert tally.faults["worker"] >= workers and tally.faults["controller"] >= controllers
    assert (tally.rows["lost"], tally.rows["duplicated"], tally.rows["wrong"]) == (0, 0, 0)
    times = tally.recovery["worker_kill_to_next_commit"] + tally.recovery["controller_kill_to_next_commit"]
    assert all(t < 120 for t in times), times
