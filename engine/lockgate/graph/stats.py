"""What one superstep of a graph computation did: :class:`SuperstepStats`, given to a driver's
``on_superstep``, to a program's ``converged`` and recorded beside the superstep's state."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SuperstepStats:
    """What one superstep did, given to ``on_superstep`` and recorded in its ``_superstep.json``.

    ``messages_sent``: messages sent along edges in this superstep (delivered in the next one);
    ``vertices_changed``: vertices whose value changed; ``active_vertices``: vertices ``compute``
    ran on; ``aggregates``: the program's aggregates over the new state; ``state_uri``: the Parquet
    folder of the new state (what a checkpoint references); ``halted_by``: set on the last
    superstep of a computation (``"no_messages"``, ``"no_change"``, ``"converged"``,
    ``"max_supersteps"``), ``None`` otherwise.

    >>> SuperstepStats(3, 120, 40, 100, 812.5, 1000, {}, "/s/superstep-00003").halted_by is None
    True
    """

    superstep: int
    messages_sent: int
    vertices_changed: int
    active_vertices: int
    elapsed_ms: float
    num_vertices: int
    aggregates: dict[str, Any]
    state_uri: str
    halted_by: str | None = None
    #: whether the state was written to the folder (a checkpoint; see ``checkpoint_every``)
    checkpointed: bool = True

    def to_json(self) -> dict[str, Any]:
        """The stats as a JSON object (``_superstep.json``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SuperstepStats:
        """The stats from their JSON object."""
        return cls(**data)


__all__ = ["SuperstepStats"]
