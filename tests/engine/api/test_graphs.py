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


@dataclass(frozen=True)
class Reach(VertexProgram):
    """The README's example program: the hop count from a source, along out-edges."""

    source: int = 0
    combiner = MIN
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx):
        return F.when(ctx.id == self.source, F.lit(0)).otherwise(F.lit(None).cast("int"))

    def compute(self, ctx):
        if ctx.superstep == 1:
            return Step(ctx.value, send_out=F.when(ctx.value.isNotNull(), ctx.value + 1))
        better = ctx.messages.isNotNull() & (ctx.value.isNull() | (ctx.messages < ctx.value))
        value = F.when(better, ctx.messages).otherwise(ctx.value)
        return Step(value, send_out=F.when(better, value + 1))


def reach_pipeline() -> lg.Pipeline:
    import os

    p = lg.Pipeline("reach", cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource(os.environ["LG_TEST_REACH"] + "/edges", event_time="ts"), name="links")
    pages = p.source(lg.FileSource(os.environ["LG_TEST_REACH"] + "/pages", event_time="ts"), name="pages")
    web = p.graph(links.select("src", "dst"), vertices=pages.select("id", "title"), name="web")
    web.compute(Reach(source=1), name="reach").sink(lg.CollectSink("reach"), name="reach_out")
    web.compute(ConnectedComponents(), emit="all", name="components").sink(lg.CollectSink("cc"), name="cc_out")
    return p


def test_the_readme_program_and_a_vertex_stream_run_as_networkx_says(spark, tmp_path, monkeypatch) -> None:
    import networkx as nx
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = 29_453_760 * 60  # 2026-01-01T00:00Z, in seconds
    edges = [(1, 2), (2, 3), (3, 4), (1, 5), (5, 4), (6, 7), (4, 1)]
    pages = [(i, f"page {i}") for i in range(1, 10)]  # 8 and 9 have no link: components of their own
    for name, cols in (("edges", {"src": [a for a, _ in edges], "dst": [b for _, b in edges]}),
                       ("pages", {"id": [i for i, _ in pages], "title": [t for _, t in pages]})):
        (tmp_path / name).mkdir()
        n = len(next(iter(cols.values())))
        table = pa.table({**{k: pa.array(v) for k, v in cols.items()},
                          "ts": pa.array([t0 * 1_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, tmp_path / name / "part.parquet")
    monkeypatch.setenv("LG_TEST_REACH", str(tmp_path))
    g = nx.DiGraph(edges)
    g.add_nodes_from(i for i, _ in pages)
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        client.run(f"{__file__}:reach_pipeline", first=29_453_760, last=29_453_760)
        reach = client.read_sink("reach", "reach").to_pandas()
        cc = client.read_sink("reach", "cc").to_pandas()
    want = {v: nx.shortest_path_length(g, 1, v) if nx.has_path(g, 1, v) else None for v in g}
    got = {int(r.id): (None if r.value != r.value or r.value is None else int(r.value)) for r in reach.itertuples()}
    assert got == want
    assert dict(zip(cc["id"], cc["component"], strict=True)) == {
        v: min(c) for c in nx.weakly_connected_components(g) for v in c}
