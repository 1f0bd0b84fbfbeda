"""ITERATOR operators in a cycle round: a graph computation's or traversal's iteration cycle.

A graph operator keeps the graph as operator state, in the snapshot store like any other state
(incremental layers, :mod:`lockgate.runtime.state.layers`):

- ``edges``: every edge so far (``src``, ``dst``, attributes), append-only; an edge seen again is
  ignored (the first one's attributes are kept);
- ``vertices``: the vertex stream's rows by ``id`` (only when the graph has one);
- ``values`` (computations): every vertex's value after the last window, by ``id``.

Each round adds the window's new edges and vertices, then runs the operator's *iteration cycle*
(nested in the round's stream cycle, :data:`~lockgate.plan.physical.ITERATION`): supersteps until
the cycle's halting rule or bound. A computation runs them with the
:class:`~lockgate.graph.superstep.SuperstepDriver` in a folder of its own per window
(``<snapshots>/<job>/iterations/<operator>/w=<window>``), which checkpoints the vertex state every
``checkpoint_every`` supersteps: a round killed in the middle resumes there when the window runs
again from the same state and the same input records (the folder records which), and ends with
the same result. The round's
delta is the window's new edges and the vertices whose value changed; the folder of an earlier
window is deleted once a later window starts (its result is in the checkpoint by then).

Every superstep is reported to the round (:attr:`~lockgate.runtime.context.CycleContext.supersteps`),
which hands them to the catalog with the round's result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .. import faults
from .. import filesystems as lfs
from ..errors import CompileError, InvalidRecordsError
from ..graph.errors import GraphError
from ..graph.state import StateFolder
from ..logs import get_logger, log_event
from ..plan.logical import PipelineVertex
from ..plan.physical import Cycle
from .context import CycleContext
from .invalid import null_ids, rule_of
from .state.layers import StateDelta, anti_join

_log = get_logger(__name__)

EDGES, VERTICES, VALUES = "edges", "vertices", "values"


def _compile_error(v: PipelineVertex, err: GraphError) -> CompileError:
    return CompileError(str(err), v.id)


def _new_edges(ctx: CycleContext, v: PipelineVertex, edges_in: DataFrame) -> tuple[DataFrame, DataFrame | None]:
    """The window's edges not yet in the graph (deduplicated), cut from their lineage, and every
    edge of the graph before them (None: no edge yet)."""
    new = edges_in.dropDuplicates(["src", "dst"])
    old = ctx.state(v.id, EDGES)
    if old is None:
        return ctx.cut(new), None
    seen = old.lookup(None, new, ["src", "dst"])
    return ctx.cut(anti_join(new, seen, ["src", "dst"])), old.select(None)


def _vertices(ctx: CycleContext, v: PipelineVertex, vertices_in: DataFrame | None) -> tuple[DataFrame | None, DataFrame | None]:
    """The window's vertex rows (the last of an id wins), cut, and every vertex row now."""
    if vertices_in is None:
        return None, None
    new = ctx.cut(vertices_in.dropDuplicates(["id"]))
    old = ctx.state(v.id, VERTICES)
    if old is None:
        return new, new
    return new, anti_join(old.select(("id",)), new, ["id"]).unionByName(new)


def _valid(
    ctx: CycleContext, v: PipelineVertex, df: DataFrame, ids: list[str], what: str, source: str | None = None
) -> DataFrame:
    """The records of ``df`` whose vertex ids (``ids``) are all set, cut from their lineage. A
    record with a null id belongs to no vertex: under the operator's ``invalid="fail"`` (the
    default) the window fails naming the operator, the column and the count; under ``"skip"`` it
    is dropped and counted (the round's ``invalid_rows``). Never dropped silently.

    ``source``: the operator whose output ``df`` is. Several graph operators reading one stream
    drop the same records: they are counted once, by the first of them (the log names each)."""
    df = ctx.cut(df)
    bad = df.filter(null_ids(df, ids))
    count = bad.count()
    if count == 0:
        return df
    if rule_of(v.config) == "fail":
        nulls = bad.agg(*[F.sum(F.col(c).isNull().cast("long")).alias(c) for c in ids]).first()
        cols = ", ".join(f"'{c}' ({int(nulls[c] or 0)})" for c in ids if nulls[c])
        raise InvalidRecordsError(
            f"operator '{v.id}': {count} {what} in window {ctx.window} have a null vertex id (column {cols}): "
            f"filter them out before the graph (e.g. .filter('{ids[0]} IS NOT NULL')), or pass "
            "Pipeline(invalid='skip') to drop and count them as invalid_rows",
            source=v.id, column=ids[0], count=count)
    key = f"{source or v.id}/{','.join(ids)}"
    counted_by = ctx.invalid_counted.setdefault(key, v.id)
    if counted_by == v.id:
        ctx.invalid[v.id] = ctx.invalid.get(v.id, 0) + count
    log_event(_log, "invalid_records", operator=v.id, window=ctx.window, what=what, rows=count,
              input=source, counted_by=counted_by)
    return df.filter(~null_ids(df, ids))


def _source(sources: Sequence[str], i: int) -> str | None:
    return sources[i] if i < len(sources) else None


def _fingerprint(df: DataFrame | None) -> list[str] | None:
    """Rows and an order-free hash of a (cut, small) input: what tells a window's inputs apart
    when it runs again, so that a computation resumes only over the very same records."""
    if df is None:
        return None
    row = df.agg(F.count(F.lit(1)), F.sum(F.xxhash64(*df.columns).cast("decimal(38,0)"))).first()
    return [str(row[0]), str(row[1] or 0)]


def graph_compute(
    ctx: CycleContext,
    v: PipelineVertex,
    inputs: list[DataFrame],
    fns: Mapping[str, Callable[..., Any]],
    iteration: Cycle | None,
    sources: Sequence[str] = (),
) -> DataFrame:
    """One round of a ``graph_compute`` operator: add the window's edges and vertices, run the
    program's supersteps from the previous values, emit the changed (or all) results.
    ``sources``: the operators whose outputs ``inputs`` are (invalid records are counted once
    per input however many graph operators read it)."""
    from ..graph.probe import probe_program, vertex_schema
    from ..graph.superstep import SuperstepDriver

    cfg = v.config
    program = fns[v.id]
    edges_in = inputs[0]
    vertices_in = inputs[1] if cfg.get("vertices") else None
    try:
        vertex_schema(edges_in.schema, None if vertices_in is None else vertices_in.schema)
        if ctx.analysis:
            state_schema, output = probe_program(
                ctx.spark, program, edges_in.schema, None if vertices_in is None else vertices_in.schema)
            if "id" not in output.columns:
                raise CompileError(f"{program.name}.finish dropped the column 'id': keep it (the output updates "
                                   "rows by vertex id)", v.id)
            values = ctx.spark.createDataFrame([], state_schema).select("id", "value")
            ctx.set_state(v.id, StateDelta(edges_in, None), EDGES)
            ctx.set_state(v.id, StateDelta(values, ("id",)), VALUES)
            if vertices_in is not None:
                ctx.set_state(v.id, StateDelta(vertices_in, ("id",)), VERTICES)
            return _as_of(ctx, output)
    except GraphError as err:
        raise _compile_error(v, err) from None
    if iteration is None:
        raise CompileError("an ITERATOR operator runs inside its iteration cycle, and the execution graph gives "
                           "it none", v.id)
    settings = iteration.settings
    edges_in = _valid(ctx, v, edges_in, ["src", "dst"], "edges", _source(sources, 0))
    if vertices_in is not None:
        vertices_in = _valid(ctx, v, vertices_in, ["id"], "vertex records", _source(sources, 1))
    new_edges, old_edges = _new_edges(ctx, v, edges_in)
    new_vertices, all_vertices = _vertices(ctx, v, vertices_in)
    previous_state = ctx.state(v.id, VALUES)
    previous = None if previous_state is None else previous_state.select(("id",))
    inputs = {"edges": _fingerprint(new_edges), "vertices": _fingerprint(new_vertices)}
    if all(f is None or f[0] == "0" for f in inputs.values()):
        # nothing new: the result is the previous window's (none yet: an empty graph), nothing is emitted
        empty = ctx.spark.createDataFrame([], _values_schema(ctx, v, program, edges_in, vertices_in, previous))
        return _as_of(ctx, program.finish(_state_rows(empty, all_vertices)))
    all_edges = new_edges if old_edges is None else old_edges.unionByName(new_edges)

    folder_uri = ctx.iteration_folder(v.id)
    _drop_earlier(folder_uri)
    tag = {"window": ctx.window, "base": _base_of(ctx, v.id), "inputs": inputs, "program": cfg["program"]}
    driver = SuperstepDriver(
        program, folder_uri, spark=ctx.spark, max_supersteps=cfg.get("max_supersteps"),
        checkpoint_every=int(settings.get("checkpoint_every", 1)), tag=tag,
        on_superstep=_reporter(ctx, v.id),
    )
    folder = StateFolder(folder_uri)
    try:
        if driver.tag_of() == tag and folder.last_completed() is not None:
            for s in folder.completed():  # what the killed attempt completed: not computed again
                record = folder.read_record(s) or {}
                ctx.supersteps.append(_record(v.id, record, resumed=True))
            log_event(_log, "iteration_resumed", operator=v.id, window=ctx.window, superstep=folder.last_completed())
            result = driver.resume()
        else:
            lfs.delete_path(folder.fs, folder.path)
            dynamic = previous is not None
            result = driver.run(all_edges, all_vertices, previous=previous,
                                new_edges=new_edges if dynamic else None,
                                stored_edges=_stored_edges(ctx, v.id) if dynamic and old_edges is not None else None)
    except GraphError as err:
        raise CompileError(str(err), v.id) from None
    final = result.state
    values = final.select("id", "value")
    changed = values if previous is None else anti_join(values, previous, ["id", "value"])
    ctx.set_state(v.id, StateDelta(new_edges, None), EDGES)
    ctx.set_state(v.id, StateDelta(changed, ("id",)), VALUES)
    if new_vertices is not None:
        ctx.set_state(v.id, StateDelta(new_vertices, ("id",)), VERTICES)
    emitted = final if cfg.get("emit") == "all" else final.join(changed.select("id"), "id", "left_semi")
    return _as_of(ctx, program.finish(emitted))


def _values_schema(
    ctx: CycleContext, v: PipelineVertex, program: Any, edges_in: DataFrame, vertices_in: DataFrame | None,
    previous: DataFrame | None,
) -> Any:
    """The ``id, value`` columns of the operator's values (from its state, or from its program)."""
    if previous is not None:
        return previous.schema
    from ..graph.probe import probe_program

    state_schema, _ = probe_program(ctx.spark, program, edges_in.schema,
                                    None if vertices_in is None else vertices_in.schema)
    return ctx.spark.createDataFrame([], state_schema).select("id", "value").schema


def _state_rows(values: DataFrame, vertices: DataFrame | None) -> DataFrame:
    """Vertex rows as ``finish`` reads them: ``id``, the attributes, ``value``."""
    if vertices is None:
        return values
    return values.join(vertices, "id", "left").select("id", *[c for c in vertices.columns if c != "id"], "value")


def _as_of(ctx: CycleContext, df: DataFrame) -> DataFrame:
    """The results with ``as_of``: the end of the window they are the results after."""
    return df.withColumn("as_of", F.timestamp_micros(F.lit(ctx.end_us)))


def _stored_edges(ctx: CycleContext, op: str) -> list[str] | None:
    """The Parquet folders of the operator's edges at the restore point (its snapshot layers: they
    stay while the window runs, the restore point being the job's latest checkpoint), which the
    driver reads in place rather than copying; None when they are not plain layers of every edge."""
    state = ctx.state_in.get(f"{op}.{EDGES}")
    if state is None or state.horizon is not None or getattr(state, "_extra", None) or not state.layers:
        return None
    return [uri for uri, _ in state.layers]


def _base_of(ctx: CycleContext, op: str) -> list[list[Any]]:
    """What a window's computation starts from: the layers of the operator's state at the restore
    point (two attempts of a window from the same checkpoint start from the same layers)."""
    out = []
    for table in (EDGES, VERTICES, VALUES):
        state = ctx.state_in.get(f"{op}.{table}")
        if state is not None:
            out.append([table, [uri for uri, _ in state.layers], state.horizon])
    return out


def _drop_earlier(folder_uri: str) -> None:
    """Delete the iteration folders of the operator's earlier windows (committed by now)."""
    fs, path = lfs.resolve(folder_uri)
    parent, _, mine = path.rstrip("/").rpartition("/")
    for name in lfs.list_dirs(fs, parent):
        if name.startswith("w=") and name < mine:
            lfs.delete_path(fs, f"{parent}/{name}")


def _record(op: str, stats: dict[str, Any], resumed: bool = False) -> dict[str, Any]:
    return {
        "operator": op,
        "superstep": int(stats.get("superstep", 0)),
        "messages_sent": int(stats.get("messages_sent", 0)),
        "vertices_changed": int(stats.get("vertices_changed", 0)),
        "active_vertices": int(stats.get("active_vertices", 0)),
        "elapsed_ms": float(stats.get("elapsed_ms", 0.0)),
        "halted_by": stats.get("halted_by"),
        "checkpointed": bool(stats.get("checkpointed", True)),
        "resumed": resumed,
    }


def _reporter(ctx: CycleContext, op: str) -> Callable[[Any], None]:
    def report(stats: Any) -> None:
        record = _record(op, stats.to_json())
        ctx.supersteps.append(record)
        log_event(_log, "superstep", operator=op, window=ctx.window, superstep=record["superstep"],
                  messages=record["messages_sent"], changed=record["vertices_changed"],
                  ms=record["elapsed_ms"], halted_by=record["halted_by"])
        faults.maybe_crash_in_iteration(ctx.window, record["superstep"])

    return report


def graph_traverse(
    ctx: CycleContext,
    v: PipelineVertex,
    inputs: list[DataFrame],
    iteration: Cycle | None,
    sources: Sequence[str] = (),
) -> DataFrame:
    """One round of a ``graph_traverse`` operator: add the window's edges, then answer the
    window's requests hop by hop (one superstep per hop, the lineage cut after each)."""
    from ..graph.probe import vertex_schema

    cfg = v.config
    edges_in, requests = inputs
    start, k, direction = cfg["start"], int(cfg["k"]), cfg["direction"]
    try:
        id_type = vertex_schema(edges_in.schema, None)["id"].dataType
    except GraphError as err:
        raise _compile_error(v, err) from None
    if start not in requests.columns:
        raise CompileError(f"the request stream has no column '{start}' (it has {', '.join(requests.columns)}): "
                           "pass traverse(..., start='<the column holding the start vertex>')", v.id)
    clash = [c for c in ("vertex", "hops") if c in requests.columns]
    if clash:
        raise CompileError(f"the request stream has a column '{clash[0]}', a name the answers use: rename it", v.id)
    if requests.schema[start].dataType.simpleString() != id_type.simpleString():
        raise CompileError(
            f"request column '{start}' is {requests.schema[start].dataType.simpleString()} but vertex ids are "
            f"{id_type.simpleString()}: cast it with with_column first", v.id)
    if ctx.analysis:
        ctx.set_state(v.id, StateDelta(edges_in, None), EDGES)
        return requests.select("*", F.lit(None).cast(id_type).alias("vertex"), F.lit(None).cast("int").alias("hops"))
    if iteration is None:
        raise CompileError("an ITERATOR operator runs inside its iteration cycle, and the execution graph gives "
                           "it none", v.id)
    new_edges, old_edges = _new_edges(ctx, v, _valid(ctx, v, edges_in, ["src", "dst"], "edges", _source(sources, 0)))
    ctx.set_state(v.id, StateDelta(new_edges, None), EDGES)
    edges = new_edges if old_edges is None else old_edges.unionByName(new_edges)
    routes = edges.select("src", "dst")
    if direction == "in":
        routes = routes.select(F.col("dst").alias("src"), F.col("src").alias("dst"))
    elif direction == "both":
        routes = routes.unionByName(routes.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    routes = ctx.cache(routes.distinct())
    starts = ctx.cut(requests.select(F.col(start).alias("__start")).distinct())
    reached = frontier = starts.select("__start", F.col("__start").alias("vertex"), F.lit(0).alias("hops"))
    bound = int(iteration.settings.get("max_supersteps", k))
    for hop in range(1, bound + 1):
        t = time.perf_counter()
        sent = frontier.join(routes, frontier["vertex"] == routes["src"]).select(
            "__start", F.col("dst").alias("vertex"), F.lit(hop).alias("hops"))
        nxt = ctx.cut(anti_join(sent.dropDuplicates(["__start", "vertex"]), reached, ["__start", "vertex"]))
        found = nxt.count()
        reached = ctx.cut(reached.unionByName(nxt))
        halted = "no_new_vertices" if found == 0 else ("max_supersteps" if hop == bound else None)
        record = _record(v.id, {"superstep": hop, "messages_sent": found, "vertices_changed": found,
                                "active_vertices": frontier.count(), "halted_by": halted,
                                "elapsed_ms": round((time.perf_counter() - t) * 1000, 1)})
        ctx.supersteps.append(record)
        faults.maybe_crash_in_iteration(ctx.window, hop)
        frontier = nxt
        if halted:
            break
    answers = requests.join(reached, requests[start] == reached["__start"]).drop("__start")
    return answers.select(*requests.columns, "vertex", F.col("hops").cast("int").alias("hops"))


__all__ = ["graph_compute", "graph_traverse"]
