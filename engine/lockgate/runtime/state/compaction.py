"""Compaction: what a round writes for one state table, a delta or a fold of its chain.

A round normally writes only its :class:`~lockgate.runtime.state.layers.StateDelta` as a new
delta layer on the last checkpoint's chain. A chain holds at most ``max_deltas`` deltas
(``LOCKGATE_STATE_MAX_DELTAS``, 8 by default); the round that would add one more folds
instead, in the manner of a log-structured merge tree:

- **into one delta** (the chain's deltas and its own), while together they hold fewer rows
  than half the base: this costs what the deltas hold, not what the state holds;
- **into a new base** (every live row) once the deltas reach half the base, or when there is
  no base: this costs what the state holds, paid once per about half a base of changed rows.

So a round's write is proportional to what its window changed, amortised. Folding never
deletes a layer file: the older checkpoints still name them, and retention deletes a snapshot
folder only when no retained checkpoint needs it. ``LOCKGATE_STATE_MAX_DELTAS=0`` writes a
full base every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from ...checkpoint.layers import BASE, DELTA, chain_summary
from ..settings import count_setting
from .layers import LayeredState, StateDelta, delta_rows

#: default longest chain of deltas on a base
DEFAULT_MAX_DELTAS = 8
#: the deltas are folded into a new base once they hold this share of the base's rows
BASE_SHARE = 0.5


def max_deltas() -> int:
    """``LOCKGATE_STATE_MAX_DELTAS`` (deltas kept on a base before a fold; 0: no deltas)."""
    return count_setting("LOCKGATE_STATE_MAX_DELTAS", DEFAULT_MAX_DELTAS, "deltas kept on a base",
                         "0 writes a full snapshot every round")


@dataclass
class TableWrite:
    """What one round writes for one state table, and which earlier layers stay in its chain."""

    kind: str  # "delta": the round's changes; "folded": the chain's deltas as one; "base": all
    rows: DataFrame
    kept: list[dict[str, Any]]

    @property
    def layer_kind(self) -> str:
        return BASE if self.kind == BASE else DELTA


def plan_write(
    previous: list[dict[str, Any]],
    state: LayeredState,
    delta: StateDelta,
    limit: int,
    pending_rows: int | None,
) -> TableWrite:
    """Decide what to write after a round that changed ``delta`` on ``state``, whose chain is
    ``previous`` (layers from the manifest, oldest first). ``pending_rows``: rows this delta
    is expected to hold (None: unknown)."""
    base_rows, delta_total, deltas = chain_summary(previous)
    has_base = any(layer["kind"] == BASE for layer in previous)
    if not previous:
        return TableWrite(BASE, delta.upserts, [])
    if deltas < limit and has_base:
        return TableWrite(DELTA, delta_rows(delta), list(previous))
    after = state.with_delta(delta)
    if has_base and limit > 0 and delta_total + (pending_rows or 0) < BASE_SHARE * base_rows:
        bases = [layer for layer in previous if layer["kind"] == BASE]
        return TableWrite("folded", after.folded(delta.identity, deltas_only=True), bases)
    return TableWrite(BASE, after.folded(delta.identity, deltas_only=False), [])
