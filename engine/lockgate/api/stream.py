"""Stream and WindowedStream: the operators a pipeline's records flow through.

A :class:`Stream` is made by ``Pipeline.source`` (or ``Pipeline.sql``, or a graph's
``compute``/``traverse``); each of its methods declares one operator on the pipeline and
returns the operator's output. Nothing runs here: see :mod:`lockgate.api.pipeline`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..errors import CompileError
from .aggregates import Aggregate
from .nodes import Input, PipelineNodes
from .sinks import Sink
from .tables import FileTable, LookupTable, PostgresTable
from .windows import Session, Sliding, Tumbling, WindowSpec, _micros


class Stream:
    """A stream of records between two operators. Methods add an operator and return its output."""

    def __init__(self, pipeline: PipelineNodes, node: str, keys: tuple[str, ...] | None = None):
        self.pipeline = pipeline
        self.node = node
        self.keys = keys

    def _input(self) -> Input:
        return Input(self.node, self.keys)

    def _then(self, op: str, config: dict[str, Any], name: str | None, **kw: Any) -> Stream:
        node = self.pipeline._add(op, [self._input()], config, name, **kw)
        return Stream(self.pipeline, node.id)

    # -- stateless -------------------------------------------------------------------
    def select(self, *exprs: str, name: str | None = None) -> Stream:
        """Project with Spark SQL expressions: ``select("auction", "price * 0.9 AS price_eur")``."""
        if not exprs:
            raise ValueError("select() needs at least one expression")
        return self._then("select", {"exprs": list(exprs)}, name)

    def with_column(self, column: str, expr: str, name: str | None = None) -> Stream:
        """Add or replace ``column`` with a Spark SQL expression."""
        return self._then("with_column", {"column": column, "expr": expr}, name)

    def filter(self, condition: str, name: str | None = None) -> Stream:
        """Keep records where the Spark SQL ``condition`` holds."""
        return self._then("filter", {"condition": condition}, name)

    def map_batches(
        self,
        fn: Callable[[Any], Any],
        schema: str | None = None,
        name: str | None = None,
    ) -> Stream:
        """Apply ``fn(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch`` to every batch (mapInArrow).

        :param schema: Spark DDL of the output; defaults to the input's schema.
        """
        ref = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        try:
            code = inspect.getsource(fn)
        except (OSError, TypeError):
            code = ref
        config = {"fn": ref, "fn_hash": hashlib.sha256(code.encode()).hexdigest()[:16], "schema": schema}
        return self._then("map_batches", config, name, fn=fn)

    def sql(self, query: str, name: str | None = None) -> Stream:
        """Run Spark SQL over each cycle's records of this stream, visible as the view ``input``.

        >>> stream.sql("SELECT auction, count(*) AS n FROM input GROUP BY auction")
        """
        return self._then("sql", {"query": query}, name)

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Records of this stream and of ``others`` (same columns and types required)."""
        if not others:
            raise ValueError("union() needs at least one other stream")
        for o in others:
            if o.pipeline is not self.pipeline:
                raise ValueError("union() of streams from different pipelines")
        inputs = [self._input(), *(o._input() for o in others)]
        node = self.pipeline._add("union", inputs, {}, name)
        return Stream(self.pipeline, node.id)

    # -- keyed and stateful ----------------------------------------------------------
    def key_by(self, *columns: str) -> Stream:
        """Partition by ``columns`` (a hash shuffle); keyed operators follow."""
        if not columns:
            raise ValueError("key_by() needs at least one column")
        return Stream(self.pipeline, self.node, tuple(columns))

    def window(self, spec: WindowSpec) -> WindowedStream:
        """Assign records to windows of a windowed operator (tumbling, sliding or session)."""
        if not isinstance(spec, Tumbling | Sliding | Session):
            raise TypeError(f"window() takes Tumbling, Sliding or Session, got {spec!r}")
        return WindowedStream(self, spec)

    def aggregate(self, name: str | None = None, **aggs: Aggregate) -> Stream:
        """Running aggregate across windows: keyed state carried from cycle to cycle.

        Each cycle emits the updated totals of the keys seen in it, with ``as_of`` (the
        cycle window's end).
        """
        _check_aggs(aggs)
        config = {"keys": list(self.keys or ()), "aggs": {k: a.to_config() for k, a in aggs.items()}}
        return self._then("running_aggregate", config, name)

    def over(self, preceding: int | timedelta, name: str | None = None, **aggs: Aggregate) -> Stream:
        """Every record with aggregates over its key's records up to it, in event-time order
        (SQL's ``OVER (PARTITION BY keys ORDER BY ts ...)``): ``preceding=10`` is
        ``ROWS BETWEEN 10 PRECEDING AND CURRENT ROW``, ``preceding=timedelta(minutes=1)`` is
        ``RANGE BETWEEN INTERVAL 1 MINUTE PRECEDING AND CURRENT ROW``. A record is emitted once
        the watermark passes its event time; ties are ordered by the other columns. Kinds:
        count, sum, min, max, avg, collect. The state keeps the records still below the
        watermark and the frame's history (``preceding`` rows, or that much time, per key).

        >>> bids.key_by("bidder").over(preceding=10, avg_price=lg.avg("price"))
        """
        _check_aggs(aggs)
        bad = [f"{k}={a.kind}" for k, a in aggs.items() if a.kind not in ("count", "sum", "min", "max", "avg", "collect")]
        if bad:
            raise ValueError(f"over() computes count, sum, min, max, avg and collect, not {', '.join(bad)}")
        if not self.keys:
            raise ValueError("over() needs key columns: call key_by(...) first (PARTITION BY)")
        config: dict[str, Any] = {"keys": list(self.keys), "aggs": {k: a.to_config() for k, a in aggs.items()}}
        if isinstance(preceding, timedelta):
            if preceding < timedelta(0):
                raise ValueError(f"over() needs preceding >= 0, got {preceding!r}")
            config["range_us"] = _micros(preceding)
        elif isinstance(preceding, int) and not isinstance(preceding, bool) and preceding >= 0:
            config["rows"] = preceding
        else:
            raise ValueError(f"over() takes preceding=<rows, an int >= 0> or a timedelta, got {preceding!r}")
        return self._then("over_aggregate", config, name)

    def deduplicate(self, *columns: str, within: timedelta | None = None, name: str | None = None) -> Stream:
        """Drop records whose ``columns`` were already seen: the first record of a key wins
        (within one cycle, the earliest by event time; across cycles, the one seen first, as
        output already emitted is never retracted).

        :param within: forget a key once the watermark is this far past it (bounded state);
            ``None`` keeps every key forever.
        """
        cols = list(columns) or list(self.keys or ())
        if not cols:
            raise ValueError("deduplicate() needs key columns (arguments or a preceding key_by)")
        config = {"keys": cols, "within_us": _micros(within) if within else None}
        return self._then("deduplicate", config, name)

    def join(
        self,
        other: Stream,
        on: str | list[str] | None = None,
        window: Tumbling | None = None,
        between: tuple[timedelta, timedelta] | None = None,
        ttl: timedelta | None = None,
        left_on: list[str] | None = None,
        right_on: list[str] | None = None,
        how: str = "inner",
        name: str | None = None,
        times: tuple[str, str] | None = None,
    ) -> Stream:
        """Stream-stream join on equal keys, in one of three forms (pass exactly one):

        - ``window=lg.Tumbling(size)``: records of both streams in the same tumbling window;
          emitted once the watermark passes the window end, as ``window_start, window_end``,
          the left columns, then the right ones.
        - ``between=(lower, upper)``: an interval join, pairs with
          ``right.ts + lower <= left.ts <= right.ts + upper`` (Flink's
          ``l.ts BETWEEN r.ts + lower AND r.ts + upper``); emitted in the round the pair's
          second record arrives, as the left columns then the right ones.
        - ``ttl=timedelta``: an unwindowed join whose records are kept ``ttl`` of event time,
          i.e. pairs at most ``ttl`` apart: ``between=(-ttl, ttl)``.

        A right column named like a left one is renamed ``<name>_right``. The state keeps each
        side only as long as the other side can still match it (bounded by the watermark).
        ``times=(left_col, right_col)`` names the time columns the join was written against (as
        ``Pipeline.sql`` does); compiling refuses it unless they are the two event-time columns.

        ``how="left"``, ``"right"`` or ``"full"`` also emits the records of the outer side(s) that
        never matched, with the other side's columns null, once the watermark makes that final (no
        later record could match them): for a windowed join when its window closes, with the
        window's ``window_start, window_end``.

        >>> bids.join(auctions, left_on=["auction"], right_on=["id"],
        ...           between=(timedelta(0), timedelta(hours=1)))

        Raises :class:`~lockgate.errors.CompileError` (naming the join) at this call when the
        form or the key columns are missing or malformed.
        """
        interval = window is None and (between is not None or ttl is not None)
        op = self.pipeline._next_name("interval_join" if interval else "join", name)
        forms = [f for f, v in (("window", window), ("between", between), ("ttl", ttl)) if v is not None]
        if len(forms) != 1:
            got = "none" if not forms else " and ".join(forms)
            raise CompileError(
                f"join() takes exactly one of window=, between= or ttl=, got {got}: window=lg.Tumbling(...) "
                "for a windowed join, between=(lower, upper) for an interval join, ttl=timedelta(...) to "
                "keep each side that long (an unbounded join would keep every record forever)", operator=op)
        if window is not None and not isinstance(window, Tumbling):
            kind = type(window).__name__.lower() if isinstance(window, Session | Sliding) else None
            got = f"a {kind} window ({window!r}), which join() does not support" if kind else f"{window!r}"
            raise CompileError(
                f"join() needs the tumbling window both sides share, got {got}: call "
                f".join(other, on=..., window=lg.Tumbling(timedelta(...)))", operator=op)
        if on is not None:
            left_on = right_on = [on] if isinstance(on, str) else list(on)
        left_on = left_on or list(self.keys or ())
        right_on = right_on or list(other.keys or ())
        if not left_on or len(left_on) != len(right_on):
            raise CompileError(
                "join() needs the key columns: pass on='col' (the same on both sides), or left_on=[...] and "
                "right_on=[...] of equal length, or key_by() both streams first", operator=op)
        if how not in ("inner", "left", "right", "full"):
            raise CompileError(f"join() how={how!r}: use 'inner', 'left', 'right' or 'full'", operator=op)
        inputs = [Input(self.node, tuple(left_on)), Input(other.node, tuple(right_on))]
        config: dict[str, Any] = {"left_on": left_on, "right_on": right_on}
        if window is None or how != "inner":
            # an inner windowed join keeps its config as it always was: plans (and the state
            # they carry) compiled before outer windowed joins existed stay the same
            config["how"] = how
        if times is not None:
            config["times"] = list(times)
        if window is not None:
            config["window"] = window.to_config()
            return Stream(self.pipeline, self.pipeline._add("join", inputs, config, name).id)
        if ttl is not None:
            if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
                raise CompileError(f"join() ttl= must be a positive timedelta, got {ttl!r}", operator=op)
            between = (-ttl, ttl)
            config["ttl_us"] = _micros(ttl)
        lower, upper = between  # type: ignore[misc]
        if not (isinstance(lower, timedelta) and isinstance(upper, timedelta)) or lower > upper:
            raise CompileError(
                f"join() between= must be (lower, upper) timedeltas with lower <= upper, got {between!r}: "
                "e.g. between=(timedelta(0), timedelta(minutes=10)) for right.ts <= left.ts <= right.ts + 10 min",
                operator=op)
        config["lower_us"], config["upper_us"] = _micros(lower), _micros(upper)
        return Stream(self.pipeline, self.pipeline._add("interval_join", inputs, config, name).id)

    def lookup(
        self,
        table: LookupTable,
        on: str | list[str] | None = None,
        left_on: list[str] | None = None,
        right_on: list[str] | None = None,
        how: str = "inner",
        name: str | None = None,
    ) -> Stream:
        """Enrich each record with the rows of a dimension ``table`` (a :class:`FileTable` or
        :class:`PostgresTable`) whose key columns equal the record's: the record's columns,
        then the table's (``<name>_right`` on a clash). ``how="left"`` keeps records with no
        match (table columns null). The table is read whole every round, so changes show in
        the next window; a replayed window reads it as it is then.

        >>> bids.lookup(lg.FileTable("dims/auctions"), left_on=["auction"], right_on=["id"], how="left")
        """
        op = self.pipeline._next_name("lookup_join", name)
        if not isinstance(table, FileTable | PostgresTable):
            raise CompileError(f"lookup() takes a FileTable or PostgresTable, got {table!r}", operator=op)
        if how not in ("inner", "left"):
            raise CompileError(f"lookup() how={how!r}: use 'inner' or 'left'", operator=op)
        if on is not None:
            left_on = right_on = [on] if isinstance(on, str) else list(on)
        left_on = left_on or list(self.keys or ())
        if not left_on or not right_on or len(left_on) != len(right_on):
            raise CompileError(
                "lookup() needs the key columns: on='col' (the same in stream and table), or left_on=[...] "
                "and right_on=[...] of equal length", operator=op)
        config = {"table": table.to_config(), "left_on": left_on, "right_on": right_on, "how": how}
        return self._then("lookup_join", config, name)

    # -- sinks -----------------------------------------------------------------------
    def sink(self, sink: Sink, name: str | None = None) -> None:
        """Write this stream to ``sink``, exactly once per cycle window."""
        self.pipeline._add("sink", [self._input()], {"sink": sink.to_config()}, name, parallelism=1)

    def __repr__(self) -> str:
        keys = f", keys={list(self.keys)}" if self.keys else ""
        return f"Stream({self.node!r}{keys})"


class WindowedStream:
    """A keyed stream assigned to windows; call :meth:`aggregate` or :meth:`top_n`."""

    def __init__(self, stream: Stream, spec: WindowSpec):
        self.stream = stream
        self.spec = spec

    def aggregate(self, name: str | None = None, **aggs: Aggregate) -> Stream:
        """Aggregate each window per key; emits ``window_start, window_end, keys..., aggs...``
        once the watermark passes the window's end."""
        _check_aggs(aggs)
        config = {
            "keys": list(self.stream.keys or ()),
            "window": self.spec.to_config(),
            "aggs": {k: a.to_config() for k, a in aggs.items()},
        }
        return self.stream._then("window_aggregate", config, name)

    def top_n(
        self,
        n: int,
        by: str | list[str],
        ascending: bool | list[bool] = False,
        rank: str = "rank",
        name: str | None = None,
    ) -> Stream:
        """The ``n`` first records per key and window ordered by ``by`` (largest first unless
        ``ascending``), emitted once the watermark passes the window's end as
        ``window_start, window_end, <the record's columns>, rank`` (``rank`` 1..n). Ties are
        broken by the other columns, ascending, so replays rank alike. The state keeps at
        most ``n`` rows per key and window. ``top_n(1, by=ts)`` is the latest record per key.
        ``ascending`` is one direction for every ``by`` column, or a list of one per column.

        Tumbling and sliding windows only (a session's records are not known until it closes).

        >>> bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10))).top_n(3, by="price")
        """
        if isinstance(self.spec, Session):
            raise ValueError("top_n() takes a Tumbling or Sliding window, not a Session window")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"top_n() needs n >= 1, got {n!r}")
        cols = [by] if isinstance(by, str) else list(by)
        if not cols:
            raise ValueError("top_n() needs the column(s) to order by, e.g. by='price'")
        if isinstance(ascending, list) and len(ascending) != len(cols):
            raise ValueError(f"top_n() ascending={ascending!r}: one direction per by= column ({len(cols)})")
        config = {
            "keys": list(self.stream.keys or ()),
            "window": self.spec.to_config(),
            "n": n,
            "by": cols,
            "ascending": [bool(a) for a in ascending] if isinstance(ascending, list) else bool(ascending),
            "rank": rank,
        }
        return self.stream._then("window_top_n", config, name)


def _check_aggs(aggs: dict[str, Aggregate]) -> None:
    if not aggs:
        raise ValueError("aggregate() needs at least one aggregate, e.g. aggregate(n=lg.count())")
    for k, a in aggs.items():
        if not isinstance(a, Aggregate):
            raise TypeError(f"aggregate {k}={a!r}: use lockgate.count(), sum(), min(), max(), avg(), ...")



__all__ = ["Stream", "WindowedStream"]
