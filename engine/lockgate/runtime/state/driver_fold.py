"""Driver folds: a small state table's chain folded on the driver with pyarrow.

A round that folds a chain (:mod:`lockgate.runtime.state.compaction`) and whose fold is small enough
for the driver (``LOCKGATE_DRIVER_SNAPSHOT_ROWS``) collects only its own delta, the rows it
collects anyway when it writes a delta, in the round's one Spark job. The fold is then made
here: the chain's layer files read with pyarrow, the round's delta on top, each identity's
newest row kept (a tombstone hides it), the rows below the horizon dropped, as
:meth:`LayeredState.folded <lockgate.runtime.state.layers.LayeredState.folded>` merges them on
Spark. That fold re-read and re-ranked every layer through a Spark job of its own and an
analysed plan that no round template keeps.

``LOCKGATE_DRIVER_FOLDS=0`` leaves every fold to Spark. Only identities of plain types are folded here (integers, strings, dates, times, booleans),
whose equality pyarrow's grouping and Spark's agree on; any other table folds on Spark.

    >>> import pyarrow as pa
    >>> old = pa.table({"k": [1, 2], "v": [10, 20], "__lg_del": [False, False]})
    >>> new = pa.table({"k": [2, 3], "v": [21, 30], "__lg_del": [True, False]})
    >>> merge_latest([old, new], ("k",), keep_tombstones=False).to_pydict()
    {'k': [1, 3], 'v': [10, 30]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...checkpoint.state_reader import read_layer
from ..settings import switch
from .key_ranges import sort_columns
from .layers import DELETED

_ORDER = "__lg_order"


def enabled() -> bool:
    """Whether small folds are made on the driver (``LOCKGATE_DRIVER_FOLDS=0``: every fold on
    Spark, as before 2026-12-06)."""
    return switch("LOCKGATE_DRIVER_FOLDS")


def foldable(identity: Sequence[str] | None, schema: pa.Schema | Any) -> bool:
    """Whether a table of this identity folds on the driver: append-only (None), one row (()),
    or an identity whose every column is of a plain type."""
    if identity is None or len(identity) == 0:
        return True
    return len(sort_columns(identity, schema)) == len(identity)


def merge_latest(tables: Sequence[pa.Table], identity: Sequence[str] | None, keep_tombstones: bool) -> pa.Table:
    """Layers (oldest first, each with the :data:`DELETED` flag) merged into one: each identity's
    row from the newest layer holding it, an upsert before a tombstone of the same layer (as
    Spark's merge orders them); tombstones kept or dropped. ``identity`` None: the union."""
    parts = [t for t in tables if t.num_rows]
    if not parts:
        out = tables[0].slice(0, 0)
        return out if keep_tombstones else out.drop_columns([DELETED])
    if identity is not None:
        # one int64 key per row: its layer's rank, an upsert above a tombstone of the same layer,
        # then its position (the later row wins a tie)
        layer_order = np.concatenate([
            rank * 2 + ~t[DELETED].fill_null(False).to_numpy(zero_copy_only=False)
            for rank, t in enumerate(tables) if t.num_rows]).astype(np.int64)
        union = pa.concat_tables(parts)
        union = union.append_column(_ORDER, pa.array(layer_order * union.num_rows + np.arange(union.num_rows)))
        if identity:
            best = union.group_by(list(identity), use_threads=False).aggregate([(_ORDER, "max")])
            winners = best[f"{_ORDER}_max"].combine_chunks()
        else:
            winners = pa.array([pc.max(union[_ORDER]).as_py()])
        union = union.filter(pc.is_in(union[_ORDER], value_set=winners)).drop_columns([_ORDER])
    else:
        union = pa.concat_tables(parts)
    if keep_tombstones:
        return union
    return union.filter(pc.invert(pc.fill_null(union[DELETED], False))).drop_columns([DELETED])


def fold(
    layers: Sequence[Mapping[str, Any]],
    table: str,
    delta: pa.Table,
    identity: Sequence[str] | None,
    horizon: tuple[str, int] | None,
    deltas_only: bool,
) -> pa.Table:
    """The fold of a chain's ``layers`` (manifest entries, oldest first: the ones folded, a base
    among them unless ``deltas_only``) and the round's ``delta`` (its rows and :data:`DELETED`
    flags, as collected): a new base (live rows only) or, ``deltas_only``, one delta standing for
    them all (tombstones kept). Columns and types are the delta's."""
    schema = delta.schema
    tables = []
    for layer in layers:
        t = read_layer(layer["snapshot"], table, layer)
        if DELETED not in t.column_names:
            t = t.append_column(DELETED, pa.array([False] * t.num_rows, pa.bool_()))
        tables.append(t.select(schema.names).cast(schema) if t.num_rows else delta.slice(0, 0))
    tables.append(delta)
    if horizon is not None:
        column, bound = horizon
        tables = [t.filter(pc.greater_equal(t[column], pa.scalar(bound, t.schema.field(column).type)))
                  if t.num_rows else t for t in tables]
    return merge_latest(tables, identity, keep_tombstones=deltas_only)


__all__ = ["enabled", "fold", "foldable", "merge_latest"]
