"""Catch-up: how many due windows the scheduler hands a worker as one group.

When a job is behind (a backfill, an Airflow catch-up, ``--until-caught-up`` after a pause)
running one round per window pays a round's fixed cost (reading the sources, a Spark job per
state table and sink, a snapshot) for every window. A *catch-up group* runs consecutive due
windows in one go on the worker (sources read once, state carried in memory, one snapshot at
the group's end) and still commits every window on its own, in order, each with its own
checkpoint row: see :meth:`lockgate.runtime.cycle.CycleRunner.run_group`.

A run's ``catchup`` option (``lockgate run --catchup``, ``Client.run(catchup=...)``, the Airflow
operators' ``catchup``) sets the group size; ``LOCKGATE_CATCHUP`` is the default for runs that
give none:

- ``auto`` (default): adaptive, up to :data:`AUTO_MAX` windows, aiming at groups of about
  :data:`TARGET_S` seconds, so a drain or a failure never waits long and progress keeps moving;
  a group takes a small tail along rather than leave it to a group of its own.
  The first group of a run is sized from what the job's recent windows took (a job's next DAG run,
  a backlog resumed), or :data:`AUTO_START` windows for a job with no history;
- a whole number ``N``: groups of at most ``N`` windows;
- ``off`` (or ``1``): one window per round.

A window that is due alone (a continuous job keeping up) always runs alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import InvalidArgumentError

#: the largest adaptive group: per window, larger groups measured no faster (bench.backfill
#: 2026-11-28: W1 18-19 ms a window in groups of 64, 22 in one of 198; W3 12 against 20-26);
#: a group may take a tail of up to a quarter more along (:meth:`GroupSizer.next`)
AUTO_MAX = 64
#: the first adaptive group
AUTO_START = 4
#: the largest group a fixed size may ask for
MAX_GROUP = 10_000
#: seconds an adaptive group aims at
TARGET_S = 10.0
#: how much an adaptive group may grow over the last one. A group's windows also share its fixed
#: cost, so they look slower than they are and the time target alone keeps growth cautious; the
#: cap guards against costs that grow faster than the windows (bench.backfill W1: growing 4, 16,
#: 64 instead of 4, 8, 16, 32, 64 took 3 s off 199 windows; 4, 64 instead of 4, 16, 64 took
#: 0.3 s off W1 and 0.5 s off W3, 2026-11-28)
GROWTH = 16


@dataclass
class GroupSizer:
    """The size of the next catch-up group: fixed (``adaptive=False``) or adapted to how long
    the last group's windows took."""

    limit: int
    adaptive: bool
    size: int

    @classmethod
    def from_setting(cls, raw: str | None = None) -> GroupSizer:
        """Parse ``LOCKGATE_CATCHUP`` (or ``raw``): ``auto``, ``off`` or a whole number."""
        if raw is None:
            return cls.parse(os.environ.get("LOCKGATE_CATCHUP", ""), "LOCKGATE_CATCHUP")
        return cls.parse(raw, "LOCKGATE_CATCHUP")

    @classmethod
    def parse(cls, value: str | int, setting: str = "catchup") -> GroupSizer:
        """A group size from ``value`` (``"auto"`` or empty, ``"off"``, or a whole number of
        windows, as a string or an int); ``setting`` names it in the error."""
        text = str(value).strip().lower()
        if text in ("", "auto"):
            return cls(AUTO_MAX, True, AUTO_START)
        if text == "off":
            return cls(1, False, 1)
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1 or n > MAX_GROUP:
            raise InvalidArgumentError(
                f"{setting}={value!r}: expected 'auto' (adaptive groups, the default), 'off', or the most "
                f"windows a catch-up group may hold (1 to {MAX_GROUP})"
            )
        return cls(n, False, n)

    def next(self, due: int) -> int:
        """Windows the next group takes when ``due`` windows are left to run. An adaptive group
        also takes a tail of at most a quarter of its size (66 due, groups of 64: one group,
        not a second one of 2 windows paying a whole group's fixed cost)."""
        size = max(1, min(self.size, self.limit, due))
        if self.adaptive and due - size <= size // 4:
            size = due
        return size

    def seed(self, seconds_per_window: float | None) -> None:
        """Size the first group from the job's history: about :data:`TARGET_S` seconds of windows
        that took ``seconds_per_window`` each (never below :data:`AUTO_START`; ``None``: no
        history, the size stays)."""
        if not self.adaptive or seconds_per_window is None or seconds_per_window <= 0:
            return
        self.size = max(AUTO_START, min(self.limit, int(TARGET_S / seconds_per_window)))

    def observe(self, windows: int, seconds: float) -> None:
        """Adapt to a group of ``windows`` that took ``seconds`` (growing at most :data:`GROWTH`
        times each time)."""
        if not self.adaptive or windows < 1 or seconds <= 0:
            return
        per_window = seconds / windows
        wanted = int(TARGET_S / per_window)
        self.size = max(2, min(self.limit, wanted, max(self.size, windows) * GROWTH))


def check_catchup(value: str | int, setting: str = "catchup") -> str:
    """``value`` as a catch-up setting, checked and normalised (``"auto"``, ``"off"`` or a
    number as text); raises :class:`~lockgate.errors.InvalidArgumentError` naming ``setting``.

    >>> check_catchup(" Auto "), check_catchup(8)
    ('auto', '8')
    """
    GroupSizer.parse(value, setting)
    return str(value).strip().lower() or "auto"
