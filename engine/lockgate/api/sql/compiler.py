"""The compiler of one ``SELECT``: its FROM (streams, subqueries, a join), WHERE, GROUP BY and
SELECT list, into the operators of the Python API."""

from __future__ import annotations

from typing import Any

from ...errors import CompileError
from .. import aggregates as agg
from ..nodes import PipelineNodes
from ..stream import Stream
from ..windows import Session, Sliding, Tumbling, WindowSpec
from .joins import JoinMixin
from .scope import DIALECT, WINDOW_FNS, Relation, Scope, conjuncts, duration, slide, spec_of
from .top_n import TopNMixin


class Compiler(JoinMixin, TopNMixin):
    """Compiles a SELECT (and its subqueries) over ``pipeline``'s streams; errors name ``name``."""

    def __init__(self, pipeline: PipelineNodes, exp: Any, name: str):
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
        conds = conjuncts(exp, where.this) if where is not None else []
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
            scope = Scope(exp, {lalias: {c: c for c in left.columns} if left.columns else None}, self.name)
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
            items = tree.expressions
            if joins:
                items = self.named_apart(items, {lalias.lower(): self.stream_name(source.this, lalias),
                                                 ralias.lower(): self.stream_name(joins[0].this, ralias)})
            return self.project(rel, scope, items, name)
        return self.aggregate(tree, rel, scope, group, name)

    def stream_name(self, node: Any, alias: str) -> str:
        """The stream a FROM item names (its alias for a subquery)."""
        return str(node.name or alias) if isinstance(node, self.exp.Table) else alias

    def named_apart(self, items: list[Any], tables: dict[str, str]) -> list[Any]:
        """The SELECT list of a join with the columns both sides have named apart: when
        qualified columns of the two sides share a name (``B.date_time, A.date_time``, as the
        published Nexmark q20 selects them), each becomes ``<stream>_<column>``
        (``bids_date_time``, ``auctions_date_time``); a Flink sink names them so by position.
        An alias the query gives (``A.date_time AS auction_time``) is kept."""
        exp = self.exp
        names = [i.alias_or_name.lower() for i in items]
        out = []
        for item in items:
            name = item.alias_or_name
            qualified = isinstance(item, exp.Column) and bool(item.table) and not isinstance(item.this, exp.Star)
            if qualified and names.count(name.lower()) > 1:
                table = tables.get(item.table.lower(), item.table)
                item = exp.alias_(item.copy(), f"{table}_{name}")
            out.append(item)
        return out

    def derive(self, rel: Relation, stream: Stream) -> Relation:
        """``rel`` after a filter: the same columns, event time and window."""
        return Relation(stream, rel.columns, rel.event_time, rel.window, dict(rel.window_columns), rel.updating,
                        rel.has_op)

    def project(self, rel: Relation, scope: Scope, items: list[Any], name: str) -> Relation:
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
            if isinstance(body, exp.Column) and body.table.lower() in WINDOW_FNS and \
                    body.name.lower() in ("start", "end"):
                src = f"window_{body.name.lower()}"
                if rel.window is None and src not in (rel.columns or [src]):
                    raise self.refuse(f"SELECT {body.sql(dialect=DIALECT)}", "the stream has no window")
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

    def star(self, rel: Relation, scope: Scope, body: Any) -> list[tuple[str, str]]:
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
                raise self.refuse("FROM", f"{node.sql(dialect=DIALECT)}: name a stream of the pipeline")
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
        raise self.refuse("FROM", f"{node.sql(dialect=DIALECT)}: FROM reads a stream by name or a subquery")

    def named(self, stream_name: str) -> Relation:
        from ...nexmark import SCHEMAS

        known = self.pipeline._sql_relations.get(stream_name)
        if known is not None:
            return Relation(Stream(self.pipeline, stream_name), known.columns, known.event_time, known.window,
                            dict(known.window_columns), known.updating, known.has_op)
        node = self.pipeline.nodes[stream_name]
        rel = Relation(Stream(self.pipeline, stream_name))
        if node.op == "source":
            src = node.config["source"]
            rel.event_time = src.get("event_time")
            if src.get("kind") == "nexmark":  # its columns, then its arrival column (q12's p_time) if any
                rel.columns = list(SCHEMAS[src["stream"]].names) + ([src["arrival"]] if src.get("arrival") else [])
        elif node.op in ("window_aggregate", "window_top_n"):
            spec = node.config["window"]
            rel.window = spec_of(spec)
            rel.window_columns = {"start": "window_start", "end": "window_end"}
            rel.event_time = "window_end"
        return rel

    def window_call(self, g: Any) -> WindowSpec:
        """``window(ts, size[, slide])`` / ``session_window(ts, gap)`` as a window spec."""
        exp = self.exp
        fn = g.name.lower()
        args = g.expressions
        text = g.sql(dialect=DIALECT)
        if not args or not isinstance(args[0], exp.Column) or not all(isinstance(a, exp.Literal) for a in args[1:]):
            raise self.refuse(text, f"write {fn}(time_column, 'duration'" + (", 'slide')" if fn == "window" else ")"))
        on = args[0].name
        sizes = [duration(a.this, text, self.name) for a in args[1:]]
        if fn == "session_window" and len(sizes) == 1:
            return Session(sizes[0], on=on)
        if fn == "window" and len(sizes) == 1:
            return Tumbling(sizes[0], on=on)
        if fn == "window" and len(sizes) == 2:
            return Sliding(sizes[0], sizes[1], on=on)
        raise self.refuse(text, "window(ts, size[, slide]) or session_window(ts, gap); a start offset is not "
                          "supported")

    # -- GROUP BY --------------------------------------------------------------------
    def aggregate(self, tree: Any, rel: Relation, scope: Scope, group: Any, name: str) -> Relation:
        exp = self.exp
        keys: list[str] = []
        spec = None
        for g in group.expressions:
            fn = g.name.lower() if isinstance(g, exp.Anonymous) else None
            if isinstance(g, exp.Column):
                keys.append(scope.column(g.table, g.name))
            elif fn in WINDOW_FNS:
                if spec is not None:
                    raise self.refuse("GROUP BY", "one window(...) or session_window(...) per query")
                spec = self.window_call(scope.resolve(g))
            else:
                raise self.refuse(f"GROUP BY {g.sql(dialect=DIALECT)}", "group by columns (add an expression as a "
                                  "column first: a Pipeline.sql SELECT ... AS name, read by its name)")
        # GROUP BY the window columns of a windowed aggregate's output (Flink's GROUP BY
        # window_start, window_end): its rows of one window all end at once, so they are grouped
        # per window by a tumbling window of its slide, final when it closes
        regroup = spec is None and rel.window is not None and rel.window_columns.get("end") in keys
        if regroup:
            spec = Tumbling(slide(rel.window), on=rel.window_columns["end"])
        aggs: dict[str, agg.Aggregate] = {}
        prepared: dict[str, str] = {}  # computed aggregate arguments: column -> expression
        outputs: list[str] = []
        out = Relation(rel.stream, [])
        for i, item in enumerate(tree.expressions):
            alias = item.alias_or_name
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Column) and body.table.lower() in WINDOW_FNS and \
                    body.name.lower() in ("start", "end"):
                if spec is None:
                    raise self.refuse(f"SELECT {body.sql(dialect=DIALECT)}", "the query groups by no window")
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
                    raise self.refuse(f"SELECT {body.sql(dialect=DIALECT)}", "name each aggregate: ... AS name")
                aggs[alias] = sql_aggregate(scope.resolve(body), exp, prepared, f"__{name}_arg{i}", self.name)
                outputs.append(alias)
            else:
                raise self.refuse(f"SELECT {item.sql(dialect=DIALECT)}", "select keys, window.start, window.end and "
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
                raise self.refuse(f"HAVING {a.sql(dialect=DIALECT)}", "refer to an aggregate by its SELECT alias")
            aggregated = aggregated.filter(cond.sql(dialect=DIALECT), name=f"{name}_having")
        if not out.window_columns:
            out.window = None
        out.stream = aggregated.select(*outputs, name=name)
        return out


def sql_aggregate(body, exp, prepared: dict[str, str], arg_name: str, name: str) -> agg.Aggregate:
    """The Lockgate aggregate of one SQL aggregate call (an expression argument is prepared
    as a column first)."""
    def column(e) -> str:
        if isinstance(e, exp.Column):
            return e.name
        prepared[arg_name] = e.sql(dialect=DIALECT)
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
                raise CompileError(f"{body.sql(dialect=DIALECT)}: DISTINCT is supported in COUNT only", name)
            return make(column(arg))
    raise CompileError(f"aggregate {body.sql(dialect=DIALECT)} is not supported: use count, count(DISTINCT c), "
                       "approx_count_distinct, sum, min, max or avg", name)
