"""Crash points for failure testing: kill the whole run at a chosen instant of a round.

Set ``LOCKGATE_FAULT=<point>:<window>`` (e.g. ``after_stage:3``) and the process group
is killed with SIGKILL when window 3 reaches that point, JVM included, exactly as
``kill -9`` would. Points, in round order: ``before_run``, ``before_stage``,
``after_stage``, ``mid_commit`` (after the first sink committed), ``after_commit``,
``after_checkpoint``. Unset in production: then this is one dictionary look-up.
"""

from __future__ import annotations

import os
import signal

POINTS = ("before_run", "before_stage", "after_stage", "mid_commit", "after_commit", "after_checkpoint")


def maybe_crash(point: str, window: int) -> None:
    spec = os.environ.get("LOCKGATE_FAULT")
    if not spec:
        return
    want, _, w = spec.partition(":")
    if want == point and (not w or int(w) == window):
        if os.getpgid(0) == os.getpid():  # our own process group: take the JVM with us
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
