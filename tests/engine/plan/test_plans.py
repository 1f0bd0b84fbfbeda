"""PipelineGraph and ExecutionGraph: structure, JSON round trip, a stable plan version."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

import lockgate as lg
from lockgate.errors import CompileError
from lockgate.plan import OperatorKind, Partitioning, PipelineGraph, explain, explain_json
from lockgate.runtime.compiler import compile_pipeline


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


def test_explain_prints_the_physical_plan_in_the_order_it_runs(spark):
    plan = compile_pipeline(build(), spark)
    physical = explain(plan).split("Physical plan (ExecutionGraph)")[1].split("State layout")[0]
    assert "heads (read the window's slice): bids" in physical
    assert "tails: out (stage output), per_auction (snapshot state)" in physical
    lines = ["group_1  (ends at: shuffle)", "chain_1  p=1: bids", "chain_2  p=2: big -> eur",
             "group_2  (ends at: sink)", "chain_3  p=2: per_auction -> out"]
    at = [physical.index(line) for line in lines]
    assert at == sorted(at)
    assert plan.execution.execution_order() == ["bids", "big", "eur", "per_auction", "out"]


def test_an_execution_graph_that_cannot_run_is_refused(spark):
    plan = compile_pipeline(build(), spark)
    plan.execution.validate(plan.graph)  # what compile builds runs

    chains_swapped = copy.deepcopy(plan.execution)
    chains_swapped.groups["group_1"].chains = ["chain_2", "chain_1"]
    with pytest.raises(CompileError, match=r"runs 'big' before its input 'bids'"):
        chains_swapped.validate(plan.graph)

    twice = copy.deepcopy(plan.execution)
    twice.groups["group_2"].chains = ["chain_2", "chain_3"]
    with pytest.raises(CompileError, match=r"operator 'big' runs twice in a round: in group_1 and in group_2"):
        twice.validate(plan.graph)

    no_snapshot = copy.deepcopy(plan.execution)
    no_snapshot.cycles[0].tails = ["out"]
    with pytest.raises(CompileError, match=r"has tails out but runs the sinks and stateful operators per_auction, out"):
        no_snapshot.validate(plan.graph)

    unknown = copy.deepcopy(plan.execution)
    unknown.cycles[0].groups.append("group_9")
    with pytest.raises(CompileError, match=r"cycle_1 runs group 'group_9', which the execution graph does not have"):
        unknown.validate(plan.graph)
