"""Windows of windowed operators, and the watermark.

Two kinds of window are kept apart in Lockgate. The *cycle window* is the slice of input
one cycle round processes and checkpoints; it is set on the :class:`~lockgate.Pipeline`
(``cycle_window=timedelta(minutes=1)``). The windows here belong to windowed operators
(``stream.key_by(...).window(Tumbling(...)).aggregate(...)``); they may be smaller than a
cycle window, equal to it, or span several cycles, in which case their partial state is
carried in the checkpoint and they emit once the watermark passes their end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any


def _micros(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


@dataclass(frozen=True)
class Tumbling:
    """Fixed, non-overlapping windows of ``size`` on an event-time column.

    >>> Tumbling(timedelta(seconds=10))
    Tumbling(size=datetime.timedelta(seconds=10), on=None)
    """

    size: timedelta
    on: str | None = None

    def to_config(self) -> dict[str, Any]:
        return {"type": "tumbling", "size_us": _micros(self.size), "on": self.on}


@dataclass(frozen=True)
class Sliding:
    """Windows of ``size`` starting every ``slide`` (hopping windows); a record is in ``size/slide`` windows."""

    size: timedelta
    slide: timedelta
    on: str | None = None

    def to_config(self) -> dict[str, Any]:
        return {"type": "sliding", "size_us": _micros(self.size), "slide_us": _micros(self.slide), "on": self.on}


@dataclass(frozen=True)
class Session:
    """Per-key session windows closed after ``gap`` of inactivity; a session may span many cycles.

    A record at ``t`` makes the session ``[t, t + gap)``; sessions of a key that overlap or
    touch merge (a record exactly ``gap`` after the last one joins its session), as in Spark's
    ``session_window``. A session is emitted once the watermark is past its end.

    >>> Session(timedelta(seconds=10))
    """

    gap: timedelta
    on: str | None = None

    def to_config(self) -> dict[str, Any]:
        return {"type": "session", "gap_us": _micros(self.gap), "on": self.on}


WindowSpec = Tumbling | Sliding | Session


@dataclass(frozen=True)
class Watermark:
    """How far event time may lag behind the cycle position, and what happens to late records.

    The watermark after cycle window ``W`` is ``end(W) - lateness``; it is a function of
    the window id alone, so a replay of ``W`` sees exactly the same watermark. A record
    read in cycle ``W`` whose event time is below the watermark at the start of ``W`` is
    late: it is counted, and dropped (``late="drop"``) or written to a side sink
    (``late=FileSink(...)``).
    """

    lateness: timedelta = timedelta(0)
    late: Any = "drop"

    def to_config(self) -> dict[str, Any]:
        late = self.late
        return {
            "lateness_us": _micros(self.lateness),
            "late": "drop" if isinstance(late, str) else {"sink": late.to_config()},
        }
