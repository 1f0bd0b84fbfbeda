"""The logical plan: PipelineGraph (GeaFlow's PipelineGraph, Arroyo's LogicalGraph).

Vertices are operators of kind SOURCE, ONE_INPUT, TWO_INPUT, ITERATOR or SINK, each
with its parallelism and schema; edges carry a partitioning: FORWARD, KEY (hash on key
columns) or BROADCAST. The graph serialises to JSON, and the hash of that JSON names a
plan version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from ..clock import WindowClock


class OperatorKind(StrEnum):
    SOURCE = "SOURCE"
    ONE_INPUT = "ONE_INPUT"
    TWO_INPUT = "TWO_INPUT"
    ITERATOR = "ITERATOR"
    SINK = "SINK"


class Partitioning(StrEnum):
    FORWARD = "FORWARD"
    KEY = "KEY"
    BROADCAST = "BROADCAST"


#: operator name -> kind
OP_KINDS: dict[str, OperatorKind] = {
    "source": OperatorKind.SOURCE,
    "select": OperatorKind.ONE_INPUT,
    "with_column": OperatorKind.ONE_INPUT,
    "filter": OperatorKind.ONE_INPUT,
    "map_batches": OperatorKind.ONE_INPUT,
    "sql": OperatorKind.ONE_INPUT,
    "window_aggregate": OperatorKind.ONE_INPUT,
    "window_top_n": OperatorKind.ONE_INPUT,
    "over_aggregate": OperatorKind.ONE_INPUT,
    "running_aggregate": OperatorKind.ONE_INPUT,
    "deduplicate": OperatorKind.ONE_INPUT,
    "join": OperatorKind.TWO_INPUT,
    "interval_join": OperatorKind.TWO_INPUT,
    "union": OperatorKind.TWO_INPUT,
    "lookup_join": OperatorKind.ONE_INPUT,
    "graph_compute": OperatorKind.ITERATOR,
    "graph_traverse": OperatorKind.ITERATOR,
    "sink": OperatorKind.SINK,
}

#: operators that keep keyed state between cycles
STATEFUL_OPS = frozenset({"window_aggregate", "window_top_n", "over_aggregate", "running_aggregate", "deduplicate", "join", "interval_join",
                         "graph_compute", "graph_traverse"})
#: operators that run an iteration cycle (supersteps) inside each round
ITERATOR_OPS = frozenset({"graph_compute", "graph_traverse"})


@dataclass
class Column:
    """One column of a vertex's output: name and Spark SQL type (``simpleString``)."""

    name: str
    type: str
    nullable: bool = True


@dataclass
class PipelineVertex:
    """One logical operator."""

    id: str
    op: str
    kind: OperatorKind
    parallelism: int
    config: dict[str, Any]
    schema: list[Column] = field(default_factory=list)
    #: the event-time column of the output stream (``None`` when it has none)
    event_time: str | None = None
    #: True when ``event_time`` is an exclusive window end (window results)
    event_time_is_end: bool = False
    #: state tables of a stateful operator: table name -> schema
    state: dict[str, list[Column]] = field(default_factory=dict)
    #: the key of an *updating* output (a row replaces the earlier row of its key; a row whose
    #: ``op`` column says ``-D`` deletes it): a running aggregate's keys, kept by ``select``
    #: and ``with_column`` downstream. ``None``: an append-only stream; ``[]``: one row.
    upsert_key: list[str] | None = None

    @property
    def stateful(self) -> bool:
        return self.op in STATEFUL_OPS

    def column(self, name: str) -> Column | None:
        return next((c for c in self.schema if c.name == name), None)

    def schema_string(self) -> str:
        return ", ".join(f"{c.name} {c.type}" for c in self.schema)


@dataclass
class PipelineEdge:
    """A data dependency from ``source`` to ``target`` (``index``: which input of target)."""

    source: str
    target: str
    index: int
    partitioning: Partitioning
    keys: list[str] = field(default_factory=list)


@dataclass
class PipelineGraph:
    """The logical plan of a pipeline: a DAG of vertices and partitioned edges."""

    name: str
    cycle_window_us: int
    origin_us: int
    watermark: dict[str, Any]
    vertices: dict[str, PipelineVertex]
    edges: list[PipelineEdge]
    #: the SQL of each stream ``Pipeline.sql`` made, by the operator that ends it (lineage's SQL
    #: facet); left out of the JSON when empty, so plans without SQL keep their version
    sql: dict[str, str] = field(default_factory=dict)

    @property
    def clock(self) -> WindowClock:
        """The job's cycle windows: window ids to instants and back."""
        return WindowClock(self.origin_us, self.cycle_window_us)

    # -- navigation ------------------------------------------------------------------
    def inputs(self, vertex: str) -> list[PipelineEdge]:
        return sorted((e for e in self.edges if e.target == vertex), key=lambda e: e.index)

    def outputs(self, vertex: str) -> list[PipelineEdge]:
        return [e for e in self.edges if e.source == vertex]

    def sources(self) -> list[PipelineVertex]:
        return [v for v in self.vertices.values() if v.kind == OperatorKind.SOURCE]

    def sinks(self) -> list[PipelineVertex]:
        return [v for v in self.vertices.values() if v.kind == OperatorKind.SINK]

    def topological_order(self) -> list[str]:
        """Vertex ids, every vertex after its inputs (insertion order breaks ties)."""
        indegree = {v: 0 for v in self.vertices}
        for e in self.edges:
            indegree[e.target] += 1
        ready = [v for v in self.vertices if indegree[v] == 0]
        order: list[str] = []
        while ready:
            v = ready.pop(0)
            order.append(v)
            for e in self.outputs(v):
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
        return order

    # -- identity --------------------------------------------------------------------
    def state_layout(self) -> dict[str, dict[str, str]]:
        """Stateful operator -> state table -> schema string: what a checkpoint must fit."""
        return {
            v.id: {t: ", ".join(f"{c.name} {c.type}" for c in cols) for t, cols in sorted(v.state.items())}
            for v in self.vertices.values()
            if v.stateful
        }

    def state_settings(self) -> dict[str, dict[str, Any]]:
        """Stateful operator -> its settings (keys, window, aggregates, ``n``, bounds, ...):
        what gives its state a meaning. Two plans whose state tables have the same columns
        but whose settings differ (a top 3 made a top 5, a window of 10 s made 20 s, a join's
        bounds widened) cannot share state: :func:`~lockgate.control.scheduler.check_state_layout`
        compares both. A setting added to an operator's config must therefore be left out
        while it has its old default, or every job compiled before it would be refused."""
        # through JSON, as a stored plan is read back: tuples and lists compare alike
        return {v.id: json.loads(json.dumps(v.config, sort_keys=True, default=str))
                for v in self.vertices.values() if v.stateful}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cycle_window_us": self.cycle_window_us,
            "origin_us": self.origin_us,
            "watermark": self.watermark,
            # an append-only vertex leaves upsert_key out, so plans written before it keep their version
            "vertices": [{k: val for k, val in asdict(v).items() if k != "upsert_key" or val is not None}
                         for v in self.vertices.values()],
            "edges": [asdict(e) for e in self.edges],
            **({"sql": dict(self.sql)} if self.sql else {}),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, default=str)

    @property
    def version(self) -> str:
        """The plan version: a stable hash of the plan's JSON (16 hex digits)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineGraph:
        vertices = {}
        for v in data["vertices"]:
            vertices[v["id"]] = PipelineVertex(
                id=v["id"],
                op=v["op"],
                kind=OperatorKind(v["kind"]),
                parallelism=v["parallelism"],
                config=v["config"],
                schema=[Column(**c) for c in v["schema"]],
                event_time=v.get("event_time"),
                event_time_is_end=v.get("event_time_is_end", False),
                state={t: [Column(**c) for c in cols] for t, cols in v.get("state", {}).items()},
                upsert_key=v.get("upsert_key"),
            )
        edges = [
            PipelineEdge(e["source"], e["target"], e["index"], Partitioning(e["partitioning"]), e["keys"])
            for e in data["edges"]
        ]
        return cls(
            data["name"], data["cycle_window_us"], data["origin_us"], data["watermark"], vertices, edges,
            dict(data.get("sql") or {}),
        )

    @classmethod
    def from_json(cls, text: str) -> PipelineGraph:
        return cls.from_dict(json.loads(text))
