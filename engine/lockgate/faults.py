"""Crash points for failure testing: kill the whole run at a chosen instant of a round.

Set ``LOCKGATE_FAULT=<point>:<window>`` (e.g. ``after_stage:3``) and the process group
is killed with SIGKILL when window 3 reaches that point, JVM included, exactly as
``kill -9`` would. Without ``:<window>`` the first window to reach the point dies.
Points, in round order: ``before_run``, ``before_stage``, ``after_stage``,
``mid_commit`` (after the first sink, by name, committed; needs two sinks or more),
``after_commit``, ``after_checkpoint``. The commit points also fire while a restarted
run replays a staged window's commit, so a crash during recovery can be aimed at too.
Inside a round, ``mid_iteration`` fires in a graph computation's iteration cycle once
superstep ``LOCKGATE_FAULT_SUPERSTEP`` (default 2) of that window is complete.
Inside a Delta or Iceberg sink's commit, ``in_sink_commit`` fires once the table commit is
applied and before the committer deletes the staged output and reports the commit.
``warm_swapped`` fires when a round starts from a new base of a state table and releases the one
the run held in Spark's cache (the round after a fold into a new base:
:mod:`lockgate.runtime.state.warm`), before anything reads either.

The process group is killed only when this process leads it (``start_new_session``,
as a test or a supervisor starts a run); otherwise only this process is killed, and the
Spark JVM, which watches its parent, exits on its own. A malformed ``LOCKGATE_FAULT``
is an error at the first crash point, never a silently ignored fault. Unset in
production: then this is one dictionary look-up.

``LOCKGATE_FAULT_PAUSE=<seconds>`` turns the crash into a pause at the same point: the
run sleeps there, so a test can let another run of the job take it over at a known
instant (the paused run then finds itself fenced).
"""

from __future__ import annotations

import os
import signal
import time

from .errors import InvalidArgumentError

POINTS = ("before_run", "before_stage", "after_stage", "mid_commit", "after_commit", "after_checkpoint")
#: crash points inside a round's iteration cycle (graph computations)
ITERATION_POINTS = ("mid_iteration",)
#: crash points inside one sink's commit (the lakehouse sinks: Delta, Iceberg)
SINK_POINTS = ("in_sink_commit",)
#: crash points inside a round's state handling
STATE_POINTS = ("warm_swapped",)

ENV = "LOCKGATE_FAULT"
PAUSE_ENV = "LOCKGATE_FAULT_PAUSE"
SUPERSTEP_ENV = "LOCKGATE_FAULT_SUPERSTEP"


def parse(spec: str) -> tuple[str, int | None]:
    """``(point, window)`` of a ``LOCKGATE_FAULT`` value (window None: any window)."""
    point, sep, window = spec.strip().partition(":")
    if point not in POINTS + ITERATION_POINTS + SINK_POINTS + STATE_POINTS or (sep and not window.strip().lstrip("-").isdigit()):
        raise InvalidArgumentError(
            f"{ENV}={spec!r}: expected <point>[:<window>], the point one of {', '.join(POINTS)} "
            f"(or {', '.join(ITERATION_POINTS + SINK_POINTS + STATE_POINTS)}) and the window an integer, e.g. after_stage:3"
        )
    return point, (int(window) if sep else None)


def crash() -> None:
    """SIGKILL this run: its whole process group when it leads one, else this process."""
    if os.getpgid(0) == os.getpid():  # our own process group: take the JVM with us
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_crash(point: str, window: int) -> None:
    """Crash here when ``LOCKGATE_FAULT`` names this point (and this window)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    want, at = parse(spec)
    if want == point and (at is None or at == window):
        pause = os.environ.get(PAUSE_ENV)
        if pause:
            try:
                seconds = float(pause)
            except ValueError:
                raise InvalidArgumentError(f"{PAUSE_ENV}={pause!r}: expected a number of seconds") from None
            time.sleep(seconds)
            return
        crash()


def maybe_crash_in_iteration(window: int, superstep: int) -> None:
    """Crash here when ``LOCKGATE_FAULT`` names ``mid_iteration`` (and this window) and
    ``superstep`` is ``LOCKGATE_FAULT_SUPERSTEP`` (default 2)."""
    spec = os.environ.get(ENV)
    if not spec or not spec.strip().startswith("mid_iteration"):
        return
    raw = os.environ.get(SUPERSTEP_ENV, "2").strip()
    if not raw.isdigit():
        raise InvalidArgumentError(f"{SUPERSTEP_ENV}={raw!r}: expected the superstep to crash after, e.g. 2")
    if superstep == int(raw):
        maybe_crash("mid_iteration", window)
