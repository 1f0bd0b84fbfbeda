"""Supersteps of a graph held on the driver: the edges and the vertex state as Arrow tables.

A superstep over a few thousand vertices is a few milliseconds of work, but as Spark jobs (a join
with the edges, a shuffle to combine the messages, a Parquet write read back) it costs most of a
second of scheduling, and over a million edges it scans every edge however few vertices changed.
When the graph fits the driver (:data:`LOCAL_VERTICES`, :data:`LOCAL_EDGES`) the driver keeps the
edges and the last superstep's state in memory and runs a superstep as:

1. the program's Column expressions evaluated by Spark over the vertices that compute, as a local
   relation: after superstep 1 those with messages (:func:`at_rest` gives the others' rows), in a
   dynamic run's ``evolve`` that keeps every value the new edges' ends. Up to :data:`COLLECT_ROWS`
   rows come back without a Spark job (a projection Spark's optimizer folds into the relation), more
   as Arrow in one job; a program with aggregates runs one, observed in the same pass;
2. the messages joined with the edges and combined per receiving vertex here, with Arrow
   (:func:`route`, :func:`combine`), for the built-in combiners; ``along_edge`` and custom
   combiners are still Spark expressions over local relations;
3. the state written as one Parquet file from the driver: every checkpointed superstep is on disk
   exactly as the Spark path writes it, so a resume (either way) reads the same folder.

The results equal the Spark path's (the same expressions, the same combiners; a sum of floating
point messages is added in another order, as Spark's partitions would).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: a graph of at most this many vertices runs its supersteps on the driver (the vertex state of
#: a graph this size is written from the driver on the Spark path too: ``DRIVER_VERTICES``)
LOCAL_VERTICES = 200_000
#: ... and of at most this many edges (two 64-bit ids each: 64 MB of driver memory at the limit)
LOCAL_EDGES = 4_000_000
#: how many edges the first look at a graph collects (:func:`collect_edges`)
FIRST_EDGES = 200_000
#: senders fewer than the edges / this have their edges picked out before the join (:func:`route`)
FEW_SENDERS = 8
#: a local relation of at most this many rows is collected as Python rows (no Spark job), a
#: larger one as Arrow (:func:`collect_table`)
COLLECT_ROWS = 10_000
#: the combiners :func:`combine` does with Arrow (others run as Spark aggregates)
ARROW_COMBINERS = ("sum", "min", "max")


@dataclass
class LocalGraph:
    """What a run keeps on the driver for a small graph: its edges (``new_edges``: a dynamic run's
    new ones, for ``evolve``) and the state of the last superstep, in the state schema's columns."""

    edges: pa.Table
    new_edges: pa.Table | None
    state: pa.Table


def collect_table(df: DataFrame, rows: int | None = None) -> pa.Table:
    """``df``'s rows as an Arrow table of its schema's types.

    ``rows`` is the size of the local relation ``df`` is computed over. Up to :data:`COLLECT_ROWS`
    of them, ``collect``: over a local relation Spark folds the projection and returns its rows
    without a Spark job, where ``toArrow`` always runs one. Above it (or ``None``: ``df`` reads
    files), ``toArrow``: one job, but the rows cross to Python as Arrow batches, not as a Python
    object each (121,635 rows: 0.6 s by ``collect``, 0.1 s by ``toArrow``).
    """
    schema = to_arrow_schema(df.schema)
    if rows is None or rows > COLLECT_ROWS:
        return df.toArrow().cast(schema)
    collected = df.collect()
    columns = list(zip(*collected, strict=True)) if collected else [() for _ in schema]
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_edges(sources: list[str], schema: pa.Schema, limit: int) -> pa.Table | None:
    """The edges stored at ``sources`` (Parquet files or folders on the local file system), read
    here with pyarrow, in ``schema``'s columns and types; ``None`` when there are more than
    ``limit`` of them (row counts from the footers: nothing is read then), a source is not a
    local path, or pyarrow cannot read it in those columns (a partition column in a folder's
    path, say): Spark reads those."""
    import pyarrow.dataset as ds

    paths = []
    for src in sources:
        path = src[len("file:"):] if src.startswith("file:") else src
        if "://" in path or not os.path.exists(path):
            return None
        paths.append(path)
    try:
        sets = [ds.dataset(p, format="parquet") for p in paths]
        if sum(d.count_rows() for d in sets) > limit:
            return None
        tables = [d.to_table(columns=schema.names).cast(schema) for d in sets]
    except (pa.ArrowException, OSError, KeyError):  # a layout pyarrow does not read as Spark does
        return None
    return pa.concat_tables(tables) if tables else schema.empty_table()


def collect_edges(edges: DataFrame, first: int | None = None, limit: int | None = None) -> pa.Table | None:
    """``edges`` collected to the driver when there are at most ``limit`` (:data:`LOCAL_EDGES`) of
    them, else ``None``. Up to ``first`` (:data:`FIRST_EDGES`) come in the one job that finds out; a
    larger graph is counted first (a second job), so that one too large is never collected whole."""
    limit = LOCAL_EDGES if limit is None else limit
    look = min(FIRST_EDGES if first is None else first, limit)
    schema = to_arrow_schema(edges.schema)
    table = edges.limit(look + 1).toArrow()
    if table.num_rows <= look:
        return table.cast(schema)
    if look == limit or edges.limit(limit + 1).count() > limit:
        return None
    table = edges.limit(limit + 1).toArrow()
    return table.cast(schema) if table.num_rows <= limit else None


def route(computed: pa.Table, send: str, routes: pa.Table, key: str) -> pa.Table:
    """The messages of column ``send`` of ``computed`` (``id``, the message; null: nothing sent)
    joined with the edges ``routes`` on ``key`` (``src`` for messages sent along out-edges, ``dst``
    along in-edges): one row per message and edge, ``__message`` with every edge column."""
    senders = computed.select(["id", send]).filter(pc.is_valid(computed[send]))
    senders = senders.rename_columns(["__sender", "__message"])
    if senders.num_rows * FEW_SENDERS < routes.num_rows:
        # a few senders: their edges picked out first (a hash probe per edge), so that the join
        # builds its table over those, not over every edge
        routes = routes.filter(pc.is_in(routes[key], value_set=senders["__sender"].combine_chunks()))
    return senders.join(routes, keys="__sender", right_keys=key, join_type="inner", coalesce_keys=False)


def combinable(combiner: str, messages: pa.Table) -> bool:
    """True when :func:`combine` gives exactly what Spark's aggregate would: a built-in combiner
    over messages without NaN for ``min`` and ``max`` (Spark orders NaN above every number, Arrow
    skips it)."""
    if combiner not in ARROW_COMBINERS:
        return False
    m = messages["__m"]
    if combiner != "sum" and pa.types.is_floating(m.type):
        return not pc.any(pc.is_nan(m)).as_py()
    return True


def combine(
    ids: pa.ChunkedArray, messages: pa.Table, combiner: str, message_type: pa.DataType
) -> tuple[pa.Array, pa.Array]:
    """The messages (``id``, ``__m``) combined per vertex of ``ids`` with a built-in combiner:
    the inbox (null where none arrived, cast back to ``message_type`` as Spark's built-ins do) and
    the count of messages, both in the order of ``ids``."""
    messages = messages.filter(pc.is_valid(messages["__m"]))
    grouped = messages.group_by("id").aggregate([("__m", combiner), ("__m", "count")])
    inbox, count = align(ids, grouped, f"__m_{combiner}", "__m_count")
    # an integer sum out of range fails as Spark's ANSI cast does; a float sum is rounded as Spark's
    return inbox.cast(message_type, safe=not pa.types.is_floating(message_type)), count.cast(pa.int64())


def align(ids: pa.ChunkedArray, combined: pa.Table, inbox: str, count: str) -> tuple[pa.Array, pa.Array]:
    """Columns ``inbox`` and ``count`` of ``combined`` (one row per ``id``) in the order of ``ids``
    (null inbox and count 0 where ``combined`` has no row)."""
    at = pc.index_in(ids, value_set=combined["id"])
    return combined[inbox].take(at), pc.fill_null(combined[count].take(at), 0)


def changed(value: pa.ChunkedArray, old: pa.ChunkedArray) -> pa.ChunkedArray:
    """Where ``value`` differs from ``old`` as Spark's ``NOT (value <=> old)`` says: nulls are
    equal to each other, and NaN equals NaN."""
    same = pc.equal(value, old)
    if pa.types.is_floating(value.type):
        same = pc.or_(same, pc.and_(pc.is_nan(value), pc.is_nan(old)))
    both_null = pc.and_(pc.is_null(value), pc.is_null(old))
    return pc.invert(pc.if_else(both_null, True, pc.fill_null(same, False)))


def _shaped(rows: pa.Table, schema: pa.Schema, given: dict[str, pa.Array | pa.ChunkedArray]) -> pa.Table:
    """A table of ``schema``: the ``given`` columns, the others taken from ``rows`` by name."""
    columns = [(given[f.name] if f.name in given else rows[f.name]).cast(f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def at_rest(state: pa.Table, schema: pa.Schema, value: str, active: bool = False) -> pa.Table:
    """The computed rows (``schema``: a superstep's, before routing) of the vertices of ``state``
    whose program step is known to keep their value and send nothing (no message came: they
    did not compute, ``active`` false; or ``evolve`` keeps every value and they are no new
    edge's end: ``active`` true, as every vertex is in that superstep): the value kept (also as
    ``__old``), nothing sent (``__send_*`` null)."""
    n = state.num_rows
    given = {"__old": state[value], "__active": pa.array([active] * n, pa.bool_())}
    given.update({f.name: pa.nulls(n, f.type) for f in schema if f.name.startswith("__send")})
    return _shaped(state, schema, given)


def warm_start(
    vertices: pa.Table, schema: pa.Schema, value: str, inbox: str, count: str, out_degree: str, in_degree: str
) -> pa.Table:
    """Superstep 0's state (``schema``) of ``vertices`` that have a previous value (``__previous``):
    that value, no message, their degrees (0 where null), as the Spark projection gives it."""
    n = vertices.num_rows
    return _shaped(vertices, schema, {
        value: vertices["__previous"],
        inbox: pa.nulls(n, schema.field(inbox).type),
        count: pa.array([0] * n, pa.int64()),
        out_degree: pc.fill_null(vertices[out_degree], 0),
        in_degree: pc.fill_null(vertices[in_degree], 0),
    })


def count_true(mask: pa.ChunkedArray | pa.Array) -> int:
    """How many of ``mask`` are true."""
    return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)


def vertex_ids(edges: pa.Table, previous: pa.ChunkedArray | None) -> pa.Array:
    """Every endpoint of ``edges`` and every id of ``previous``, once each."""
    parts = [edges["src"].combine_chunks(), edges["dst"].combine_chunks()]
    if previous is not None:
        parts.append(previous.combine_chunks())
    return pc.unique(pa.concat_arrays(parts))


def with_missing(vertices: pa.Table, ids: pa.Array) -> pa.Table:
    """``vertices`` and a row of null attributes for each of ``ids`` it does not hold."""
    missing = ids.filter(pc.invert(pc.is_in(ids, value_set=vertices["id"])))
    extra = pa.table({f.name: missing if f.name == "id" else pa.nulls(len(missing), f.type) for f in vertices.schema})
    return pa.concat_tables([vertices, extra.cast(vertices.schema)])


def with_degrees(vertices: pa.Table, edges: pa.Table, out_name: str, in_name: str) -> pa.Table:
    """``vertices`` with their out- and in-degree over ``edges`` (null for a vertex without edges,
    as Spark's left join gives)."""
    for end, name in (("src", out_name), ("dst", in_name)):
        counts = pa.table({"id": edges[end]}).group_by("id").aggregate([("id", "count")])
        at = pc.index_in(vertices["id"], value_set=counts["id"])
        vertices = vertices.append_column(name, counts["id_count"].take(at).cast(pa.int64()))
    return vertices


def touched(ids: pa.ChunkedArray, new_edges: pa.Table) -> pa.ChunkedArray:
    """Which vertices of ``ids`` are an endpoint of one of ``new_edges``."""
    ends = pa.concat_arrays([new_edges["src"].combine_chunks(), new_edges["dst"].combine_chunks()])
    return pc.is_in(ids, value_set=ends)


__all__ = [
    "ARROW_COMBINERS",
    "COLLECT_ROWS",
    "LOCAL_EDGES",
    "LOCAL_VERTICES",
    "LocalGraph",
    "align",
    "at_rest",
    "vertex_ids",
    "warm_start",
    "with_degrees",
    "with_missing",
    "changed",
    "collect_edges",
    "collect_table",
    "combinable",
    "combine",
    "count_true",
    "read_edges",
    "route",
    "touched",
]
