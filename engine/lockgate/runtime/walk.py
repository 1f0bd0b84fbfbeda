"""The ExecutionGraph as a cycle runner walks it, resolved once per runner.

:func:`walk_cycles` validates the physical plan against the logical one and resolves,
for every cycle, its operators in execution order (groups, then chains, then operators:
:meth:`~lockgate.plan.physical.ExecutionGraph.steps`), what each reads and whether its
output is materialised, and the cycle's heads and tails; so a round does nothing but run
them. An ITERATOR operator's step carries its nested iteration cycle, which the operator
runs (its supersteps) when the round reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CompileError
from ..plan.logical import OperatorKind, PipelineGraph, PipelineVertex
from ..plan.physical import STREAM, Cycle, ExecutionGraph


@dataclass(frozen=True)
class OperatorStep:
    """One step of a round: an operator, the operators it reads, whether a head reads it
    (a source) and whether its output is materialised for the round."""

    vertex: PipelineVertex
    inputs: tuple[str, ...]
    head: bool
    materialize: bool
    #: the iteration cycle an ITERATOR operator runs inside the round (None for the others)
    iteration: Cycle | None = None


@dataclass(frozen=True)
class CycleWalk:
    """One cycle of the ExecutionGraph as a runner walks it, resolved once per runner."""

    cycle: Cycle
    #: the operators in execution order (groups, chains, operators)
    operators: tuple[OperatorStep, ...]
    #: heads: the sources whose slices are read, in the cycle's order
    heads: tuple[OperatorStep, ...]
    #: tails that are sinks, in the cycle's order: (operator, sink config)
    sinks: tuple[tuple[str, dict[str, Any]], ...]
    #: state tables ("<operator>.<table>") of the tails that are stateful, in the cycle's order
    state_tables: tuple[str, ...]


def walk_cycles(graph: PipelineGraph, execution: ExecutionGraph) -> tuple[CycleWalk, ...]:
    """The cycles of ``execution`` resolved against ``graph``; refuses one that cannot run."""
    execution.validate(graph)
    walks = []
    for cycle in execution.top_cycles:
        if cycle.mode != STREAM:
            raise CompileError(f"{cycle.id} is a {cycle.mode!r} cycle: this runtime runs {STREAM!r} cycles only")
        materialized = {op for gid in cycle.groups for op in execution.groups[gid].materialized}
        heads = set(cycle.heads)
        operators = {
            s.operator: OperatorStep(
                vertex=graph.vertices[s.operator],
                inputs=tuple(e.source for e in graph.inputs(s.operator)),
                head=s.operator in heads,
                materialize=s.operator in materialized,
                iteration=execution.iteration_of(s.operator),
            )
            for s in execution.steps(cycle)
        }
        tails = [graph.vertices[t] for t in cycle.tails]
        walks.append(
            CycleWalk(
                cycle=cycle,
                operators=tuple(operators.values()),
                heads=tuple(operators[h] for h in cycle.heads),
                sinks=tuple((v.id, v.config["sink"]) for v in tails if v.kind == OperatorKind.SINK),
                state_tables=tuple(f"{v.id}.{t}" for v in tails if v.stateful for t in v.state),
            )
        )
    return tuple(walks)


__all__ = ["CycleWalk", "OperatorStep", "walk_cycles"]
