"""The operators a pipeline declares, before compilation: :class:`OpNode`, its :class:`Input`
edges, and :class:`PipelineNodes`, the record that :class:`~lockgate.api.stream.Stream`,
:class:`~lockgate.api.graphs.Graph` and ``Pipeline.sql`` add operators to.

The lowest layer of the DSL's own modules: the builders (streams, graphs, SQL) import it, and
:class:`~lockgate.api.pipeline.Pipeline` (which extends :class:`PipelineNodes`) imports them, so
the imports of ``lockgate.api`` point one way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Input:
    """One input of an operator: the upstream operator, and the key columns when the
    edge is partitioned by key (``None``: forward)."""

    node: str
    keys: tuple[str, ...] | None = None


@dataclass
class OpNode:
    """One operator as the user declared it, before compilation."""

    id: str
    op: str
    inputs: list[Input]
    config: dict[str, Any]
    parallelism: int | None = None
    fn: Callable[..., Any] | None = None


class PipelineNodes:
    """A pipeline's operators by name, in the order they were declared, and how one is added.

    :class:`~lockgate.api.pipeline.Pipeline` is the one to use; this base holds what the
    builders of operators need of it.
    """

    def __init__(self, name: str):
        self.name = name
        self.nodes: dict[str, OpNode] = {}
        self._counters: dict[str, int] = {}
        #: what Pipeline.sql knows of the streams it made (columns, event time, window)
        self._sql_relations: dict[str, Any] = {}
        #: the query text of each stream Pipeline.sql made, by its operator (kept in the plan for lineage)
        self.sql_queries: dict[str, str] = {}

    def _add(
        self,
        op: str,
        inputs: list[Input],
        config: dict[str, Any],
        name: str | None,
        parallelism: int | None = None,
        fn: Callable[..., Any] | None = None,
    ) -> OpNode:
        if name is None:
            self._counters[op] = self._counters.get(op, 0) + 1
            name = f"{op}_{self._counters[op]}"
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"operator name {name!r}: use letters, digits, '_' and '-' only")
        if name in self.nodes:
            raise ValueError(f"pipeline {self.name!r}: an operator named {name!r} already exists; pass another name=")
        node = OpNode(name, op, inputs, config, parallelism, fn)
        self.nodes[name] = node
        return node

    def _next_name(self, op: str, name: str | None) -> str:
        """The name ``_add`` will give an ``op`` operator (for errors raised before it is added)."""
        return name or f"{op}_{self._counters.get(op, 0) + 1}"


__all__ = ["Input", "OpNode", "PipelineNodes"]
