"""Window ids and instants: the one place that maps a cycle window to event time and back.

A job's cycle window ``k`` is ``[origin + k·size, origin + (k+1)·size)`` on every run,
so a replay reads the same slice. Everything that turns a window id into an instant
(or an instant into a window id) goes through :class:`WindowClock`.

>>> from datetime import datetime, timedelta, UTC
>>> clock = WindowClock.of(timedelta(seconds=10))
>>> clock.window_of(datetime(1970, 1, 1, 0, 0, 25, tzinfo=UTC))
2
>>> clock.bounds(2)
(datetime.datetime(1970, 1, 1, 0, 0, 20, tzinfo=datetime.timezone.utc), datetime.datetime(1970, 1, 1, 0, 0, 30, tzinfo=datetime.timezone.utc))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The Unix epoch, timezone-aware: instants are microseconds since it."""


def to_micros(t: datetime) -> int:
    """``t`` as whole microseconds since the epoch; a naive ``t`` is taken as UTC."""
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    return micros_of(t - EPOCH)


def from_micros(us: int) -> datetime:
    """The UTC instant ``us`` microseconds after the epoch."""
    return EPOCH + timedelta(microseconds=us)


def micros_of(d: timedelta) -> int:
    """A duration as whole microseconds (any ``timedelta``, pendulum's durations included)."""
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


@dataclass(frozen=True)
class WindowClock:
    """The cycle windows of one job: ``origin_us`` and ``size_us`` in microseconds."""

    origin_us: int
    size_us: int

    def __post_init__(self) -> None:
        if self.size_us <= 0:
            raise ValueError(f"a cycle window must be longer than zero, got {self.size_us} µs")

    @classmethod
    def of(cls, size: timedelta, origin: datetime = EPOCH) -> WindowClock:
        """The clock of windows of ``size`` counted from ``origin``."""
        return cls(to_micros(origin), micros_of(size))

    # -- microseconds ---------------------------------------------------------------
    def start_us(self, window: int) -> int:
        """The first instant (inclusive) of ``window``."""
        return self.origin_us + window * self.size_us

    def end_us(self, window: int) -> int:
        """The end (exclusive) of ``window``."""
        return self.start_us(window + 1)

    def bounds_us(self, window: int) -> tuple[int, int]:
        """``(start, end)`` of ``window``, end exclusive."""
        start = self.start_us(window)
        return start, start + self.size_us

    def window_at_us(self, t_us: int) -> int:
        """The window holding instant ``t_us``."""
        return (t_us - self.origin_us) // self.size_us

    def last_ending_by_us(self, bound_us: int) -> int:
        """The last window that ends at or before ``bound_us``."""
        return self.window_at_us(bound_us) - 1

    def windows_for_us(self, start_us: int, end_us: int) -> tuple[int, int]:
        """The windows ``(first, last)`` (inclusive) that cover ``[start_us, end_us)``."""
        if end_us <= start_us:
            raise ValueError("the end of the range must be after its start")
        return self.window_at_us(start_us), self.window_at_us(end_us - 1)

    # -- datetimes ------------------------------------------------------------------
    @property
    def size(self) -> timedelta:
        return timedelta(microseconds=self.size_us)

    @property
    def size_s(self) -> float:
        return self.size_us / 1e6

    def window_of(self, t: datetime) -> int:
        """The window holding instant ``t``."""
        return self.window_at_us(to_micros(t))

    def start(self, window: int) -> datetime:
        return from_micros(self.start_us(window))

    def end(self, window: int) -> datetime:
        return from_micros(self.end_us(window))

    def bounds(self, window: int) -> tuple[datetime, datetime]:
        """``(start, end)`` of ``window`` as UTC datetimes, end exclusive."""
        return self.start(window), self.end(window)

    def windows_for(self, start: datetime, end: datetime) -> tuple[int, int]:
        """The windows ``(first, last)`` (inclusive) that cover ``[start, end)``."""
        return self.windows_for_us(to_micros(start), to_micros(end))


__all__ = ["EPOCH", "WindowClock", "from_micros", "micros_of", "to_micros"]
