"""What a committed round says about its job's state, read from its snapshot manifest (no Spark).

A round's :class:`~lockgate.runtime.results.CycleResult` carries the manifest of its state
snapshot: for each state table (``operator.table``) its layers, the base and the deltas,
each in the snapshot folder of the round that wrote it. The layers in *this* round's
folder are what it wrote.

>>> manifest = {"agg.main": {"layers": [
...     {"snapshot": "s/w=1", "kind": "base", "files": [{"path": "a", "size": 900}], "rows": 9},
...     {"snapshot": "s/w=2", "kind": "delta", "files": [{"path": "b", "size": 100}], "rows": 1}]}}
>>> state_tables("s/w=2", manifest)
{('agg', 'main'): (10, 1000)}
>>> written_bytes("s/w=2", manifest)
100
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..checkpoint.layers import state_entries, table_layers


def split_table(name: str) -> tuple[str, str]:
    """``("operator", "table")`` of a manifest key ``operator.table`` (``main`` when it names no table).

    >>> split_table("bidder_totals.main"), split_table("legacy")
    (('bidder_totals', 'main'), ('legacy', 'main'))
    """
    op, sep, table = name.rpartition(".")
    return (op, table) if sep else (name, "main")


def state_tables(snapshot_uri: str | None, manifest: Mapping[str, Any] | None) -> dict[tuple[str, str], tuple[int, int]]:
    """``{(operator, table): (rows, bytes)}`` of every state table at a checkpoint."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for name, entry in state_entries(manifest or {}).items():
        if not isinstance(entry, Mapping):
            continue
        layers = table_layers(snapshot_uri, entry)
        rows = int(entry.get("rows") or sum(int(layer.get("rows") or 0) for layer in layers))
        size = sum(int(f.get("size") or 0) for layer in layers for f in layer.get("files") or [])
        out[split_table(name)] = (rows, size)
    return out


def written_bytes(snapshot_uri: str | None, manifest: Mapping[str, Any] | None) -> int:
    """Bytes of the snapshot files the round whose folder is ``snapshot_uri`` wrote."""
    if not snapshot_uri:
        return 0
    return sum(
        int(f.get("size") or 0)
        for entry in state_entries(manifest or {}).values() if isinstance(entry, Mapping)
        for layer in table_layers(snapshot_uri, entry) if layer.get("snapshot") == snapshot_uri
        for f in layer.get("files") or []
    )


__all__ = ["split_table", "state_tables", "written_bytes"]
