"""A JOIN in SQL: its keys, and its form from the time condition (an interval join when it
bounds the two event times, a windowed join when it equates windows)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..windows import Tumbling
from .scope import DIALECT, Relation, Scope, conjuncts, duration, slide


class JoinMixin:
    """The JOIN clause of :class:`~lockgate.api.sql.compiler.Compiler`."""

    def join(self, tree: Any, join: Any, lside: tuple[Relation, str], rside: tuple[Relation, str],
             where: list[Any], name: str) -> tuple[Relation, Scope, list[Any]]:
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
        conds = conjuncts(exp, on) if on is not None else []
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
            raise self.refuse(f"{how.upper()} JOIN ... ON {residual[0].sql(dialect=DIALECT)}",
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
            if spec is None or right.window is None or slide(spec) != slide(right.window):
                raise self.refuse("JOIN ON a.window = b.window", "both sides must be windowed aggregates of "
                                  "windows that end together (the same size and slide)")
            # each window's results arrive at its end: a tumbling window of the slide holds them
            kwargs["window"] = Tumbling(slide(spec))
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
        stream = left.stream.join(right.stream, times=times, **kwargs)
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
        scope = Scope(exp, {la: lnames, ra: rnames}, self.name)
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
        return alias, e.name, sign * duration(text, f"INTERVAL {text.strip()}", self.name)
