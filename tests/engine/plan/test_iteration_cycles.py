"""Iteration cycles in the physical plan: an ITERATOR operator's supersteps are a cycle nested in
the stream cycle that runs it; ``explain`` shows both levels; a graph that nests them wrongly is
refused."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

import lockgate as lg
from lockgate.errors import CompileError
from lockgate.graph.library import ConnectedComponents, PageRank
from lockgate.plan import explain
from lockgate.plan.physical import ITERATION, STREAM
from lockgate.runtime.compiler import compile_pipeline


def _plan(spark):
    p = lg.Pipeline("links", cycle_window=timedelta(days=1))
    links = p.source(lg.FileSource("/nonexistent/links", schema="src long, dst long, ts timestamp", format="json",
                                   event_time="ts"), name="links")
    g = p.graph(links.select("src", "dst"), name="web")
    g.compute(PageRank(tolerance=1e-8), checkpoint_every=5, name="ranks").sink(lg.CollectSink("ranks"), name="r")
    g.compute(ConnectedComponents(), name="components").sink(lg.CollectSink("cc"), name="c")
    return compile_pipeline(p, spark)


def test_each_iterator_runs_a_nested_iteration_cycle(spark) -> None:
    plan = _plan(spark)
    ex = plan.execution
    assert [c.mode for c in ex.top_cycles] == [STREAM]
    inner = [c for c in ex.cycles if c.parent is not None]
    assert [(c.mode, c.parent, c.operator) for c in inner] == [
        (ITERATION, "cycle_1", "ranks"), (ITERATION, "cycle_1", "components")]
    ranks = ex.iteration_of("ranks")
    assert ranks.settings["checkpoint_every"] == 5 and ranks.settings["max_supersteps"] == 101
    assert ranks.settings["converged"] and ranks.settings["combiner"] == "sum"
    assert ex.iteration_of("components").settings["halt_when"] == "no_messages"
    assert ex.groups[ranks.groups[0]].boundary == "iteration"
    assert "ranks" in ex.execution_order() and ex.execution_order().count("ranks") == 1
    assert plan.graph.vertices["ranks"].upsert_key == ["id"]
    assert [c.name for c in plan.graph.vertices["ranks"].schema] == ["id", "rank", "as_of"]
    assert plan.graph.state_layout()["ranks"] == {"edges": "src bigint, dst bigint", "values": "id bigint, value double"}


def test_explain_shows_both_levels(spark) -> None:
    text = explain(_plan(spark))
    assert "ranks  ITERATOR" in text
    assert "cycle_1.1: iteration mode, nested in cycle_1: supersteps of ranks in every round, until converged() " \
           "or at most 101 supersteps" in text
    assert "vertex state checkpointed every 5 supersteps" in text
    assert "cycle_1.2: iteration mode, nested in cycle_1: supersteps of components in every round, until no messages" in text
    assert "graph compute PageRank(damping=0.85, tolerance=1e-08, max_iterations=100) over edges" in text


def test_a_wrongly_nested_iteration_cycle_is_refused(spark) -> None:
    plan = _plan(spark)
    missing = copy.deepcopy(plan.execution)
    missing.cycles = [c for c in missing.cycles if c.operator != "components"]
    with pytest.raises(CompileError, match="ITERATOR operators components have no iteration cycle"):
        missing.validate(plan.graph)
    stray = copy.deepcopy(plan.execution)
    stray.cycles[1].operator = "r"
    with pytest.raises(CompileError, match="iterates 'r', which is no ITERATOR operator"):
        stray.validate(plan.graph)
    misplaced = copy.deepcopy(plan.execution)
    misplaced.cycles[1].groups = [misplaced.cycles[2].groups[0]]
    with pytest.raises(CompileError, match="must run in group_"):
        misplaced.validate(plan.graph)
    top = copy.deepcopy(plan.execution)
    top.cycles[1].parent = None
    with pytest.raises(CompileError, match="top-level 'iteration' cycle"):
        top.validate(plan.graph)
