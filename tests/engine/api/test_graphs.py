"""The graph DSL's errors: a computation or traversal that cannot run is refused at the call or
at compile time (Spark's analyzer over empty inputs), naming the operator and the function."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from pyspark.sql import functions as F

import lockgate as lg
from lockgate.errors import CompileError
from lockgate.graph import MIN, Halt, Step, VertexProgram
from lockgate.graph.library import ConnectedComponents, PageRank
from lockgate.runtime.compiler import compile_pipeline


def _graph(columns: str = "src long, dst long, ts timestamp") -> tuple[lg.Pipeline, lg.Graph]:
    p = lg.Pipeline("g", cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource("/nonexistent/links", schema=columns, format="json", event_time="ts"), name="links")
    return p, p.graph(links, name="web")


class Forever(VertexProgram):
    combiner = MIN
    halt_when = None

    def init(self, ctx):
        return ctx.id

    def compute(self, ctx):
        return Step(ctx.value, send_out=ctx.value)


class StringMessages(VertexProgram):
    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx):
        return ctx.id

    def compute(self, ctx):
        return Step(ctx.value, send_out=F.concat(F.lit("v"), ctx.value.cast("string")))


class Retyped(VertexProgram):
    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx):
        return ctx.id

    def compute(self, ctx):
        return Step((ctx.value * 1.5), send_out=ctx.value)


@dataclass(frozen=True)
class NotAStep(VertexProgram):
    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx):
        return ctx.id

    def compute(self, ctx):
        return ctx.value


class DropsId(ConnectedComponents):
    def finish(self, state):
        return state.select(F.col("value").alias("component"))


def test_no_halting_rule_and_no_bound_is_refused_at_the_call() -> None:
    _, g = _graph()
    with pytest.raises(CompileError, match=r"operator 'loop': Forever has no halting rule and no bound.*"
                                           r"max_supersteps"):
        g.compute(Forever(), name="loop")
    g.compute(Forever(), max_supersteps=5, name="bounded")  # a bound is enough


def test_bad_arguments_are_refused_at_the_call() -> None:
    p, g = _graph()
    with pytest.raises(CompileError, match="VertexProgram instance, got the class PageRank"):
        g.compute(PageRank, name="ranks")
    with pytest.raises(CompileError, match="takes a lockgate.graph.VertexProgram"):
        g.compute(lambda ctx: ctx, name="ranks")
    with pytest.raises(CompileError, match="emit='some'"):
        g.compute(PageRank(), emit="some", name="ranks")
    with pytest.raises(CompileError, match="checkpoint_every=0"):
        g.compute(PageRank(), checkpoint_every=0, name="ranks")
    requests = p.source(lg.FileSource("/nonexistent/req", schema="start long, ts timestamp", format="json",
                                      event_time="ts"), name="requests")
    with pytest.raises(CompileError, match="k=-1"):
        g.traverse(requests, k=-1)
    with pytest.raises(CompileError, match="direction='up'"):
        g.traverse(requests, k=1, direction="up")


@pytest.mark.parametrize(("program", "pattern"), [
    (StringMessages(), r"operator 'bad': StringMessages.compute returned a send_out message of type string .*"
                       r"messages are bigint.*Fix: cast"),
    (Retyped(), r"Retyped.compute changed the vertex value's type at superstep 1: it returned double.*bigint"),
    (NotAStep(), r"NotAStep.compute returned Column .* not a Step"),
    (DropsId(), r"DropsId.finish dropped the column 'id'"),
])
def test_a_wrong_program_is_a_compile_error_naming_the_function(spark, program, pattern) -> None:
    p, g = _graph()
    g.compute(program, name="bad").sink(lg.CollectSink("out"))
    with pytest.raises(CompileError, match=pattern):
        compile_pipeline(p, spark)


def test_edges_without_src_or_dst_are_a_compile_error(spark) -> None:
    p, g = _graph("source long, target long, ts timestamp")
    g.compute(ConnectedComponents(), name="cc").sink(lg.CollectSink("out"))
    with pytest.raises(CompileError, match=r"operator 'cc': the edge stream has no column 'src'.*rename"):
        compile_pipeline(p, spark)


def test_traversal_requests_need_their_start_column(spark) -> None:
    p, g = _graph()
    requests = p.source(lg.FileSource("/nonexistent/req", schema="user long, ts timestamp", format="json",
                                      event_time="ts"), name="requests")
    g.traverse(requests, k=2, name="hops").sink(lg.CollectSink("out"))
    with pytest.raises(CompileError, match=r"operator 'hops': the request stream has no column 'start'.*start="):
        compile_pipeline(p, spark)


def test_an_updating_stream_is_no_graph_input(spark) -> None:
    p = lg.Pipeline("g", cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource("/nonexistent/links", schema="src long, dst long, ts timestamp", format="json",
                                   event_time="ts"), name="links")
    counted = links.key_by("src", "dst").aggregate(n=lg.count(), name="counted")
    p.graph(counted.select("src", "dst"), name="web").compute(ConnectedComponents(), name="cc").sink(
        lg.CollectSink("out"))
    with pytest.raises(CompileError, match=r"operator 'cc': a graph computation \(compute\(\)\) over an updating"):
        compile_pipeline(p, spark)
