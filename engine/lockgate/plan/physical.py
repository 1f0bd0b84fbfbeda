"""The physical plan: ExecutionGraph of OperatorChains, ExecutionGroups and Cycles.

Forward edges between operators of equal parallelism are fused into chains (Arroyo's
OperatorChain): one chain runs as one pipelined Spark stage. Chains are grouped into
ExecutionGroups (GeaFlow): a group is pipelined inside and materialised at its boundary,
which is where a KEY shuffle or a stateful operator's merge with its snapshot happens.
The whole graph of one pipeline is one Cycle: the unit the cycle scheduler runs once per
cycle window (a stream runs it window after window; a batch run once).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .logical import OperatorKind, Partitioning, PipelineGraph


@dataclass
class OperatorChain:
    """Operators fused along forward edges; ``operators`` in execution order."""

    id: str
    operators: list[str]
    parallelism: int


@dataclass
class ExecutionGroup:
    """Chains pipelined together; groups exchange data in batch (materialised) mode."""

    id: str
    chains: list[str]
    #: why the group ends: "shuffle", "state" (a stateful merge) or "sink"
    boundary: str


@dataclass
class Cycle:
    """The schedulable unit: a set of groups run once per cycle round (one window)."""

    id: str
    groups: list[str]
    mode: str  # "stream": one round per window
    heads: list[str] = field(default_factory=list)  # source operators
    tails: list[str] = field(default_factory=list)  # sink operators and state snapshots


@dataclass
class ExecutionGraph:
    """The physical plan built from a :class:`PipelineGraph`."""

    chains: dict[str, OperatorChain]
    groups: dict[str, ExecutionGroup]
    cycles: list[Cycle]
    chain_of: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "chains": [asdict(c) for c in self.chains.values()],
            "groups": [asdict(g) for g in self.groups.values()],
            "cycles": [asdict(c) for c in self.cycles],
        }


def build_execution_graph(graph: PipelineGraph) -> ExecutionGraph:
    """Fuse forward edges into chains, chains into groups, groups into one Cycle."""
    order = graph.topological_order()
    chain_of: dict[str, str] = {}
    chains: dict[str, OperatorChain] = {}
    for vid in order:
        v = graph.vertices[vid]
        ins = graph.inputs(vid)
        fusable = (
            len(ins) == 1
            and ins[0].partitioning == Partitioning.FORWARD
            and len(graph.outputs(ins[0].source)) == 1
            and graph.vertices[ins[0].source].parallelism == v.parallelism
        )
        if fusable:
            cid = chain_of[ins[0].source]
            chains[cid].operators.append(vid)
        else:
            cid = f"chain_{len(chains) + 1}"
            chains[cid] = OperatorChain(cid, [vid], v.parallelism)
        chain_of[vid] = cid

    groups: dict[str, ExecutionGroup] = {}
    group_of: dict[str, str] = {}
    for cid, chain in chains.items():
        head = graph.vertices[chain.operators[0]]
        tail = graph.vertices[chain.operators[-1]]
        ins = graph.inputs(head.id)
        joins_upstream = (
            len(ins) == 1
            and ins[0].partitioning == Partitioning.FORWARD
            and not graph.vertices[ins[0].source].stateful
            and len(graph.outputs(ins[0].source)) == 1
        )
        if joins_upstream and chain_of[ins[0].source] in group_of:
            gid = group_of[chain_of[ins[0].source]]
            groups[gid].chains.append(cid)
        else:
            gid = f"group_{len(groups) + 1}"
            groups[gid] = ExecutionGroup(gid, [cid], "")
        group_of[cid] = gid
        if tail.kind == OperatorKind.SINK:
            groups[gid].boundary = "sink"
        elif any(graph.vertices[o].stateful for o in chain.operators):
            groups[gid].boundary = "state"
        else:
            groups[gid].boundary = "shuffle"

    cycle = Cycle(
        id="cycle_1",
        groups=list(groups),
        mode="stream",
        heads=[v.id for v in graph.sources()],
        tails=[v.id for v in graph.sinks()] + [v.id for v in graph.vertices.values() if v.stateful],
    )
    return ExecutionGraph(chains, groups, [cycle], chain_of)
