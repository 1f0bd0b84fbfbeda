"""``lockgate explain``: both plans, readable (or as JSON)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from .compile import CompiledPlan
from .logical import Partitioning, PipelineVertex
from .physical import Cycle


def _describe(v: PipelineVertex) -> str:
    c = v.config
    if v.op == "source":
        s = c["source"]
        if s["kind"] == "nexmark":
            return f"nexmark({s['stream']}, {s['events_per_second']} events/s, seed {s['seed']})"
        if s["kind"] == "file":
            return f"files({s['format']}, {s['path']})"
        if s["kind"] == "nats":
            return f"nats({s['stream']}{', ' + s['subject'] if s.get('subject') else ''}, {s['format']})"
        return f"postgres({s['table']})"
    if v.op == "sink":
        s = c["sink"]
        target = s.get("path") or s.get("table") or s.get("name")
        return f"{s['kind']} sink({target})"
    if v.op == "select":
        return "select(" + ", ".join(c["exprs"]) + ")"
    if v.op == "with_column":
        return f"with_column({c['column']} = {c['expr']})"
    if v.op == "filter":
        return f"filter({c['condition']})"
    if v.op == "map_batches":
        return f"map_batches({c['fn']})"
    if v.op == "sql":
        return f"sql({' '.join(c['query'].split())})"
    if v.op in ("window_aggregate", "running_aggregate"):
        aggs = ", ".join(
            f"{k}={a['kind']}({a['column'] or ''})" for k, a in c["aggs"].items()
        )
        win = _window_text(c["window"]) if c.get("window") else ""
        return f"{win}aggregate by [{', '.join(c['keys'])}]: {aggs}"
    if v.op == "over_aggregate":
        aggs = ", ".join(f"{k}={a['kind']}({a['column'] or ''})" for k, a in c["aggs"].items())
        frame = (f"rows between {c['rows']} preceding and current row" if c.get("rows") is not None else
                 f"range between {timedelta(microseconds=c['range_us'])} preceding and current row")
        return f"over [{', '.join(c['keys'])}] order by event time {frame}: {aggs}"
    if v.op == "window_top_n":
        asc = c["ascending"]
        if isinstance(asc, list):
            by = ", ".join(f"{col} {'asc' if a else 'desc'}" for col, a in zip(c["by"], asc, strict=True))
            return f"{_window_text(c['window'])}top {c['n']} by [{by}] per [{', '.join(c['keys'])}] as {c['rank']}"
        order = "ascending" if asc else "descending"
        return (f"{_window_text(c['window'])}top {c['n']} by [{', '.join(c['by'])}] {order} per "
                f"[{', '.join(c['keys'])}] as {c['rank']}")
    if v.op == "lookup_join":
        t = c["table"]
        where = f"postgres table {t['table']}" if t["kind"] == "postgres" else f"{t['format']} files {t['path']}"
        return f"lookup join ({c['how']}) on {c['left_on']} = {c['right_on']} with {where}, read every round"
    if v.op == "interval_join":
        how = "" if c.get("how", "inner") == "inner" else f"{c['how']} outer "
        if c.get("ttl_us") is not None:
            return f"{how}join on {c['left_on']} = {c['right_on']} with ttl {timedelta(microseconds=c['ttl_us'])}"
        lo, hi = _signed(c["lower_us"]), _signed(c["upper_us"])
        return f"{how}interval join on {c['left_on']} = {c['right_on']}: right.ts {lo} <= left.ts <= right.ts {hi}"
    if v.op == "deduplicate":
        within = f" within {timedelta(microseconds=c['within_us'])}" if c.get("within_us") else ""
        return f"deduplicate by [{', '.join(c['keys'])}]{within}"
    if v.op == "graph_compute":
        p = c["program"]
        params = ", ".join(f"{k}={val!r}" for k, val in p.get("params", {}).items())
        name = p["program"].rsplit(".", 1)[-1]
        return (f"graph compute {name}({params}) over edges{' and vertices' if c.get('vertices') else ''}, "
                f"emits {c.get('emit', 'changes')} by id")
    if v.op == "graph_traverse":
        return f"graph traversal: {c['k']} hops {c['direction']} from each request's '{c['start']}'"
    if v.op == "join":
        size = timedelta(microseconds=c["window"]["size_us"])
        return f"join on {c['left_on']} = {c['right_on']} in tumbling({size})"
    return v.op


def _signed(micros: int) -> str:
    """``+ 0:00:10`` or ``- 0:00:10`` (timedelta prints a negative one as ``-1 day, 23:59:50``)."""
    return f"- {timedelta(microseconds=-micros)}" if micros < 0 else f"+ {timedelta(microseconds=micros)}"


def _window_text(w: dict[str, Any]) -> str:
    """A windowed operator's window, as ``explain`` prints it (with a trailing space)."""
    if w["type"] == "session":
        return f"session(gap {timedelta(microseconds=w['gap_us'])}) "
    if w["type"] == "sliding":
        return f"sliding({timedelta(microseconds=w['size_us'])} every {timedelta(microseconds=w['slide_us'])}) "
    return f"tumbling({timedelta(microseconds=w['size_us'])}) "


def _physical(plan: CompiledPlan) -> list[str]:
    """The cycles as the runner walks them (:meth:`ExecutionGraph.steps`): groups in
    order, their chains in order, each chain's operators in order; heads and tails."""
    ex, g = plan.execution, plan.graph
    lines: list[str] = []
    for cyc in ex.top_cycles:
        lines.append(f"  {cyc.id}: {cyc.mode} mode, one round per cycle window")
        lines.append(f"    heads (read the window's slice): {', '.join(cyc.heads)}")
        group = chain = ""
        for step in ex.steps(cyc):
            if step.group != group:
                group, chain, grp = step.group, "", ex.groups[step.group]
                kept = f"; persisted for the round: {', '.join(grp.materialized)}" if grp.materialized else ""
                lines.append(f"    {group}  (ends at: {grp.boundary}{kept})")
            if step.chain != chain:
                chain = step.chain
                lines.append(f"      {chain}  p={ex.chains[chain].parallelism}: {step.operator}")
            else:
                lines[-1] += f" -> {step.operator}"
            inner = ex.iteration_of(step.operator)
            if inner is not None:
                lines += _iteration(inner)
        ends = [f"{t} ({'snapshot state' if g.vertices[t].stateful else 'stage output'})" for t in cyc.tails]
        lines.append(f"    tails: {', '.join(ends)}")
    return lines


def _iteration(cyc: Cycle) -> list[str]:
    """An iteration cycle nested in a round, as ``explain`` prints it under its operator."""
    s = cyc.settings
    stops = []
    if s.get("halt_when"):
        stops.append(s["halt_when"].replace("_", " "))
    if s.get("converged"):
        stops.append("converged()")
    if s.get("max_supersteps") is not None:
        stops.append(f"at most {s['max_supersteps']} supersteps")
    every = s.get("checkpoint_every", 1)
    lines = [
        f"        {cyc.id}: {cyc.mode} mode, nested in {cyc.parent}: supersteps of {cyc.operator} in every round, "
        f"until {' or '.join(stops) or 'halted'}",
        f"          one superstep: {' -> '.join(s.get('phases', []))}",
        f"          vertex state checkpointed every {every} superstep{'s' if every != 1 else ''} (a killed round "
        "resumes at the last one)",
    ]
    if s.get("combiner"):
        lines[1] += f"  (messages combined by {s['combiner']})"
    return lines


def explain(plan: CompiledPlan) -> str:
    """Both plans as text: the logical graph, the physical plan as it runs, the state layout."""
    g = plan.graph
    wm = g.watermark
    late = wm["late"] if isinstance(wm["late"], str) else f"side sink {wm['late']['sink']['kind']}"
    lines = [
        f"Pipeline {g.name}  plan version {plan.version}",
        f"  cycle window {timedelta(microseconds=g.cycle_window_us)}, "
        f"allowed lateness {timedelta(microseconds=wm['lateness_us'])}, late records: {late}",
        "",
        "Logical plan (PipelineGraph)",
    ]
    for vid in g.topological_order():
        v = g.vertices[vid]
        state = "  [stateful]" if v.stateful else ""
        lines.append(f"  {vid}  {v.kind.value}  p={v.parallelism}{state}")
        lines.append(f"      {_describe(v)}")
        if v.schema:
            et = f"  event time: {v.event_time}" if v.event_time else ""
            lines.append(f"      schema: {v.schema_string()}{et}")
        for e in g.outputs(vid):
            part = f"KEY({', '.join(e.keys)})" if e.partitioning == Partitioning.KEY else e.partitioning.value
            lines.append(f"      -> {e.target}  {part}")
    lines += ["", "Physical plan (ExecutionGraph): what runs, in this order"]
    lines += _physical(plan)
    layout = g.state_layout()
    lines += ["", "State layout (what a checkpoint must fit)"]
    if not layout:
        lines.append("  (stateless)")
    for op, tables in layout.items():
        for t, schema in tables.items():
            lines.append(f"  {op}.{t}: {schema}")
    return "\n".join(lines)


def explain_json(plan: CompiledPlan) -> str:
    return json.dumps(
        {
            "plan_version": plan.version,
            "logical": plan.graph.to_dict(),
            "physical": plan.execution.to_dict(),
            "state_layout": plan.graph.state_layout(),
        },
        indent=2,
        sort_keys=True,
        default=str,
    )
