"""Read one operator's keyed state at a checkpoint as a table, without Spark.

The state is merged from the table's layers (see :mod:`lockgate.checkpoint.layers`): the
newest version of each row (its identity: the key, and the window of windowed state), no
tombstoned rows, nothing below the horizon. The columns are shown as a user reads them:
``window_start`` / ``window_end`` timestamps for windowed state (``pane_start`` for a sliding
window's panes), ``seen_at`` for a
deduplicate's keys, and partial aggregates without their ``__`` prefix (an ``avg`` is its
running ``<name>_sum`` and ``<name>_n``; an ``approx_distinct`` its sketch).

Example::

    >>> client.read_state("demo", "bidder_totals").to_pandas().head(2)   # doctest: +SKIP
       bidder  bids  spent
    0    1001     7  52311
    1    1007     2   9014
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import SnapshotError
from ..filesystems import resolve
from .layers import BASE, horizon, table_layers

_DELETED = "__lg_del"
_ORDER = "__lg_order"
#: internal column -> (shown name, is a microsecond timestamp)
_SHOWN = {"__ws": ("window_start", True), "__we": ("window_end", True), "__ps": ("pane_start", True),
          "__ts": ("seen_at", True)}


#: Spark simple types -> Arrow, for the columns of a state that holds no rows
_ARROW = {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8(),
          "double": pa.float64(), "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(),
          "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC")}


def empty_state(columns: list[tuple[str, str]]) -> pa.Table:
    """A state table with no rows, its columns from the plan (``(name, Spark type)``)."""
    fields = [pa.field(name, _ARROW.get(kind, pa.null())) for name, kind in columns]
    return _shown(pa.Table.from_pylist([], schema=pa.schema(fields)))


def read_layer(uri: str, operator: str, layer: Mapping[str, Any]) -> pa.Table:
    """The rows of one layer of ``operator``'s state in snapshot folder ``uri`` (a manifest's
    layer entry: its ``files``), timestamps as microseconds marked UTC; its columns as written."""
    fs, base = resolve(uri)
    parts = [_utc_micros(pq.read_table(f"{base}/{operator}/{item['path']}", filesystem=fs))
             for item in layer.get("files", [])]
    return pa.concat_tables(parts, promote_options="default") if parts else pa.table({})


def _utc_micros(t: pa.Table) -> pa.Table:
    """``t`` with every timestamp as microseconds marked UTC. State layers written by Spark
    until 2026-11-28 hold its default INT96 timestamps (read as naive nanoseconds holding UTC
    instants), the driver's and Spark's since then microseconds marked UTC, and one chain may
    hold both."""
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type) and (f.type.unit != "us" or f.type.tz != "UTC"):
            col = t.column(i)
            if f.type.tz is None:
                col = pc.cast(col, pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
            else:
                col = pc.cast(col, pa.timestamp("us", tz="UTC"))
            t = t.set_column(i, f.name, col)
    return t


def read_state_table(snapshot_uri: str | None, table: str, entry: Mapping[str, Any]) -> pa.Table:
    """The live rows of state table ``table`` (``"<operator>.<name>"``) of a checkpoint whose
    manifest entry for it is ``entry``; internal columns renamed for reading."""
    layers = table_layers(snapshot_uri, entry)
    frames = []
    for rank, layer in enumerate(layers):
        t = read_layer(layer["snapshot"], table, layer)
        if t.num_rows == 0:
            continue
        df = t.to_pandas(timestamp_as_object=False)
        if _DELETED not in df.columns:
            df[_DELETED] = False
        # newer layers last; within one layer an upsert wins over a tombstone of the same row
        df[_ORDER] = rank * 2 + (~df[_DELETED].astype(bool)).astype(int)
        frames.append(df)
    if not frames:
        return pa.table({})
    df = pd.concat(frames, ignore_index=True)
    cut = horizon(entry)
    if cut is not None and cut[0] in df.columns:
        df = df[df[cut[0]] >= cut[1]]
    identity = entry.get("identity")
    merge = len(layers) > 1 or any(layer["kind"] != BASE for layer in layers)
    if merge and identity is not None:
        missing = [c for c in identity if c not in df.columns]
        if missing:
            raise SnapshotError(f"state table '{table}': identity columns {missing} are not in its files")
        df = df.sort_values(_ORDER, kind="stable")
        df = df.drop_duplicates(list(identity), keep="last") if identity else df.tail(1)
    elif merge and len(layers) > 1 and identity is None and "identity" not in entry:
        raise SnapshotError(
            f"state table '{table}' has {len(layers)} layers but its manifest does not say how they merge "
            "(written by a development build): run one more round, then read it again")
    df = df[~df[_DELETED].astype(bool)].drop(columns=[_DELETED, _ORDER])
    out = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    return _shown(out)


def _shown(t: pa.Table) -> pa.Table:
    names, columns = [], []
    for name, col in zip(t.column_names, t.columns, strict=True):
        shown, is_time = _SHOWN.get(name, (name[2:] if name.startswith("__") else name, False))
        if is_time:
            col = pc.cast(pc.cast(col, pa.int64()), pa.timestamp("us", tz="UTC"))
        names.append(shown)
        columns.append(col)
    return pa.table(columns, names=names)
