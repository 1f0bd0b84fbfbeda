"""What crosses between the scheduler and a worker: where a round starts from
(:class:`RestorePoint`) and what it reports at its tail (:class:`CycleResult`).

Plain data, no Spark: the controller imports this module and never imports pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RestorePoint:
    """The state a round starts from: the last checkpoint's snapshot (or none), and where its
    sources stood after that window (``positions``, by source: a message log's next window
    starts right after the range recorded there)."""

    window: int
    snapshot_uri: str | None
    snapshot_manifest: dict[str, Any]
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class CycleResult:
    """What a worker reports at the tail of a round (GeaFlow's DoneEvent)."""

    window: int
    attempt: int
    staged: dict[str, dict[str, Any]]
    snapshot_uri: str | None
    snapshot_manifest: dict[str, Any]
    positions: dict[str, dict[str, Any]]
    rows_in: int
    rows_out: int
    late_rows: int
    #: records the round dropped as invalid (``invalid="skip"``: unparseable lines, no event time, null ids)
    invalid_rows: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    #: the supersteps the round's iteration cycles ran (graph operators), in order
    supersteps: list[dict[str, Any]] = field(default_factory=list)

    def to_manifest(self) -> dict[str, Any]:
        """The pre-commit record written to the catalog before any sink commits."""
        return {
            "attempt": self.attempt,
            "staged": self.staged,
            "snapshot_uri": self.snapshot_uri,
            "snapshot_manifest": self.snapshot_manifest,
            "positions": self.positions,
            **({"invalid_rows": self.invalid_rows} if self.invalid_rows else {}),
        }


def late_sink_config(sink: dict[str, Any], source: str) -> dict[str, Any]:
    """The side sink of one source's late records (one folder, table or name per source)."""
    out = dict(sink)
    if "path" in out:
        out["path"] = out["path"].rstrip("/") + f"/{source}"
    if "table" in out:
        out["table"] = f"{out['table']}_{source}"
    if "name" in out:
        out["name"] = f"{out['name']}.{source}"
    return out


__all__ = ["CycleResult", "RestorePoint", "late_sink_config"]
