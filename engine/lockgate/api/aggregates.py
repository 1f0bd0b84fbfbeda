"""Aggregate functions for windowed and running aggregates.

Each aggregate is mergeable: its partial state from earlier cycles is combined with the
partials of the current cycle, so a window that spans several cycles, or a running
aggregate over all windows, gives exactly the result of one pass over all its records.

>>> from lockgate import count, max
>>> stream.key_by("auction").window(Tumbling(timedelta(seconds=10))).aggregate(
...     bids=count(), top=max("price"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("count", "sum", "min", "max", "avg", "approx_distinct", "count_distinct", "collect")


@dataclass(frozen=True)
class Aggregate:
    """One aggregate: ``kind`` over ``column`` (``count()`` may have no column)."""

    kind: str
    column: str | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "column": self.column}


def count(column: str | None = None) -> Aggregate:
    """Number of records (non-null values of ``column`` when given)."""
    return Aggregate("count", column)


def sum(column: str) -> Aggregate:
    return Aggregate("sum", column)


def min(column: str) -> Aggregate:
    return Aggregate("min", column)


def max(column: str) -> Aggregate:
    return Aggregate("max", column)


def avg(column: str) -> Aggregate:
    return Aggregate("avg", column)


def approx_distinct(column: str) -> Aggregate:
    """Approximate distinct count (a mergeable HyperLogLog sketch carried between cycles)."""
    return Aggregate("approx_distinct", column)


def count_distinct(column: str) -> Aggregate:
    """Exact number of distinct non-null values of ``column`` (SQL's ``COUNT(DISTINCT c)``).
    The state carries the distinct values themselves, so it grows with them; use
    :func:`approx_distinct` when they are many."""
    return Aggregate("count_distinct", column)


def collect(column: str) -> Aggregate:
    """All values of ``column`` in the window, as an array (sorted, so results are deterministic)."""
    return Aggregate("collect", column)


__all__ = ["KINDS", "Aggregate", "approx_distinct", "avg", "collect", "count", "count_distinct", "max", "min", "sum"]
