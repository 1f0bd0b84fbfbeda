"""Pipelines in SQL: ``Pipeline.sql("SELECT ...")`` over named streams, compiled to the same
operators the Python API builds.

The query is Spark SQL (parsed by sqlglot in Spark's dialect) over the pipeline's streams,
named as their operators are (``p.source(..., name="bids")`` is the table ``bids``). What it
becomes:

- ``SELECT exprs FROM s [WHERE cond]``: ``filter`` then ``select`` (stateless);
- ``... GROUP BY keys, window(ts, '10 seconds'[, '2 seconds'])``: a tumbling (or sliding)
  windowed aggregate per key, ``window.start``/``window.end`` its ``window_start``/``window_end``;
- ``... GROUP BY keys, session_window(ts, '10 seconds')``: session windows per key;
- ``... GROUP BY keys`` with no window: a running aggregate (an updating result, one row per
  key and round);
- ``HAVING cond`` (windowed aggregates): a filter of the aggregate's output;
- ``FROM (SELECT ...) AS q``: the subquery is compiled first, as its own operators;
- ``FROM a JOIN b ON a.k = b.k AND <time bound>`` (or ``FROM a, b WHERE ...``): an interval join
  when the condition bounds ``a.ts - b.ts`` on both sides (``BETWEEN``, ``>=``, ``<=`` with
  ``INTERVAL``s), a windowed join when it equates the window columns of two windowed
  aggregates of the same window (``a.starttime = b.starttime``) or writes
  ``window(a.ts, '10 seconds') = window(b.ts, '10 seconds')``; ``LEFT``/``RIGHT``/``FULL`` too;
- ``SELECT ... FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY keys ORDER BY c DESC) AS rn
  FROM ...) WHERE rn <= N``: top-N, per window when ``PARTITION BY`` holds ``window(ts, ...)``
  or the window columns of a windowed aggregate, else an unbounded top-N per key (an updating
  result, its state bounded to N rows per key).

Aggregates: ``count(*)``, ``count(c)``, ``count(DISTINCT c)``, ``approx_count_distinct(c)``,
``sum``, ``min``, ``max``, ``avg``; an argument that is an expression is computed first.
What cannot run incrementally is a :class:`~lockgate.errors.CompileError` naming the clause
(``ORDER BY``, ``LIMIT``, ``DISTINCT``, a join with no time bound, an ``OVER`` window other than
top-N's ``ROW_NUMBER``): each error says which operator of the Python API does the job.

    >>> p.sql("SELECT auction, window.start AS window_start, count(*) AS bids "
    ...       "FROM bids GROUP BY auction, window(date_time, '10 seconds')", name="q7_counts")
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import CompileError
from . import aggregates as agg
from .windows import Session, Sliding, Tumbling, WindowSpec

if TYPE_CHECKING:
    from .pipeline import Pipeline, Stream

_DIALECT = "spark"
_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60, "hour": 3600, "day": 86400}
_WINDOW_FNS = ("window", "session_window")


def _sqlglot():
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise CompileError("Pipeline.sql needs the sqlglot package (pip install sqlglot)") from err
    return sqlglot, exp


def _duration(text: str, where: str, name: str) -> timedelta:
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


def compile_sql(pipeline: Pipeline, query: str, name: str | None = None) -> Stream:
    """The stream a SQL query over ``pipeline``'s named streams makes (see the module doc)."""
    sqlglot, exp = _sqlglot()
    name = pipeline._next_name("sql", name)
    # sqlglot reads ``GROUP BY window(`` as the start of a WINDOW clause; quoted, it is the function
    query = re.sub(r"(?i)\b(GROUP\s+BY\s+)window\s*\(", r"\1`window`(", query)
    try:
        tree = sqlglot.parse_one(query, read=_DIALECT)
    except sqlglot.errors.ParseError as err:
        raise CompileError(f"SQL does not parse: {str(err).splitlines()[0]}", name) from None
    rel = _Compiler(pipeline, exp, name).select(tree, name)
    pipeline._sql_relations[rel.stream.node] = rel
    return rel.stream


class _Scope:
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
            if node.table.lower() in _WINDOW_FNS or (node.table and node.table not in self.aliases):
                return node  # window.start, or a struct field (t.bidder)
            return self.exp.column(self.column(node.table, node.name))

        return e.copy().transform(rename)

    def sql(self, e: Any) -> str:
        return self.resolve(e).sql(dialect=_DIALECT)


class _Compiler:
    def __init__(self, pipeline: Pipeline, exp: Any, name: str):
        self.pipeline, self.exp, self.name = pipeline, exp, name

    def refuse(self, clause: str, why: str) -> CompileError:
        return CompileError(f"{clause} cannot run incrementally here: {why}", self.name)

    # -- one SELECT ------------------------------------------------------------------
    def select(self, tree: Any, name: str) -> Relation:
        exp = self.exp
        if not isinstance(tree, exp.Select):
            raise CompileError(f"Pipeline.sql takes one SELECT, got {type(tree).__name__.upper()}: write the "
                               "other streams as their own Pipeline.sql or Python operators", self.name)
        if tree.args.get("order"):
            raise self.refuse("ORDER BY", "a stream has no end to sort; for the first n rows per key (and window) "
                              "use ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) <= n, or top_n(n, by=...)")
        if tree.args.get("limit"):
            raise self.refuse("LIMIT", "a stream has no end to count to; use ROW_NUMBER() ... <= n per key "
                              "and window, or top_n(n, by=...)")
        if tree.args.get("distinct"):
            raise self.refuse("SELECT DISTINCT", "use .deduplicate(*columns) for the first record of each value")
        if any(e.find(exp.Window) for e in tree.expressions):
            raise self.refuse("OVER", "an OVER window is ROW_NUMBER() top-N here (read by a query with WHERE "
                              "rn <= n); for aggregates over a frame use .key_by(...).over(preceding, **aggs)")
        where = tree.args.get("where")
        conds = _conjuncts(exp, where.this) if where is not None else []
        source = tree.args.get("from_") or tree.args.get("from")
        if source is None:
            raise self.refuse("SELECT", "a query reads a stream: add FROM <stream>")
        joins = tree.args.get("joins") or []
        if len(joins) > 1:
            raise self.refuse("JOIN", "one join per query: join two streams in a Pipeline.sql(..., name=...) "
                              "and join its result by that name")
        left, lalias, conds = self.relation(source.this, name, conds)
        if joins:
            right, ralias, _ = self.relation(joins[0].this, name, [])
            rel, scope, conds = self.join(tree, joins[0], (left, lalias), (right, ralias), conds, name)
        else:
            rel = left
            scope = _Scope(exp, {lalias: {c: c for c in left.columns} if left.columns else None}, self.name)
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = exp.and_(cond, c)
            rel = self.derive(rel, rel.stream.filter(scope.sql(cond), name=f"{name}_where"))
        group = tree.args.get("group")
        has_aggs = any(isinstance(x, exp.AggFunc) for e in tree.expressions for x in e.find_all(exp.AggFunc))
        if group is None:
            if has_aggs:
                raise self.refuse("an aggregate without GROUP BY", "group by a key (a running aggregate per key) "
                                  "or by window(ts, '...') and a key")
            if tree.args.get("having"):
                raise self.refuse("HAVING", "HAVING needs GROUP BY")
            return self.project(rel, scope, tree.expressions, name)
        return self.aggregate(tree, rel, scope, group, name)

    def derive(self, rel: Relation, stream: Stream) -> Relation:
        """``rel`` after a filter: the same columns, event time and window."""
        return Relation(stream, rel.columns, rel.event_time, rel.window, dict(rel.window_columns), rel.updating,
                        rel.has_op)

    def project(self, rel: Relation, scope: _Scope, items: list[Any], name: str) -> Relation:
        """``SELECT items`` over ``rel``: a select, with what it keeps of the columns, the event
        time and the window columns (``c AS d`` renames them)."""
        exp = self.exp
        exprs: list[str] = []
        out = Relation(rel.stream, [], None, rel.window, {}, rel.updating, rel.has_op)
        renamed: dict[str, list[str]] = {}
        for item in items:
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Star) or (isinstance(body, exp.Column) and isinstance(body.this, exp.Star)):
                cols = self.star(rel, scope, body)
                exprs += [c if c == o else f"{c} AS {o}" for c, o in cols]
                for c, o in cols:
                    renamed.setdefault(c, []).append(o)
                    out.columns.append(o)
                continue
            if isinstance(body, exp.Column) and body.table.lower() in _WINDOW_FNS and \
                    body.name.lower() in ("start", "end"):
                src = f"window_{body.name.lower()}"
                if rel.window is None and src not in (rel.columns or [src]):
                    raise self.refuse(f"SELECT {body.sql(dialect=_DIALECT)}", "the stream has no window")
                alias = item.alias_or_name if isinstance(item, exp.Alias) else src
                exprs.append(src if alias == src else f"{src} AS {alias}")
                renamed.setdefault(src, []).append(alias)
                out.columns.append(alias)
                continue
            text = scope.sql(item)
            alias = item.alias_or_name
            if isinstance(item, exp.Column) and text != alias:  # B.date_time is date_time_right in a join
                text = f"{text} AS {alias}"
            exprs.append(text)
            out.columns.append(alias)
            if isinstance(body, exp.Column):
                renamed.setdefault(scope.column(body.table, body.name) if body.table in scope.aliases or not
                                   body.table else body.name, []).append(alias)
        # an updating result keeps what tells its rows apart: the round (and the op) of each row
        for kept in (["as_of"] if rel.updating else []) + (["op"] if rel.has_op else []):
            if kept not in out.columns:
                exprs.append(kept)
                out.columns.append(kept)
                renamed.setdefault(kept, []).append(kept)
        if rel.event_time in renamed:
            out.event_time = renamed[rel.event_time][0]
        for part, col in rel.window_columns.items():
            if col in renamed:
                out.window_columns[part] = renamed[col][0]
        if not out.window_columns:
            out.window = None
        out.stream = rel.stream.select(*exprs, name=name)
        return out

    def star(self, rel: Relation, scope: _Scope, body: Any) -> list[tuple[str, str]]:
        """The ``(column, output name)`` pairs of ``*`` or ``alias.*``."""
        table = body.table if isinstance(body, self.exp.Column) else ""
        if table:
            cols = scope.aliases.get(table)
            if cols is None:
                raise self.refuse(f"SELECT {table}.*", f"the columns of {table} are not known here: name them")
            return list(cols.items())
        if rel.columns is None:
            return [("*", "*")]
        return [(c, c) for c in rel.columns]

    # -- FROM ------------------------------------------------------------------------
    def relation(self, node: Any, name: str, conds: list[Any]) -> tuple[Relation, str, list[Any]]:
        """The relation a FROM item reads, its alias, and the outer conditions left to apply
        (a top-N takes its ``rn <= n`` from them)."""
        exp = self.exp
        if isinstance(node, exp.Table):
            if node.args.get("db"):
                raise self.refuse("FROM", f"{node.sql(dialect=_DIALECT)}: name a stream of the pipeline")
            stream_name = node.name
            if stream_name not in self.pipeline.nodes:
                known = ", ".join(sorted(n for n, v in self.pipeline.nodes.items() if v.op != "sink"))
                raise CompileError(f"FROM {stream_name}: the pipeline has no stream of that name (streams: {known})",
                                   self.name)
            return self.named(stream_name), node.alias_or_name, conds
        if isinstance(node, exp.Subquery):
            alias = node.alias_or_name or "q"
            inner = node.this
            ranked = [e for e in getattr(inner, "expressions", []) if isinstance(e, exp.Alias)
                      and isinstance(e.this, exp.Window)]
            if ranked:
                rel, conds = self.top_n(inner, ranked, f"{name}_{alias}", conds)
                return rel, alias, conds
            return self.select(inner, f"{name}_{alias}"), alias, conds
        raise self.refuse("FROM", f"{node.sql(dialect=_DIALECT)}: FROM reads a stream by name or a subquery")

    def named(self, stream_name: str) -> Relation:
        from ..nexmark import SCHEMAS
        from .pipeline import Stream

        known = self.pipeline._sql_relations.get(stream_name)
        if known is not None:
            return Relation(Stream(self.pipeline, stream_name), known.columns, known.event_time, known.window,
                            dict(known.window_columns), known.updating, known.has_op)
        node = self.pipeline.nodes[stream_name]
        rel = Relation(Stream(self.pipeline, stream_name))
        if node.op == "source":
            src = node.config["source"]
            rel.event_time = src.get("event_time")
            if src.get("kind") == "nexmark":
                rel.columns = list(SCHEMAS[src["stream"]].names)
        elif node.op in ("window_aggregate", "window_top_n"):
            spec = node.config["window"]
            rel.window = _spec_of(spec)
            rel.window_columns = {"start": "window_start", "end": "window_end"}
            rel.event_time = "window_end"
        return rel

    # -- JOIN ------------------------------------------------------------------------
    def join(self, tree: Any, join: Any, lside: tuple[Relation, str], rside: tuple[Relation, str],
             where: list[Any], name: str) -> tuple[Relation, _Scope, list[Any]]:
        """The join of the two relations: its keys, its form (interval or windowed) from the
        time condition, the columns of its output, and the conditions left for a filter."""
        exp = self.exp
        (left, la), (right, ra) = lside, rside
        if la == ra:
            raise self.refuse("JOIN", f"both sides are called {la}: give them aliases (FROM x a JOIN x b)")
        side = (join.side or "").lower()
        how = {"": "inner", "left": "left", "right": "right", "full": "full"}[side]
        on = join.args.get("on")
        if join.args.get("using"):
            raise self.refuse("JOIN ... USING", "write ON a.k = b.k")
        conds = _conjuncts(exp, on) if on is not None else []
        outer_where: list[Any] = list(where)
        if how == "inner" and on is None:  # FROM a, b WHERE ...: the WHERE is the join condition
            conds, outer_where = outer_where, []
        # make both sides' columns known: a side of unknown columns keeps those the query names
        referenced = {a: sorted({c.name for c in tree.find_all(exp.Column) if c.table == a}) for a in (la, ra)}
        sides = []
        for rel, alias in ((left, la), (right, ra)):
            if rel.columns is None:
                keep = list(dict.fromkeys(referenced[alias] + [c for c in (rel.event_time, *rel.window_columns.values())
                                                               if c]))
                rel = Relation(rel.stream.select(*keep, name=f"{name}_{alias}_columns"), keep, rel.event_time,
                               rel.window, dict(rel.window_columns))
            sides.append(rel)
        left, right = sides
        cols = {la: left.columns, ra: right.columns}

        def which(e: Any) -> str | None:
            """The alias a plain column belongs to (None for anything else)."""
            if not isinstance(e, exp.Column):
                return None
            if e.table in cols:
                return e.table
            owners = [a for a, cs in cols.items() if e.name in cs]
            return owners[0] if len(owners) == 1 else None

        keys: list[tuple[str, str]] = []
        window_eq: list[tuple[str, str]] = []
        window_fn: list[tuple[Any, Any]] = []
        bounds: list[tuple[str, str, str, timedelta, Any]] = []  # (op, ltime, rtime, offset, original)
        residual: list[Any] = []
        for c in conds:
            if isinstance(c, exp.EQ):
                a, b = which(c.this), which(c.expression)
                if a and b and a != b:
                    lcol, rcol = (c.this, c.expression) if a == la else (c.expression, c.this)
                    pair = (lcol.name, rcol.name)
                    lwin = {v: k for k, v in left.window_columns.items()}
                    rwin = {v: k for k, v in right.window_columns.items()}
                    if pair[0] in lwin and pair[1] in rwin and lwin[pair[0]] == rwin[pair[1]]:
                        window_eq.append(pair)
                    keys.append(pair)
                    continue
                if all(isinstance(x, exp.Anonymous) and x.name.lower() == "window" for x in (c.this, c.expression)):
                    window_fn.append((c.this, c.expression))
                    continue
            bound = self.bound(c, which, la, ra, (left.event_time, right.event_time))
            if bound:
                bounds += [b for b in bound if b[0] is not None]
                residual += [b[4] for b in bound if b[0] is None]
                continue
            residual.append(c)
        if not keys:
            raise self.refuse("JOIN", "the condition equates no column of one stream with one of the other "
                              "(ON a.k = b.k): a join without keys would pair every record with every other")
        if how != "inner" and residual:
            raise self.refuse(f"{how.upper()} JOIN ... ON {residual[0].sql(dialect=_DIALECT)}",
                              "an outer join's condition holds only keys and the time bound (filter after it)")
        windowed = bool(window_eq or window_fn)
        if windowed and bounds:
            raise self.refuse("JOIN", "a join is either windowed (equal windows) or an interval join (a time "
                              "bound), not both")
        kwargs: dict[str, Any] = {"left_on": [k for k, _ in keys], "right_on": [k for _, k in keys], "how": how,
                                  "name": f"{name}_join"}
        times: tuple[str, str] | None = None
        if window_fn:
            lw, rw = window_fn[0]
            lspec, rspec = (self.window_call(w) for w in (lw, rw))
            if which(lw.expressions[0]) != la:
                lspec, rspec = rspec, lspec
            if lspec != rspec or not isinstance(lspec, Tumbling):
                raise self.refuse("JOIN ... window(...) = window(...)", "both sides need the same tumbling window")
            kwargs["window"] = Tumbling(lspec.size)
            times = (lspec.on or "", rspec.on or "")
        elif window_eq:
            spec = left.window
            if spec is None or right.window is None or _slide(spec) != _slide(right.window):
                raise self.refuse("JOIN ON a.window = b.window", "both sides must be windowed aggregates of "
                                  "windows that end together (the same size and slide)")
            # each window's results arrive at its end: a tumbling window of the slide holds them
            kwargs["window"] = Tumbling(_slide(spec))
        elif bounds:
            lts = {b[1] for b in bounds}
            rts = {b[2] for b in bounds}
            if len(lts) > 1 or len(rts) > 1:
                raise self.refuse("JOIN", f"the time condition compares several columns ({', '.join(sorted(lts))} "
                                  f"with {', '.join(sorted(rts))}): bound the two streams' event times")
            lower = [b[3] for b in bounds if b[0] == ">="]
            upper = [b[3] for b in bounds if b[0] == "<="]
            if not lower or not upper:
                missing = "lower" if not lower else "upper"
                raise self.refuse("JOIN", f"the time condition has no {missing} bound on {la}.{next(iter(lts))} - "
                                  f"{ra}.{next(iter(rts))} (a bound that is a column, not an INTERVAL, does not "
                                  "count): an unbounded join keeps every record forever; add e.g. "
                                  f"AND {la}.{next(iter(lts))} <= {ra}.{next(iter(rts))} + INTERVAL '1' DAY")
            kwargs["between"] = (max(lower), min(upper))
            times = (next(iter(lts)), next(iter(rts)))
            if how == "inner":
                residual += [b[4] for b in bounds if b[4] is not None]  # strict bounds, exactly
            elif any(b[4] is not None for b in bounds):
                raise self.refuse(f"{how.upper()} JOIN", "write the time bound with >=, <= or BETWEEN")
        else:
            raise self.refuse("JOIN", "the condition bounds no time: add a time bound (AND a.ts BETWEEN b.ts - "
                              "INTERVAL '10' SECOND AND b.ts + INTERVAL '10' SECOND), join equal windows "
                              "(window(a.ts, '10 seconds') = window(b.ts, '10 seconds')), or join with "
                              "Stream.join(other, on=..., ttl=timedelta(...)) in Python")
        stream = left.stream.join(right.stream, **kwargs)
        if times is not None:
            self.pipeline.nodes[stream.node].config["times"] = list(times)
        # the output's names: as the join operators name them
        lcols, rcols = list(left.columns), list(right.columns)
        if windowed:
            wcols = {"window_start", "window_end"}
            lnames = {c: (f"{c}_left" if c in wcols else c) for c in lcols}
            taken = set(lnames.values()) | wcols
            out_cols = ["window_start", "window_end"]
        else:
            lnames = {c: c for c in lcols}
            taken = set(lcols)
            out_cols = []
        rnames = {c: (f"{c}_right" if c in taken else c) for c in rcols}
        out_cols += list(lnames.values()) + list(rnames.values())
        rel = Relation(stream, out_cols)
        if windowed:
            rel.window = Tumbling(kwargs["window"].size)
            rel.window_columns = {"start": "window_start", "end": "window_end"}
            rel.event_time = "window_end"
        scope = _Scope(exp, {la: lnames, ra: rnames}, self.name)
        return rel, scope, residual + outer_where

    def bound(self, c: Any, which: Any, la: str, ra: str,
              times: tuple[str | None, str | None]) -> list[tuple[str, str, str, timedelta, Any]]:
        """A time bound of an interval join: ``[(op, left time, right time, offset, strict)]``
        meaning ``left.ts - right.ts op offset`` (``op`` ``>=`` or ``<=``); ``strict`` is the
        original comparison when it is strict (kept as a filter). Empty when ``c`` is none: a
        comparison is a time bound when it adds an ``INTERVAL`` or compares the two streams'
        event-time columns (``B.price >= A.reserve`` is a filter)."""
        exp = self.exp
        if isinstance(c, exp.Between):
            lo = exp.GTE(this=c.this.copy(), expression=c.args["low"].copy())
            hi = exp.LTE(this=c.this.copy(), expression=c.args["high"].copy())
            parts = [self.bound(lo, which, la, ra, times), self.bound(hi, which, la, ra, times)]
            if not any(parts):
                return []
            # one half a bound, the other a filter (B.ts BETWEEN A.ts AND A.expires)
            return [b for part in parts for b in part] + [(None, "", "", timedelta(0), x) for x, part in
                                                          zip((lo, hi), parts, strict=True) if not part]
        ops = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<"}
        op = next((o for cls, o in ops.items() if type(c) is cls), None)
        if op is None:
            return []
        a, b = self.time_term(c.this, which), self.time_term(c.expression, which)
        if a is None or b is None or a[0] == b[0]:
            return []
        interval = any(isinstance(x, exp.Interval) for x in (c.this.find(exp.Interval), c.expression.find(exp.Interval)))
        event_times = {(la, times[0]), (ra, times[1])}
        if not interval and not {(a[0], a[1]), (b[0], b[1])} <= event_times:
            return []
        # a.col + a.off  op  b.col + b.off
        if a[0] == ra:  # flip so that the left stream's column is on the left
            a, b = b, a
            op = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}[op]
        offset = b[2] - a[2]  # left - right op offset
        strict = c if op in (">", "<") else None  # kept as a filter: the join's bounds are inclusive
        return [({">": ">=", "<": "<="}.get(op, op), a[1], b[1], offset, strict)]

    def time_term(self, e: Any, which: Any) -> tuple[str, str, timedelta] | None:
        """``alias.col [+|- INTERVAL ...]`` as ``(alias, col, offset)``."""
        exp = self.exp
        sign = 0
        if isinstance(e, exp.Add | exp.Sub) and isinstance(e.expression, exp.Interval):
            sign = 1 if isinstance(e, exp.Add) else -1
            interval, e = e.expression, e.this
        alias = which(e)
        if alias is None:
            return None
        if not sign:
            return alias, e.name, timedelta(0)
        unit = interval.args.get("unit")
        text = f"{interval.this.name} {unit.name if unit is not None else ''}"
        return alias, e.name, sign * _duration(text, f"INTERVAL {text.strip()}", self.name)

    def window_call(self, g: Any) -> WindowSpec:
        """``window(ts, size[, slide])`` / ``session_window(ts, gap)`` as a window spec."""
        exp = self.exp
        fn = g.name.lower()
        args = g.expressions
        text = g.sql(dialect=_DIALECT)
        if not args or not isinstance(args[0], exp.Column) or not all(isinstance(a, exp.Literal) for a in args[1:]):
            raise self.refuse(text, f"write {fn}(time_column, 'duration'" + (", 'slide')" if fn == "window" else ")"))
        on = args[0].name
        sizes = [_duration(a.this, text, self.name) for a in args[1:]]
        if fn == "session_window" and len(sizes) == 1:
            return Session(sizes[0], on=on)
        if fn == "window" and len(sizes) == 1:
            return Tumbling(sizes[0], on=on)
        if fn == "window" and len(sizes) == 2:
            return Sliding(sizes[0], sizes[1], on=on)
        raise self.refuse(text, "window(ts, size[, slide]) or session_window(ts, gap); a start offset is not "
                          "supported")

    # -- GROUP BY --------------------------------------------------------------------
    def aggregate(self, tree: Any, rel: Relation, scope: _Scope, group: Any, name: str) -> Relation:
        exp = self.exp
        keys: list[str] = []
        spec = None
        for g in group.expressions:
            fn = g.name.lower() if isinstance(g, exp.Anonymous) else None
            if isinstance(g, exp.Column):
                keys.append(scope.column(g.table, g.name))
            elif fn in _WINDOW_FNS:
                if spec is not None:
                    raise self.refuse("GROUP BY", "one window(...) or session_window(...) per query")
                spec = self.window_call(scope.resolve(g))
            else:
                raise self.refuse(f"GROUP BY {g.sql(dialect=_DIALECT)}", "group by columns (add an expression as a "
                                  "column first: a Pipeline.sql SELECT ... AS name, read by its name)")
        # GROUP BY the window columns of a windowed aggregate's output (Flink's GROUP BY
        # window_start, window_end): its rows of one window all end at once, so they are grouped
        # per window by a tumbling window of its slide, final when it closes
        regroup = spec is None and rel.window is not None and rel.window_columns.get("end") in keys
        if regroup:
            spec = Tumbling(_slide(rel.window), on=rel.window_columns["end"])
        aggs: dict[str, agg.Aggregate] = {}
        prepared: dict[str, str] = {}  # computed aggregate arguments: column -> expression
        outputs: list[str] = []
        out = Relation(rel.stream, [])
        for i, item in enumerate(tree.expressions):
            alias = item.alias_or_name
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Column) and body.table.lower() in _WINDOW_FNS and \
                    body.name.lower() in ("start", "end"):
                if spec is None:
                    raise self.refuse(f"SELECT {body.sql(dialect=_DIALECT)}", "the query groups by no window")
                outputs.append(f"window_{body.name.lower()} AS {alias}")
                out.window_columns[body.name.lower()] = alias
            elif isinstance(body, exp.Column):
                col = scope.column(body.table, body.name)
                if col not in keys:
                    raise self.refuse(f"SELECT {body.name}", "a column that is not a GROUP BY key needs an aggregate")
                if regroup and col == rel.window_columns["end"]:
                    col = "window_end"  # the same instant, and the event time of what follows
                outputs.append(f"{col} AS {alias}" if alias != col else col)
                for part, wcol in rel.window_columns.items():
                    if regroup and wcol == scope.column(body.table, body.name):
                        out.window_columns[part] = alias
            elif isinstance(body, exp.AggFunc):
                if not isinstance(item, exp.Alias):
                    raise self.refuse(f"SELECT {body.sql(dialect=_DIALECT)}", "name each aggregate: ... AS name")
                aggs[alias] = _aggregate(scope.resolve(body), exp, prepared, f"__{name}_arg{i}", self.name)
                outputs.append(alias)
            else:
                raise self.refuse(f"SELECT {item.sql(dialect=_DIALECT)}", "select keys, window.start, window.end and "
                                  "aggregates; compute other expressions from them in a second Pipeline.sql")
            out.columns.append(alias)
        if not aggs:
            if spec is None:
                raise self.refuse("GROUP BY", "no aggregate in the SELECT list; for distinct keys use "
                                  ".deduplicate(*keys), or group by a window too (its distinct keys per window)")
            aggs["__rows"] = agg.count()  # the distinct keys of each window: a count nobody selects
        stream = rel.stream
        for column, expression in prepared.items():
            stream = stream.with_column(column, expression, name=column.strip("_"))
        if not keys and spec is None:
            raise self.refuse("GROUP BY", "group by at least one key column or a window (a global running "
                              "aggregate has no key to shard by)")
        keyed = stream.key_by(*keys) if keys else stream
        having = tree.args.get("having")
        if spec is not None:
            aggregated = keyed.window(spec).aggregate(name=f"{name}_agg", **aggs)
            out.window = rel.window if regroup else spec
            out.event_time = out.window_columns.get("end")
        else:
            if having is not None:
                raise self.refuse("HAVING", "a running aggregate's rows are replaced round after round; a filter "
                                  "of them would keep rows a later round makes false. Window the aggregate, or "
                                  "sink it")
            aggregated = keyed.aggregate(name=f"{name}_agg", **aggs)
            out.updating = True
            out.event_time = "as_of"
            extra = ["as_of", "op"] if rel.updating else ["as_of"]  # over updates: '+U' and '-D' rows
            out.has_op = rel.updating
            outputs += extra
            out.columns += extra
        if having is not None:
            cond = scope.resolve(having.this)
            for a in cond.find_all(exp.AggFunc):
                raise self.refuse(f"HAVING {a.sql(dialect=_DIALECT)}", "refer to an aggregate by its SELECT alias")
            aggregated = aggregated.filter(cond.sql(dialect=_DIALECT), name=f"{name}_having")
        if not out.window_columns:
            out.window = None
        out.stream = aggregated.select(*outputs, name=name)
        return out

    # -- ROW_NUMBER() top-N ------------------------------------------------------------
    def top_n(self, inner: Any, ranked: list[Any], name: str, conds: list[Any]) -> tuple[Relation, list[Any]]:
        """``(SELECT ..., ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn FROM ...)`` read
        with ``WHERE rn <= n``: the top-n rows per key (and window); the outer conditions left."""
        exp = self.exp
        item = ranked[0]
        over = item.this
        rn = item.alias_or_name
        if len(ranked) > 1 or not isinstance(over.this, exp.RowNumber):
            raise self.refuse(f"OVER: {over.sql(dialect=_DIALECT)}", "the OVER window a query can read is one "
                              "ROW_NUMBER() (top-N); for aggregates over a frame use .key_by(...).over(...)")
        n, rest = _rank_bound(exp, rn, conds)
        if n is None:
            raise self.refuse(f"ROW_NUMBER() AS {rn}", f"read it with WHERE {rn} <= n (a top-N): every row "
                              "numbered would keep every row in state")
        body = inner.copy()
        body.set("expressions", [e.copy() for e in inner.expressions if e is not item])
        base = self.select(body, f"{name}_input")
        # PARTITION BY / ORDER BY name the subquery's FROM columns: map them to its output
        named = {}
        for e in body.expressions:
            b = e.this if isinstance(e, exp.Alias) else e
            if isinstance(b, exp.Column) and not isinstance(b.this, exp.Star):
                named[(b.table, b.name)] = e.alias_or_name
                named.setdefault(("", b.name), e.alias_or_name)

        def output(col: Any, clause: str) -> str:
            hit = named.get((col.table, col.name)) or named.get(("", col.name))
            if hit is None and base.columns and col.name in base.columns:
                hit = col.name
            if hit is None:
                raise self.refuse(f"{clause} {col.sql(dialect=_DIALECT)}", "select that column in the subquery")
            return hit

        keys: list[str] = []
        spec = None
        for p in over.args.get("partition_by") or []:
            if isinstance(p, exp.Anonymous) and p.name.lower() == "window":
                w = p.copy()
                w.expressions[0].replace(exp.column(output(p.expressions[0], "PARTITION BY")))
                spec = self.window_call(w)
            elif isinstance(p, exp.Column):
                keys.append(output(p, "PARTITION BY"))
            else:
                raise self.refuse(f"PARTITION BY {p.sql(dialect=_DIALECT)}", "partition by columns and at most one "
                                  "window(ts, size[, slide])")
        order = over.args.get("order")
        if order is None:
            raise self.refuse(f"ROW_NUMBER() AS {rn}", "ROW_NUMBER() needs ORDER BY")
        by = [output(o.this, "ORDER BY") if isinstance(o.this, exp.Column) else None for o in order.expressions]
        if None in by:
            raise self.refuse("ORDER BY", "order by columns (compute an expression as a column in the subquery)")
        ascending = [not o.args.get("desc") for o in order.expressions]
        window_keys = [k for k in keys if k in base.window_columns.values()]
        if window_keys and spec is None:
            spec = "windowed"
        if not keys and spec is None:
            raise self.refuse("PARTITION BY", "top-N needs a key or a window to partition by: one list over the "
                              "whole stream would never be final")
        if spec is None:
            return self.running_top_n(base, keys, by, ascending, n, rn, name), rest
        if spec == "windowed":
            return self.windowed_top_n(base, keys, by, ascending, n, rn, name), rest
        if isinstance(spec, Session):
            raise self.refuse("PARTITION BY session_window(...)", "top-N takes tumbling and sliding windows")
        stream = base.stream.key_by(*keys) if keys else base.stream
        ranked_stream = stream.window(spec).top_n(n, by=by, ascending=_direction(ascending), rank=rn,
                                                  name=f"{name}_top")
        cols = ["window_start", "window_end", *(base.columns or []), rn] if base.columns else None
        rel = Relation(ranked_stream, cols, "window_end", spec, {"start": "window_start", "end": "window_end"})
        return rel, rest

    def windowed_top_n(self, base: Relation, keys: list[str], by: list[str], ascending: list[bool], n: int,
                       rn: str, name: str) -> Relation:
        """Top-N per window of a windowed aggregate's output (Flink's window top-N): its rows of
        one window all end at once, so a tumbling window of its slide holds them."""
        assert base.window is not None and base.columns is not None
        start, end = base.window_columns.get("start"), base.window_columns.get("end")
        if end is None:
            raise self.refuse("PARTITION BY", "select the window's end in the subquery (window.end AS ...)")
        others = [k for k in keys if k not in (start, end)]
        stream = base.stream.key_by(*others) if others else base.stream
        slide = Tumbling(_slide(base.window), on=end)
        top = stream.window(slide).top_n(n, by=by, ascending=_direction(ascending), rank=rn, name=f"{name}_top")
        cols = [*base.columns, rn]
        out = top.select(*cols, name=name)
        return Relation(out, cols, end, base.window, dict(base.window_columns))

    def running_top_n(self, base: Relation, keys: list[str], by: list[str], ascending: list[bool], n: int,
                      rn: str, name: str) -> Relation:
        """Top-N per key over the whole stream: a running ``top_k`` (state: n rows per key), each
        round emitting the n rows of the keys it touched, ranked (an updating result)."""
        if base.columns is None:
            raise self.refuse("ROW_NUMBER()", "the subquery's columns are not known here: name them in its SELECT")
        if len(set(ascending)) > 1:
            raise self.refuse("ORDER BY", "an unbounded top-N orders every column one way: add a column that "
                              "orders the other way (e.g. -unix_micros(ts) AS earliest) and order by it")
        carried = [c for c in base.columns if c not in keys and c not in by]
        top = base.stream.key_by(*keys).aggregate(
            name=f"{name}_top", **{"__top": agg.top_k(n, by=by, columns=carried, ascending=ascending[0])})
        rows = top.select(*keys, "as_of", "posexplode(__top) AS (__pos, __t)", name=f"{name}_rows")
        cols = [c for c in base.columns if c != "as_of"]
        out = rows.select(*[c if c in keys else f"__t.{c} AS {c}" for c in cols], f"__pos + 1 AS {rn}", "as_of",
                          name=name)
        return Relation(out, [*cols, rn, "as_of"], "as_of", updating=True)


def _conjuncts(exp: Any, e: Any) -> list[Any]:
    if isinstance(e, exp.And):
        return _conjuncts(exp, e.this) + _conjuncts(exp, e.expression)
    if isinstance(e, exp.Paren):
        return _conjuncts(exp, e.this)
    return [e]


def _rank_bound(exp: Any, rn: str, conds: list[Any]) -> tuple[int | None, list[Any]]:
    """``n`` of ``rn <= n`` (or ``rn < n + 1``, ``rn = 1``) in the outer conditions, and the others."""
    for i, c in enumerate(conds):
        if isinstance(c, exp.LTE | exp.LT | exp.EQ) and isinstance(c.this, exp.Column) and c.this.name == rn \
                and isinstance(c.expression, exp.Literal) and not c.expression.is_string:
            n = int(c.expression.this) - (1 if isinstance(c, exp.LT) else 0)
            if isinstance(c, exp.EQ) and n != 1:
                continue
            return (n if n >= 1 else None), conds[:i] + conds[i + 1:]
    return None, conds


def _direction(ascending: list[bool]) -> bool | list[bool]:
    return ascending[0] if len(set(ascending)) == 1 else ascending


def _slide(spec: WindowSpec) -> timedelta:
    return spec.slide if isinstance(spec, Sliding) else spec.size  # type: ignore[union-attr]


def _spec_of(config: dict[str, Any]) -> WindowSpec | None:
    """The window spec of a window config (Session windows end at no fixed slide: None)."""
    kind = config.get("type")
    size = timedelta(microseconds=config.get("size_us", 0))
    if kind == "tumbling":
        return Tumbling(size)
    if kind == "sliding":
        return Sliding(size, timedelta(microseconds=config["slide_us"]))
    return None


def _aggregate(body, exp, prepared: dict[str, str], arg_name: str, name: str) -> agg.Aggregate:
    """The Lockgate aggregate of one SQL aggregate call (an expression argument is prepared
    as a column first)."""
    def column(e) -> str:
        if isinstance(e, exp.Column):
            return e.name
        prepared[arg_name] = e.sql(dialect=_DIALECT)
        return arg_name

    arg = body.this
    if isinstance(body, exp.Count):
        if isinstance(arg, exp.Star) or arg is None:
            return agg.count()
        if isinstance(arg, exp.Distinct):
            inner = arg.expressions
            if len(inner) != 1:
                raise CompileError("COUNT(DISTINCT ...) takes one column here", name)
            return agg.count_distinct(column(inner[0]))
        return agg.count(column(arg))
    kinds = {exp.Sum: agg.sum, exp.Min: agg.min, exp.Max: agg.max, exp.Avg: agg.avg,
             exp.ApproxDistinct: agg.approx_distinct}
    for cls, make in kinds.items():
        if isinstance(body, cls):
            if isinstance(arg, exp.Distinct):
                raise CompileError(f"{body.sql(dialect=_DIALECT)}: DISTINCT is supported in COUNT only", name)
            return make(column(arg))
    raise CompileError(f"aggregate {body.sql(dialect=_DIALECT)} is not supported: use count, count(DISTINCT c), "
                       "approx_count_distinct, sum, min, max or avg", name)
