"""Which snapshot files hold a state table at a checkpoint: its layers (no Spark).

A state table is stored incrementally: one **base** (every live row at the round that wrote
it) and the **deltas** written by later rounds (the rows they changed, and tombstones for
the rows they removed). A checkpoint's manifest entry for a table lists its layers, oldest
first, each in the snapshot folder of the round that wrote it::

    {"layers": [{"snapshot": ".../w=0000000100-a1", "kind": "base",  "files": [...], "rows": 2000000},
                {"snapshot": ".../w=0000000101-a1", "kind": "delta", "files": [...], "rows": 18000}],
     "rows": 2018000,
     "horizon": ["__lg_we", 1767225610000000]}

``rows`` is the sum of the layers' rows (an upper bound of the live rows); ``horizon`` says
that rows whose column is below the value are gone (windows the watermark closed, dedup keys
past their ``within``), even where an older layer still holds them. An entry written before
layers existed (``{"files": [...], "rows": n}`` of its own snapshot folder) reads as one base.

A snapshot folder is therefore needed by every checkpoint whose layers name it, not only by
its own: :func:`needed_snapshots` says which, and retention keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

BASE = "base"
DELTA = "delta"


def table_layers(snapshot_uri: str | None, entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The layers of one state table's manifest entry, oldest first (empty: no state)."""
    if "layers" in entry:
        return [dict(layer) for layer in entry["layers"]]
    if snapshot_uri is None or not entry.get("files") or not entry.get("rows", 1):
        return []  # an empty state has no file: restored as no state
    return [{"snapshot": snapshot_uri, "kind": BASE, "files": entry["files"], "rows": entry.get("rows", 0)}]


def horizon(entry: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(column, bound)``: rows of the table whose ``column`` is below ``bound`` are gone."""
    value = entry.get("horizon")
    return (str(value[0]), int(value[1])) if value else None


def layered_entry(layers: list[dict[str, Any]], horizon_: tuple[str, int] | None) -> dict[str, Any]:
    """The manifest entry of a table made of ``layers`` (oldest first)."""
    return {
        "layers": layers,
        "rows": sum(int(layer["rows"]) for layer in layers),
        "horizon": list(horizon_) if horizon_ else None,
    }


#: the key of a derived checkpoint's manifest that says which windows to replay
REPLAY = "__replay"


def state_entries(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The state tables' entries of a checkpoint's manifest (reserved ``__`` keys left out)."""
    return {name: entry for name, entry in manifest.items() if not name.startswith("__")}


def state_bytes(snapshot_uri: str | None, manifest: Mapping[str, Any] | None) -> int:
    """Bytes of the snapshot files a restore from a checkpoint reads: every layer of every
    state table of its manifest."""
    return sum(
        int(f.get("size") or 0)
        for entry in state_entries(manifest or {}).values()
        for layer in table_layers(snapshot_uri, entry)
        for f in layer.get("files") or []
    )


def replay_range(manifest: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """``(first, last)``: the windows a *derived* checkpoint's state is recomputed from, by
    replaying them with sinks muted on the state its tables' layers hold; None for a
    checkpoint whose snapshot holds its own state.

    A catch-up group (several windows in one run of the worker) writes one snapshot, at its
    last window; the checkpoints of the windows before it are derived from the group's base.
    """
    value = (manifest or {}).get(REPLAY)
    return (int(value["first"]), int(value["last"])) if value else None


def derived_manifest(
    base_uri: str | None, base_manifest: Mapping[str, Any], first: int, last: int
) -> dict[str, Any]:
    """The manifest of a derived checkpoint: the base's layers (named explicitly, so they do
    not depend on the base's folder) and the windows ``first..last`` to replay on them."""
    tables = {
        name: layered_entry(table_layers(base_uri, entry), horizon(entry))
        for name, entry in state_entries(base_manifest).items()
    }
    return {**tables, REPLAY: {"first": first, "last": last}}


def has_state(snapshot_uri: str | None, manifest: Mapping[str, Any]) -> bool:
    """Whether a checkpoint names any state files to verify and read."""
    return bool(snapshot_uri) or any(table_layers(None, e) for e in state_entries(manifest).values())


def needed_snapshots(snapshot_uri: str | None, manifest: Mapping[str, Any]) -> set[str]:
    """Every snapshot folder a checkpoint's state reads: its own and those its layers name."""
    needed = {snapshot_uri} if snapshot_uri else set()
    for entry in state_entries(manifest).values():
        needed.update(layer["snapshot"] for layer in table_layers(snapshot_uri, entry))
    return needed


def needed_by_all(checkpoints: Iterable[tuple[str | None, Mapping[str, Any]]]) -> set[str]:
    """The snapshot folders any of ``(snapshot_uri, manifest)`` needs."""
    needed: set[str] = set()
    for uri, manifest in checkpoints:
        needed |= needed_snapshots(uri, manifest)
    return needed


def chain_summary(layers: list[dict[str, Any]]) -> tuple[int, int, int]:
    """``(base rows, delta rows, number of deltas)`` of a table's layers."""
    base = sum(int(layer["rows"]) for layer in layers if layer["kind"] == BASE)
    deltas = [int(layer["rows"]) for layer in layers if layer["kind"] == DELTA]
    return base, sum(deltas), len(deltas)
