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
- ``HAVING cond`` (windowed aggregates): a filter of the aggregate's output.

Aggregates: ``count(*)``, ``count(c)``, ``count(DISTINCT c)``, ``approx_count_distinct(c)``,
``sum``, ``min``, ``max``, ``avg``; an argument that is an expression is computed first.
What cannot run incrementally is a :class:`~lockgate.errors.CompileError` naming the clause
(``ORDER BY``, ``LIMIT``, ``DISTINCT``, ``JOIN``, a subquery, an ``OVER`` window): each error
says which operator of the Python API does the job.

    >>> p.sql("SELECT auction, window.start AS window_start, count(*) AS bids "
    ...       "FROM bids GROUP BY auction, window(date_time, '10 seconds')", name="q7_counts")
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING

from ..errors import CompileError
from . import aggregates as agg
from .windows import Session, Sliding, Tumbling

if TYPE_CHECKING:
    from .pipeline import Pipeline, Stream

_DIALECT = "spark"
_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60, "hour": 3600, "day": 86400}


def _sqlglot():
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise CompileError("Pipeline.sql needs the sqlglot package (pip install sqlglot)") from err
    return sqlglot, exp


def _duration(text: str, where: str, name: str) -> timedelta:
    """``'10 seconds'``, ``'1 minute'``, ``'500 milliseconds'`` as a timedelta."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*", text.lower())
    if not m or m.group(2) not in _UNITS:
        raise CompileError(f"{where}: {text!r} is not a duration; write e.g. '10 seconds' or '1 minute'", name)
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def compile_sql(pipeline: Pipeline, query: str, name: str | None = None) -> Stream:
    """The stream a SQL query over ``pipeline``'s named streams makes (see the module doc)."""
    from .pipeline import Stream

    sqlglot, exp = _sqlglot()
    name = pipeline._next_name("sql", name)
    try:
        tree = sqlglot.parse_one(query, read=_DIALECT)
    except sqlglot.errors.ParseError as err:
        raise CompileError(f"SQL does not parse: {str(err).splitlines()[0]}", name) from None
    if not isinstance(tree, exp.Select):
        raise CompileError(f"Pipeline.sql takes one SELECT, got {type(tree).__name__.upper()}: write the "
                           "other streams as their own Pipeline.sql or Python operators", name)

    def refuse(clause: str, why: str) -> CompileError:
        return CompileError(f"{clause} cannot run incrementally here: {why}", name)

    if tree.args.get("order"):
        raise refuse("ORDER BY", "a stream has no end to sort; for the first n rows per key and window use "
                     ".key_by(...).window(...).top_n(n, by=...)")
    if tree.args.get("limit"):
        raise refuse("LIMIT", "a stream has no end to count to; use top_n(n, by=...) per key and window")
    if tree.args.get("distinct"):
        raise refuse("SELECT DISTINCT", "use .deduplicate(*columns) for the first record of each value")
    if tree.args.get("joins"):
        raise CompileError("JOIN is not supported in Pipeline.sql yet: join the streams with Stream.join(other, "
                           "on=..., window=... | between=... | ttl=..., name=...) and query the result by that name",
                           name)
    if tree.find(exp.Window):
        raise refuse("OVER", "use .key_by(...).over(preceding, **aggs) for an OVER window per key")
    source = tree.args.get("from_") or tree.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or table.args.get("db"):
        raise refuse("FROM", "FROM names one stream of the pipeline (an operator's name); a subquery is "
                     "written as its own Pipeline.sql(..., name=...) and read by that name")
    stream_name = table.name
    if stream_name not in pipeline.nodes:
        known = ", ".join(sorted(n for n, node in pipeline.nodes.items() if node.op != "sink"))
        raise CompileError(f"FROM {stream_name}: the pipeline has no stream of that name (streams: {known})", name)
    alias = table.alias_or_name

    def local(e: exp.Expression) -> exp.Expression:
        """``e`` with ``alias.column`` written as ``column``."""
        e = e.copy()
        for col in e.find_all(exp.Column):
            if col.table == alias:
                col.set("table", None)
        return e

    stream = Stream(pipeline, stream_name)
    where = tree.args.get("where")
    if where is not None:
        stream = stream.filter(local(where.this).sql(dialect=_DIALECT), name=f"{name}_where")

    group = tree.args.get("group")
    has_aggs = any(isinstance(x, exp.AggFunc) for e in tree.expressions for x in e.find_all(exp.AggFunc))
    if group is None:
        if has_aggs:
            raise refuse("an aggregate without GROUP BY", "group by a key (a running aggregate per key) or by "
                         "window(ts, '...') and a key")
        if tree.args.get("having"):
            raise refuse("HAVING", "HAVING needs GROUP BY")
        return stream.select(*[local(e).sql(dialect=_DIALECT) for e in tree.expressions], name=name)

    # GROUP BY: keys, and at most one window(...) / session_window(...)
    keys: list[str] = []
    spec = None
    for g in group.expressions:
        g = local(g)
        fn = g.name.lower() if isinstance(g, exp.Anonymous) else None
        if isinstance(g, exp.Column):
            keys.append(g.name)
        elif fn in ("window", "session_window"):
            if spec is not None:
                raise refuse("GROUP BY", "one window(...) or session_window(...) per query")
            args = g.expressions
            if not args or not isinstance(args[0], exp.Column) or not all(isinstance(a, exp.Literal) for a in args[1:]):
                raise refuse(f"GROUP BY {g.sql(dialect=_DIALECT)}", f"write {fn}(time_column, 'duration'"
                             + (", 'slide')" if fn == "window" else ")"))
            on = args[0].name
            sizes = [_duration(a.this, f"GROUP BY {g.sql(dialect=_DIALECT)}", name) for a in args[1:]]
            if fn == "session_window" and len(sizes) == 1:
                spec = Session(sizes[0], on=on)
            elif fn == "window" and len(sizes) == 1:
                spec = Tumbling(sizes[0], on=on)
            elif fn == "window" and len(sizes) == 2:
                spec = Sliding(sizes[0], sizes[1], on=on)
            else:
                raise refuse(f"GROUP BY {g.sql(dialect=_DIALECT)}", "window(ts, size[, slide]) or "
                             "session_window(ts, gap); a start offset is not supported")
        else:
            raise refuse(f"GROUP BY {g.sql(dialect=_DIALECT)}", "group by columns (add an expression as a "
                         "column first: a Pipeline.sql SELECT ... AS name, read by its name)")

    # SELECT list: keys, window.start / window.end, aggregates (aliased)
    aggs: dict[str, agg.Aggregate] = {}
    prepared: dict[str, str] = {}  # computed aggregate arguments: column -> expression
    outputs: list[str] = []
    for i, item in enumerate(tree.expressions):
        item = local(item)
        out = item.alias_or_name
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.Column) and body.table.lower() in ("window", "session_window") and \
                body.name.lower() in ("start", "end"):
            if spec is None:
                raise refuse(f"SELECT {body.sql(dialect=_DIALECT)}", "the query groups by no window")
            outputs.append(f"window_{body.name.lower()} AS {out}")
        elif isinstance(body, exp.Column):
            if body.name not in keys:
                raise refuse(f"SELECT {body.name}", "a column that is not a GROUP BY key needs an aggregate")
            outputs.append(f"{body.name} AS {out}" if out != body.name else body.name)
        elif isinstance(body, exp.AggFunc):
            if not isinstance(item, exp.Alias):
                raise refuse(f"SELECT {body.sql(dialect=_DIALECT)}", "name each aggregate: ... AS name")
            aggs[out] = _aggregate(body, exp, prepared, f"__{name}_arg{i}", name)
            outputs.append(out)
        else:
            raise refuse(f"SELECT {item.sql(dialect=_DIALECT)}", "select keys, window.start, window.end and "
                         "aggregates; compute other expressions from them in a second Pipeline.sql")
    if not aggs:
        raise refuse("GROUP BY", "no aggregate in the SELECT list; for distinct keys use .deduplicate(*keys)")
    for column, expression in prepared.items():
        stream = stream.with_column(column, expression, name=column.strip("_"))
    keyed = stream.key_by(*keys) if keys else None
    if keyed is None:
        raise refuse("GROUP BY", "group by at least one key column (a global aggregate has no key to shard by)")
    if spec is not None:
        aggregated = keyed.window(spec).aggregate(name=f"{name}_agg", **aggs)
    else:
        if tree.args.get("having"):
            raise refuse("HAVING", "a running aggregate's rows are replaced round after round; a filter of "
                         "them would keep rows a later round makes false. Window the aggregate, or sink it")
        aggregated = keyed.aggregate(name=f"{name}_agg", **aggs)
        outputs.append("as_of")
    having = tree.args.get("having")
    if having is not None:
        cond = local(having.this)
        for a in cond.find_all(exp.AggFunc):
            raise refuse(f"HAVING {a.sql(dialect=_DIALECT)}", "refer to an aggregate by its SELECT alias")
        aggregated = aggregated.filter(cond.sql(dialect=_DIALECT), name=f"{name}_having")
    return aggregated.select(*outputs, name=name)


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
