"""The physical plan: ExecutionGraph of OperatorChains, ExecutionGroups and Cycles.

Forward edges between operators of equal parallelism are fused into chains (Arroyo's
OperatorChain): one chain runs as one pipelined Spark stage. Chains are grouped into
ExecutionGroups (GeaFlow): a group is pipelined inside and exchanges data with other
groups in batch mode, which is where a KEY shuffle or a stateful operator's merge with
its snapshot happens; an operator whose output several consumers read is materialised
(persisted for the round) so that it is computed once. The whole graph of one pipeline
is one Cycle: the unit the cycle scheduler runs once per cycle window (a stream runs it
window after window; a batch once).

An ITERATOR operator (a graph computation) runs a second level of cycles inside each round,
as GeaFlow nests them: an *iteration* Cycle whose ``parent`` is the stream cycle and whose
rounds are supersteps (compute, send messages along the edges, combine them per vertex, write
the vertex state), repeated until the program's halting rule or bound stops it. The runner
hands the operator its iteration cycle, whose settings (the halting rule, the bound, how often a
superstep is checkpointed) are what the superstep loop runs by.

The ExecutionGraph is what runs: the cycle runner walks :attr:`ExecutionGraph.cycles`,
each cycle's groups in order, each group's chains in order, each chain's operators in
order (:meth:`ExecutionGraph.steps`); it reads slices at a cycle's heads and stages output
and snapshots state at its tails. :meth:`ExecutionGraph.validate` refuses a graph that
cannot run that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CompileError
from .logical import OperatorKind, Partitioning, PipelineGraph, PipelineVertex

#: a cycle run once per cycle window, window after window
STREAM = "stream"
#: a cycle nested in a stream cycle's round: supersteps of an ITERATOR operator until it halts
ITERATION = "iteration"
#: what one round (superstep) of an iteration cycle does, in order
SUPERSTEP_PHASES = {
    "graph_compute": ["compute vertex values and messages", "send messages along the edges",
                      "combine messages per vertex", "write the vertex state (checkpoint)"],
    "graph_traverse": ["expand the frontier one hop along the edges", "drop vertices already reached",
                       "cut the lineage (checkpoint)"],
}


@dataclass
class OperatorChain:
    """Operators fused along forward edges; ``operators`` in execution order."""

    id: str
    operators: list[str]
    parallelism: int


@dataclass
class ExecutionGroup:
    """Chains pipelined together (``chains`` in execution order); groups exchange data in
    batch (materialised) mode."""

    id: str
    chains: list[str]
    #: why the group ends: "shuffle", "state" (a stateful merge) or "sink"
    boundary: str
    #: operators of the group whose output more than one consumer reads: the runtime
    #: persists it for the round, so it is computed once
    materialized: list[str] = field(default_factory=list)


@dataclass
class Cycle:
    """The schedulable unit: groups run in order once per cycle round (one window).

    ``mode`` is how rounds repeat: :data:`STREAM`, one round per cycle window; or
    :data:`ITERATION`, supersteps of the ITERATOR ``operator`` inside each round of the
    ``parent`` cycle, until ``settings`` (halting rule, bound) stop them.
    """

    id: str
    groups: list[str]
    mode: str
    heads: list[str] = field(default_factory=list)  # where slices are read: source operators
    tails: list[str] = field(default_factory=list)  # where output is staged (sinks) and state snapshotted
    #: the cycle an iteration cycle is nested in (None: a top-level cycle)
    parent: str | None = None
    #: the ITERATOR operator whose supersteps an iteration cycle runs
    operator: str | None = None
    #: an iteration cycle's settings: its phases, halting rule, bound, checkpoint interval
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One operator of a cycle round, with the group and chain it runs in."""

    cycle: str
    group: str
    chain: str
    operator: str


@dataclass
class ExecutionGraph:
    """The physical plan built from a :class:`PipelineGraph`."""

    chains: dict[str, OperatorChain]
    groups: dict[str, ExecutionGroup]
    cycles: list[Cycle]
    chain_of: dict[str, str]

    def steps(self, cycle: Cycle) -> Iterator[Step]:
        """``cycle``'s operators in the order they run: groups, then chains, then operators."""
        for gid in cycle.groups:
            for cid in self.groups[gid].chains:
                for op in self.chains[cid].operators:
                    yield Step(cycle.id, gid, cid, op)

    @property
    def top_cycles(self) -> list[Cycle]:
        """The cycles the scheduler runs a round of (the stream cycles; not nested ones)."""
        return [c for c in self.cycles if c.parent is None]

    def iterations(self, parent: Cycle) -> list[Cycle]:
        """The iteration cycles nested in ``parent``."""
        return [c for c in self.cycles if c.parent == parent.id]

    def iteration_of(self, operator: str) -> Cycle | None:
        """The iteration cycle an ITERATOR ``operator`` runs (None for any other operator)."""
        return next((c for c in self.cycles if c.mode == ITERATION and c.operator == operator), None)

    def execution_order(self) -> list[str]:
        """Every operator in the order a round runs it (cycle after cycle)."""
        return [s.operator for c in self.top_cycles for s in self.steps(c)]

    def validate(self, graph: PipelineGraph) -> None:
        """Refuse a graph the runtime cannot run from alone: unknown groups, chains or
        operators; an operator missing or run twice; an operator run before one of its
        inputs; heads that are not the cycle's sources, tails that are not its sinks and
        stateful operators. Raises :class:`~lockgate.errors.CompileError`."""
        done: dict[str, Step] = {}
        runs: list[tuple[Cycle, list[str]]] = []
        for cycle in self.cycles:
            for gid in cycle.groups:
                if gid not in self.groups:
                    raise CompileError(f"{cycle.id} runs group '{gid}', which the execution graph does not have")
            if cycle.parent is None and cycle.mode != STREAM:
                raise CompileError(f"{cycle.id} is a top-level {cycle.mode!r} cycle: only {STREAM!r} cycles "
                                   "run rounds of their own; an iteration cycle needs its parent")
        for cycle in self.top_cycles:
            for gid in cycle.groups:
                if gid not in self.groups:
                    raise CompileError(f"{cycle.id} runs group '{gid}', which the execution graph does not have")
                for cid in self.groups[gid].chains:
                    if cid not in self.chains:
                        raise CompileError(f"{gid} runs chain '{cid}', which the execution graph does not have")
            ran: list[str] = []
            for step in self.steps(cycle):
                _check_step(graph, step, done)
                done[step.operator] = step
                ran.append(step.operator)
            runs.append((cycle, ran))
        missing = [v for v in graph.topological_order() if v not in done]
        if missing:
            raise CompileError(
                f"operators {', '.join(missing)} are in no group of any cycle: the execution graph must run "
                "every operator of the plan once per round, or their output would be lost"
            )
        for cycle, ran in runs:
            _check_ends(graph, cycle, ran)
            for gid in cycle.groups:
                group = self.groups[gid]
                ops = {op for cid in group.chains for op in self.chains[cid].operators}
                stray = [op for op in group.materialized if op not in ops]
                if stray:
                    raise CompileError(f"{gid} materialises {', '.join(stray)}, which it does not run")
        self._validate_iterations(graph, done)

    def _validate_iterations(self, graph: PipelineGraph, done: dict[str, Step]) -> None:
        """Every ITERATOR operator has exactly one iteration cycle, nested in the stream cycle
        that runs it, whose groups are the one group running it; nothing else is nested."""
        top = {c.id: c for c in self.top_cycles}
        seen: dict[str, str] = {}
        for cycle in self.cycles:
            if cycle.parent is None:
                continue
            op = cycle.operator
            if cycle.mode != ITERATION or cycle.parent not in top:
                raise CompileError(f"{cycle.id} is nested in '{cycle.parent}': only an {ITERATION!r} cycle nests, "
                                   "inside a stream cycle of the graph")
            if op not in graph.vertices or graph.vertices[op].kind != OperatorKind.ITERATOR:
                raise CompileError(f"{cycle.id} iterates '{op}', which is no ITERATOR operator of the plan")
            if op in seen:
                raise CompileError(f"operator '{op}' has two iteration cycles: {seen[op]} and {cycle.id}")
            seen[op] = cycle.id
            step = done[op]
            if step.cycle != cycle.parent or cycle.groups != [step.group] or cycle.heads != [op] \
                    or cycle.tails != [op]:
                raise CompileError(
                    f"{cycle.id} must run in {step.group} of {step.cycle}, where '{op}' runs, with '{op}' "
                    "as its head and tail (its supersteps read the operator's input and write its state)")
        missing = [v.id for v in graph.vertices.values() if v.kind == OperatorKind.ITERATOR and v.id not in seen]
        if missing:
            raise CompileError(f"ITERATOR operators {', '.join(missing)} have no iteration cycle: their "
                               "supersteps would never run")

    def to_dict(self) -> dict[str, Any]:
        return {
            "chains": [asdict(c) for c in self.chains.values()],
            "groups": [asdict(g) for g in self.groups.values()],
            "cycles": [asdict(c) for c in self.cycles],
        }


def _check_step(graph: PipelineGraph, step: Step, done: dict[str, Step]) -> None:
    """``step`` names a known operator, not run before, whose inputs have all run."""
    op = step.operator
    if op not in graph.vertices:
        raise CompileError(f"{step.chain} of {step.group} runs operator '{op}', which the plan does not have")
    if op in done:
        raise CompileError(f"operator '{op}' runs twice in a round: in {done[op].group} and in {step.group}")
    for e in graph.inputs(op):
        if e.source not in done:
            raise CompileError(
                f"{step.group} of {step.cycle} runs '{op}' before its input '{e.source}': the groups of a "
                "cycle (and the chains of a group) must run in a topological order",
                op,
            )


def _check_ends(graph: PipelineGraph, cycle: Cycle, ran: list[str]) -> None:
    """The cycle's heads are exactly its sources; its tails exactly its sinks and stateful operators."""
    heads = [op for op in ran if graph.vertices[op].kind == OperatorKind.SOURCE]
    if sorted(cycle.heads) != sorted(heads):
        raise CompileError(
            f"{cycle.id} has heads {', '.join(cycle.heads) or '(none)'} but runs the sources "
            f"{', '.join(heads) or '(none)'}: a cycle reads its slices at its sources"
        )
    tails = [op for op in ran if graph.vertices[op].kind == OperatorKind.SINK or graph.vertices[op].stateful]
    if sorted(cycle.tails) != sorted(tails):
        raise CompileError(
            f"{cycle.id} has tails {', '.join(cycle.tails) or '(none)'} but runs the sinks and stateful "
            f"operators {', '.join(tails) or '(none)'}: a cycle stages output and snapshots state at its tails"
        )


def build_execution_graph(graph: PipelineGraph) -> ExecutionGraph:
    """Fuse forward edges into chains, chains into groups, groups into one stream Cycle."""
    order = graph.topological_order()
    chain_of: dict[str, str] = {}
    chains: dict[str, OperatorChain] = {}
    for vid in order:
        v = graph.vertices[vid]
        ins = graph.inputs(vid)
        fusable = (
            len(ins) == 1
            and v.kind != OperatorKind.ITERATOR
            and graph.vertices[ins[0].source].kind != OperatorKind.ITERATOR
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
            and head.kind != OperatorKind.ITERATOR
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
        groups[gid].materialized += [o for o in chain.operators if len(graph.outputs(o)) > 1]
        if head.kind == OperatorKind.ITERATOR:
            groups[gid].boundary = "iteration"
        elif tail.kind == OperatorKind.SINK:
            groups[gid].boundary = "sink"
        elif any(graph.vertices[o].stateful for o in chain.operators):
            groups[gid].boundary = "state"
        else:
            groups[gid].boundary = "shuffle"

    cycle = Cycle(id="cycle_1", groups=list(groups), mode=STREAM)
    execution = ExecutionGraph(chains, groups, [cycle], chain_of)
    order = execution.execution_order()
    cycle.heads = [v for v in order if graph.vertices[v].kind == OperatorKind.SOURCE]
    # sinks in the order they run, then the stateful operators whose state is snapshotted
    cycle.tails = [v for v in order if graph.vertices[v].kind == OperatorKind.SINK]
    cycle.tails += [v for v in order if graph.vertices[v].stateful]
    for n, op in enumerate((v for v in order if graph.vertices[v].kind == OperatorKind.ITERATOR), start=1):
        execution.cycles.append(Cycle(
            id=f"{cycle.id}.{n}", groups=[group_of[chain_of[op]]], mode=ITERATION, heads=[op], tails=[op],
            parent=cycle.id, operator=op, settings=iteration_settings(graph.vertices[op]),
        ))
    execution.validate(graph)
    return execution


def iteration_settings(v: PipelineVertex) -> dict[str, Any]:
    """An ITERATOR operator's iteration cycle settings: what a superstep does, what stops the
    supersteps and how often one is checkpointed (from the operator's config)."""
    cfg = v.config
    settings: dict[str, Any] = {"phases": SUPERSTEP_PHASES[v.op]}
    if v.op == "graph_compute":
        program = cfg["program"]
        bounds = [b for b in (program.get("max_supersteps"), cfg.get("max_supersteps")) if b is not None]
        settings.update(
            program=program["program"].rsplit(".", 1)[-1],
            halt_when=program.get("halt_when"),
            converged=bool(program.get("converged")),
            max_supersteps=min(bounds) if bounds else None,
            combiner=program.get("combiner"),
            checkpoint_every=cfg.get("checkpoint_every", 1),
        )
    else:
        settings.update(halt_when="no_new_vertices", max_supersteps=cfg["k"], checkpoint_every=1)
    return settings
