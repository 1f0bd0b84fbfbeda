"""Faults against ``lockgate run`` on the embedded default: kill -9 of whole runs at random
instants and at the commit phase (``LOCKGATE_FAULT``: a round STAGED, one sink committed, a
replay killed again), the PostgreSQL sink stopped, the sinks' disk filled, several runs of
one job started at once; every finished job's sinks checked row for row against a pandas
reference (rows lost, duplicated, wrong: all 0).

The test command runs one fault of each kind (about 2.5 minutes on 2 cores);
``scripts/faults.sh`` runs the full loop. Environment: ``LOCKGATE_FAULTS_KILLS`` (random
kills; 1, or 30 in the full loop), ``LOCKGATE_FAULTS_SEED``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from faultlib import AIMED, Chain, Tally, env_int, full_loop, interleave, seed

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_embedded_runs_lose_and_duplicate_nothing(tmp_path: Path, sink_postgres, sinks_disk, tally: Tally):
    full = full_loop()
    chain = Chain(tmp_path, tally, random.Random(seed()), pg=sink_postgres, disk=sinks_disk,
                  windows=12 if full else 8)
    kills = env_int("LOCKGATE_FAULTS_KILLS", 30 if full else 1)
    aimed = AIMED if full else AIMED[:1]  # mid_commit: the round STAGED, one sink of three committed
    for point, at in aimed:
        chain.aimed_kill(point, at)
    others = interleave(
        ["random"] * kills,
        ["outage:mid-run", "outage:at-start", "outage:mid-run"] if full else ["outage:mid-run"],
        ["disk"] * ((2 if full else 1) if sinks_disk is not None else 0),
        [f"concurrent:{n}" for n in ((2, 4, 8) if full else (2,))],
    )
    for step in others:
        kind, _, arg = step.partition(":")
        if kind == "random":
            chain.random_kill()
        elif kind == "outage":
            chain.sink_outage(arg)
        elif kind == "disk":
            chain.disk_full()
        else:
            chain.concurrent(int(arg))
    chain.finish()
    assert tally.jobs_checked >= 1
    assert (tally.rows["lost"], tally.rows["duplicated"], tally.rows["wrong"]) == (0, 0, 0)
    assert tally.faults["random"] >= kills and tally.faults["aimed"] >= len(aimed)
    assert tally.faults["sink_outage"] >= 1 and tally.faults["concurrent"] >= 1
    assert tally.faults["disk_full"] >= 1 or sinks_disk is None
