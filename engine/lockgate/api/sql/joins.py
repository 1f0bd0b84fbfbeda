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
        on_text = " AND ".join(c.sql(dialect=DIALECT) for c in conds)
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

        event_times = (left.event_time, right.event_time)
        # the join's part of WHERE after JOIN ... ON (the published Nexmark q7 bounds the time there):
        # an equality of the two streams' columns, window(a.ts) = window(b.ts) and a bound of the two
        # event times; the rest of WHERE stays a filter of the joined pairs
        in_where = [c for c in outer_where if self.joins_both(c, which, la, ra, event_times)]
        if how == "inner":
            conds += in_where
            outer_where = [c for c in outer_where if not any(c is w for w in in_where)]
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
        if how != "inner" and in_where and not (keys and (window_eq or window_fn or bounds)):
            # after an outer join a WHERE condition on both streams drops the unmatched rows
            moved = " AND ".join(c.sql(dialect=DIALECT) for c in in_where)
            raise self.refuse(f"{how.upper()} JOIN ... WHERE {moved}",
                              f"a condition on both streams in WHERE after a {how.upper()} JOIN drops its unmatched "
                              f"rows, and an outer join's keys and time bound are its ON: move it into ON (ON "
                              f"{on_text + ' AND ' if on_text else ''}{moved}), or write JOIN for an inner join")
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
                                  f"with {', '.join(sorted(rts))}): bound the two streams' event times "
                                  f"({la}.{left.event_time} and {ra}.{right.event_time})")
            lower = [b[3] for b in bounds if b[0] == ">="]
            upper = [b[3] for b in bounds if b[0] == "<="]
            if not lower or not upper:
                lt, rt = f"{la}.{next(iter(lts))}", f"{ra}.{next(iter(rts))}"
                if not lower:  # left - right >= min(upper) - 1 day: right <= left + (1 day - min(upper))
                    missing, add = "lower", f"{rt} <= {lt}{interval_sql(timedelta(days=1) - min(upper))}"
                else:  # left - right <= max(lower) + 1 day
                    missing, add = "upper", f"{lt} <= {rt}{interval_sql(max(lower) + timedelta(days=1))}"
                raise self.refuse("JOIN", f"the time condition has no {missing} bound on {lt} - {rt} (a bound "
                                  "that is a column, not an INTERVAL, does not count): an unbounded join keeps "
                                  f"every record forever; add e.g. AND {add}")
            kwargs["between"] = (max(lower), min(upper))
            times = (next(iter(lts)), next(iter(rts)))
            if how == "inner":
                residual += [b[4] for b in bounds if b[4] is not None]  # strict bounds, exactly
            else:
                strict = next((b[4] for b in bounds if b[4] is not None), None)
                if strict is not None:
                    inclusive = (exp.GTE if isinstance(strict, exp.GT) else exp.LTE)(
                        this=strict.this.copy(), expression=strict.expression.copy())
                    raise self.refuse(f"{how.upper()} JOIN ... ON {strict.sql(dialect=DIALECT)}",
                                      "an outer join's time bound is inclusive (>=, <= or BETWEEN): write "
                                      f"{inclusive.sql(dialect=DIALECT)}")
        else:
            raise self.refuse(f"{how.upper()} JOIN" if how != "inner" else "JOIN",
                              self.no_time_bound(how, keys, (left, la), (right, ra), outer_where, which))
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

    def joins_both(self, c: Any, which: Any, la: str, ra: str, times: tuple[str | None, str | None]) -> bool:
        """Whether a WHERE conjunct belongs to the join of ``la`` and ``ra``: an equality of a column
        of each, ``window(a.ts, ...) = window(b.ts, ...)``, or a time bound of the two streams'
        event times (``B.ts BETWEEN B1.ts - INTERVAL '10' SECOND AND B1.ts``). A comparison of
        other columns (``B.date_time <= A.expires``) is a filter."""
        exp = self.exp
        if isinstance(c, exp.EQ):
            a, b = which(c.this), which(c.expression)
            if a and b and a != b:
                return True
            if all(isinstance(x, exp.Anonymous) and x.name.lower() == "window" and x.expressions
                   for x in (c.this, c.expression)):
                return {which(x.expressions[0]) for x in (c.this, c.expression)} == {la, ra}
            return False
        parts = [b for b in self.bound(c, which, la, ra, times) if b[0] is not None]
        return bool(parts) and all((times[0] is None or b[1] == times[0]) and (times[1] is None or b[2] == times[1])
                                   for b in parts)

    def no_time_bound(self, how: str, keys: list[tuple[str, str]], lside: tuple[Relation, str],
                      rside: tuple[Relation, str], where: list[Any], which: Any) -> str:
        """The error of a join whose condition bounds no time, with the bounds to add (each one
        that compiles as written)."""
        (left, la), (right, ra) = lside, rside
        lt, rt = left.event_time, right.event_time
        ttl = (f"Stream.join(other, left_on={[k for k, _ in keys]}, right_on={[k for _, k in keys]}, "
               + ("" if how == "inner" else f"how={how!r}, ") + "ttl=timedelta(days=1)) in Python")
        place = "ON or WHERE" if how == "inner" else "ON"  # after an outer join, WHERE is a filter of its rows
        if lt is None or rt is None:
            unknown = " and ".join(a for a, t in ((la, lt), (ra, rt)) if t is None)
            return (f"the condition bounds no time, and the event time of {unknown} is not known here: select it "
                    "(its stream's event-time column, or its window's end) in the subquery and bound the two "
                    f"event times (BETWEEN with INTERVALs) in {place}, or join with {ttl}")
        # a comparison in WHERE that looks like a bound but is not of the event times
        near = ""
        for c in where:
            parts = [b for b in self.bound(c, which, la, ra, (lt, rt)) if b[0] is not None]
            if parts:
                near = (f"{c.sql(dialect=DIALECT)} compares {la}.{parts[0][1]} and {ra}.{parts[0][2]}, not the "
                        f"event times {la}.{lt} and {ra}.{rt}, so it is a filter, and ")
                break
        between = (f"AND {ra}.{rt} BETWEEN {la}.{lt} - INTERVAL '10' SECOND AND {la}.{lt} + "
                   "INTERVAL '10' SECOND")
        windows = "" if left.window or right.window else (
            f", join equal windows (AND window({la}.{lt}, '10 seconds') = window({ra}.{rt}, '10 seconds'))")
        return (f"{near}the condition bounds no time: add a time bound to {place} ({between}){windows}, or "
                f"join with {ttl}")

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


def interval_sql(offset: timedelta) -> str:
    """`` + INTERVAL '1' DAY`` (or `` - ...``) for an offset; empty for none."""
    us = round(offset / timedelta(microseconds=1))
    if not us:
        return ""
    sign, us = (" + " if us > 0 else " - "), abs(us)
    for unit, size in (("DAY", 86_400_000_000), ("HOUR", 3_600_000_000), ("MINUTE", 60_000_000),
                       ("SECOND", 1_000_000), ("MILLISECOND", 1000), ("MICROSECOND", 1)):
        if us % size == 0:
            return f"{sign}INTERVAL '{us // size}' {unit}"
    raise AssertionError("unreachable: every offset is a whole number of microseconds")
