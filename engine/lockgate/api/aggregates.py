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

KINDS = ("count", "sum", "min", "max", "avg", "approx_distinct", "count_distinct", "collect", "top_k")


@dataclass(frozen=True)
class Aggregate:
    """One aggregate: ``kind`` over ``column`` (``count()`` may have no column)."""

    kind: str
    column: str | None = None
    #: top_k: how many rows, the order columns, the carried columns, the direction
    k: int | None = None
    by: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    ascending: bool = False

    def to_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "column": self.column}
        if self.kind == "top_k":
            out.update(k=self.k, by=list(self.by), columns=list(self.columns), ascending=self.ascending)
        return out


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


def top_k(k: int, by: str | list[str], columns: list[str] | None = None, ascending: bool = False) -> Aggregate:
    """The ``k`` first rows by ``by`` (largest first unless ``ascending``), as an array of structs
    holding the ``by`` columns then ``columns``; ties are broken by the carried columns. It merges
    exactly (the state keeps k rows per key), so a running aggregate of it is an unbounded
    top-N per key, and ``top_k(1, by="date_time", columns=[...])`` the latest row per key. Make
    rows of it with ``select("key", "posexplode(top) AS (rank0, t)")``.

    >>> bids.key_by("auction").aggregate(top=top_k(10, by="price", columns=["bidder", "date_time"]))
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"top_k() needs k >= 1, got {k!r}")
    order = (by,) if isinstance(by, str) else tuple(by)
    if not order:
        raise ValueError("top_k() needs the column(s) to order by, e.g. by='price'")
    carried = tuple(c for c in (columns or ()) if c not in order)
    return Aggregate("top_k", order[0], k=k, by=order, columns=carried, ascending=ascending)


def collect(column: str) -> Aggregate:
    """All values of ``column`` in the window, as an array (sorted, so results are deterministic)."""
    return Aggregate("collect", column)


__all__ = ["KINDS", "Aggregate", "approx_distinct", "avg", "collect", "count", "count_distinct", "max", "min", "sum",
           "top_k"]
