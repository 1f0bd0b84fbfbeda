"""PipelineGraph and ExecutionGraph: structure, JSON round trip, a stable plan version."""

from __future__ import annotations

from datetime import timedelta

import lockgate as lg
from lockgate.plan import OperatorKind, Partitioning, PipelineGraph, compile_pipeline, explain, explain_json


def build(threshold: int = 100) -> lg.Pipeline:
    p = lg.Pipeline("plans", cycle_window=timedelta(seconds=30), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", events_per_second=100, max_events=1000), name="bids")
    big = bids.filter(f"price > {threshold}", name="big").with_column("eur", "price * 0.9", name="eur")
    big.key_by("auction").window(lg.Tumbling(timedelta(seconds=10))).aggregate(
        n=lg.count(), top=lg.max("price"), name="per_auction"
    ).sink(lg.CollectSink("per_auction"), name="out")
    return p


def test_logical_graph(spark):
    plan = compile_pipeline(build(), spark)
    g = plan.graph
    assert g.topological_order() == ["bids", "big", "eur", "per_auction", "out"]
    assert g.vertices["bids"].kind == OperatorKind.SOURCE
    assert g.vertices["per_auction"].kind == OperatorKind.ONE_INPUT
    assert g.vertices["out"].kind == OperatorKind.SINK
    key_edge = g.inputs("per_auction")[0]
    assert key_edge.partitioning == Partitioning.KEY and key_edge.keys == ["auction"]
    assert g.inputs("big")[0].partitioning == Partitioning.FORWARD
    assert [c.name for c in g.vertices["eur"].schema][-1] == "eur"
    assert g.vertices["per_auction"].event_time == "window_end"
    assert set(g.state_layout()) == {"per_auction"}


def test_chains_fuse_forward_edges(spark):
    plan = compile_pipeline(build(), spark)
    ops = [c.operators for c in plan.execution.chains.values()]
    # the source runs with parallelism 1, so it cannot fuse with the p=2 filter;
    # filter and with_column fuse; the KEY edge breaks the chain
    assert ["big", "eur"] in ops
    assert ["per_auction", "out"] in ops
    assert len(plan.execution.cycles) == 1 and plan.execution.cycles[0].heads == ["bids"]


def test_json_round_trip_and_stable_version(spark):
    plan = compile_pipeline(build(), spark)
    again = PipelineGraph.from_json(plan.graph.to_json())
    assert again.to_json() == plan.graph.to_json()
    assert again.version == plan.version
    assert compile_pipeline(build(), spark).version == plan.version  # same pipeline, same version
    assert compile_pipeline(build(threshold=200), spark).version != plan.version


def test_explain_text_and_json(spark):
    plan = compile_pipeline(build(), spark)
    text = explain(plan)
    for needle in ("Logical plan (PipelineGraph)", "Physical plan (ExecutionGraph)", "KEY(auction)",
                   "tumbling(0:00:10)", "State layout", plan.version):
        assert needle in text
    import json

    data = json.loads(explain_json(plan))
    assert data["plan_version"] == plan.version
    assert {v["id"] for v in data["logical"]["vertices"]} == {"bids", "big", "eur", "per_auction", "out"}
    assert data["physical"]["cycles"][0]["mode"] == "stream"
