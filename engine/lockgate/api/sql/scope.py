"""What the SQL compiler knows while it builds: the relations a query reads, how their columns
resolve, and the small parsers (durations, conjuncts, window specs) every clause shares."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ...errors import CompileError
from ..stream import Stream
from ..windows import Sliding, Tumbling, WindowSpec

DIALECT = "spark"
_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60, "hour": 3600, "day": 86400}
#: the functions of a GROUP BY window, and the qualifiers of their columns (window.start)
WINDOW_FNS = ("window", "session_window")


def load_sqlglot() -> tuple[Any, Any]:
    """sqlglot and its expression module."""
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise CompileError("Pipeline.sql needs the sqlglot package (pip install sqlglot)") from err
    return sqlglot, exp


def duration(text: str, where: str, name: str) -> timedelta:
    """``'10 seconds'``, ``'1 minute'``, ``'500 milliseconds'`` as a timedelta."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*", text.lower())
    if not m or m.group(2) not in _UNITS:
        raise CompileError(f"{where}: {text!r} is not a duration; write e.g. '10 seconds' or '1 minute'", name)
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


@dataclass
class Relation:
    """What the compiler knows of a stream a query reads: its columns when known (a Nexmark
    source, a stream made by ``Pipeline.sql``), its event-time column, and, for the output of
    a windowed aggregate, the window and the names of its start and end columns."""

    stream: Stream
    columns: list[str] | None = None
    event_time: str | None = None
    window: WindowSpec | None = None
    window_columns: dict[str, str] = field(default_factory=dict)  # "start"/"end" -> column
    #: an updating result (a running aggregate, an unbounded top-N): rows replace rows by key
    updating: bool = False
    #: an updating result with an ``op`` column (an aggregate over updates)
    has_op: bool = False


class Scope:
    """How the columns a query names resolve to the columns of the stream it has built:
    ``(alias, column)`` to a column name, for each relation of its FROM clause."""

    def __init__(self, exp: Any, aliases: dict[str, dict[str, str] | None], name: str):
        self.exp, self.aliases, self.name = exp, aliases, name

    def column(self, table: str, col: str) -> str:
        if table:
            cols = self.aliases[table]
            if cols is None:
                return col
            if col not in cols:
                raise CompileError(f"{table}.{col}: {table} has no column {col} (columns: {', '.join(cols)})",
                                   self.name)
            return cols[col]
        known = [cols for cols in self.aliases.values() if cols is not None]
        if len(self.aliases) == 1 or not known:
            only = next(iter(self.aliases.values()))
            return only.get(col, col) if only else col
        hits = [cols[col] for cols in known if col in cols]
        if len(hits) == 1:
            return hits[0]
        where = "both streams" if hits else "no stream of the FROM clause"
        raise CompileError(f"column {col} is in {where}: qualify it with its stream's alias "
                           f"({' or '.join(f'{a}.{col}' for a in self.aliases)})", self.name)

    def resolve(self, e: Any) -> Any:
        """``e`` with every column written as the name it has in the built stream."""
        def rename(node: Any) -> Any:
            if not isinstance(node, self.exp.Column) or isinstance(node.this, self.exp.Star):
                return node
            if node.table.lower() in WINDOW_FNS or (node.table and node.table not in self.aliases):
                return node  # window.start, or a struct field (t.bidder)
            return self.exp.column(self.column(node.table, node.name))

        return e.copy().transform(rename)

    def sql(self, e: Any) -> str:
        return self.resolve(e).sql(dialect=DIALECT)


def conjuncts(exp: Any, e: Any) -> list[Any]:
    if isinstance(e, exp.And):
        return conjuncts(exp, e.this) + conjuncts(exp, e.expression)
    if isinstance(e, exp.Paren):
        return conjuncts(exp, e.this)
    return [e]


def slide(spec: WindowSpec) -> timedelta:
    return spec.slide if isinstance(spec, Sliding) else spec.size  # type: ignore[union-attr]


def spec_of(config: dict[str, Any]) -> WindowSpec | None:
    """The window spec of a window config (Session windows end at no fixed slide: None)."""
    kind = config.get("type")
    size = timedelta(microseconds=config.get("size_us", 0))
    if kind == "tumbling":
        return Tumbling(size)
    if kind == "sliding":
        return Sliding(size, timedelta(microseconds=config["slide_us"]))
    return None
