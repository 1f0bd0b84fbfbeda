"""``ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) <= n`` in SQL: a top-N per window, per
window of a windowed result, or unbounded per key."""

from __future__ import annotations

from typing import Any

from .. import aggregates as agg
from ..windows import Session, Tumbling
from .scope import DIALECT, Relation, slide


class TopNMixin:
    """The ROW_NUMBER() top-N of :class:`~lockgate.api.sql.compiler.Compiler`."""

    def top_n(self, inner: Any, ranked: list[Any], name: str, conds: list[Any]) -> tuple[Relation, list[Any]]:
        """``(SELECT ..., ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn FROM ...)`` read
        with ``WHERE rn <= n``: the top-n rows per key (and window); the outer conditions left."""
        exp = self.exp
        item = ranked[0]
        over = item.this
        rn = item.alias_or_name
        if len(ranked) > 1 or not isinstance(over.this, exp.RowNumber):
            raise self.refuse(f"OVER: {over.sql(dialect=DIALECT)}", "the OVER window a query can read is one "
                              "ROW_NUMBER() (top-N); for aggregates over a frame use .key_by(...).over(...)")
        n, rest = rank_bound(exp, rn, conds)
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
                raise self.refuse(f"{clause} {col.sql(dialect=DIALECT)}", "select that column in the subquery")
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
                raise self.refuse(f"PARTITION BY {p.sql(dialect=DIALECT)}", "partition by columns and at most one "
                                  "window(ts, size[, slide])")
        order = over.args.get("order")
        if order is None:
            raise self.refuse(f"ROW_NUMBER() AS {rn}", "ROW_NUMBER() needs ORDER BY")
        by = [output(o.this, "ORDER BY") if isinstance(o.this, exp.Column) else None for o in order.expressions]
        if None in by:
            raise self.refuse("ORDER BY", "order by columns (compute an expression as a column in the subquery)")
        ascending = [not o.args.get("desc") for o in order.expressions]
        if spec is None and any(k in base.window_columns.values() for k in keys):
            return self.windowed_top_n(base, keys, by, ascending, n, rn, name), rest
        if not keys and spec is None:
            raise self.refuse("PARTITION BY", "top-N needs a key or a window to partition by: one list over the "
                              "whole stream would never be final")
        if spec is None:
            return self.running_top_n(base, keys, by, ascending, n, rn, name), rest
        if isinstance(spec, Session):
            raise self.refuse("PARTITION BY session_window(...)", "top-N takes tumbling and sliding windows")
        stream = base.stream.key_by(*keys) if keys else base.stream
        ranked_stream = stream.window(spec).top_n(n, by=by, ascending=direction(ascending), rank=rn,
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
        per_window = Tumbling(slide(base.window), on=end)
        top = stream.window(per_window).top_n(n, by=by, ascending=direction(ascending), rank=rn, name=f"{name}_top")
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


def rank_bound(exp: Any, rn: str, conds: list[Any]) -> tuple[int | None, list[Any]]:
    """``n`` of ``rn <= n`` (or ``rn < n + 1``, ``rn = 1``) in the outer conditions, and the others."""
    for i, c in enumerate(conds):
        if isinstance(c, exp.LTE | exp.LT | exp.EQ) and isinstance(c.this, exp.Column) and c.this.name == rn \
                and isinstance(c.expression, exp.Literal) and not c.expression.is_string:
            n = int(c.expression.this) - (1 if isinstance(c, exp.LT) else 0)
            if isinstance(c, exp.EQ) and n != 1:
                continue
            return (n if n >= 1 else None), conds[:i] + conds[i + 1:]
    return None, conds


def direction(ascending: list[bool]) -> bool | list[bool]:
    return ascending[0] if len(set(ascending)) == 1 else ascending
