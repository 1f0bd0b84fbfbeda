"""A small graph's supersteps on the driver: the same results as Spark's supersteps (and networkx's),
no Spark job per superstep where the program has no aggregates, checkpoints a resume reads either
way, and the built-in combiners computed with Arrow exactly as Spark's aggregates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from graphref import clustered_edges, digraph, edges_df, nx_components, nx_distances, random_edges
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from lockgate.graph import (
    MAX,
    Halt,
    Step,
    SuperstepDriver,
    SuperstepStats,
    VertexContext,
    VertexProgram,
    local,
)
from lockgate.graph.library import (
    ConnectedComponents,
    PageRank,
    connected_components,
    k_hop,
    label_propagation,
    pagerank,
    shortest_paths,
)
from lockgate.graph.state import StateFolder

EDGES = random_edges(400, 1500, seed=41)
BASE = clustered_edges(20, seed=43, per_vertex=2.0)
NEW = [e for e in random_edges(450, 12, seed=44) if (e[0], e[1]) not in {(a, b) for a, b, _ in BASE}]


def _outputs(spark: SparkSession, folder: Path) -> dict[str, dict[Any, Any]]:
    df = edges_df(spark, EDGES)
    source = EDGES[0][0]
    first = connected_components(edges_df(spark, BASE), str(folder / "cc0"))
    dynamic = connected_components(edges_df(spark, [*BASE, *NEW]), str(folder / "cc1"), previous=first.values,
                                   new_edges=edges_df(spark, NEW))
    results = {
        "pagerank": pagerank(df, str(folder / "pr"), tolerance=0.0, max_iterations=4),
        "components": first,
        "shortest_paths": shortest_paths(df, str(folder / "sp"), source),  # along_edge adds the weight
        "label_propagation": label_propagation(df, str(folder / "lp"), max_iterations=3),  # a custom combiner
        "k_hop": k_hop(df, str(folder / "kh"), [source], 3, direction="both"),  # messages both ways
        "dynamic": dynamic,  # evolve over the new edges
    }
    out = {}
    for name, result in results.items():
        rows = result.output.collect()
        out[name] = {r[0]: r[1] for r in rows}
        out[f"{name}/stats"] = {s.superstep: (s.messages_sent, s.vertices_changed, s.active_vertices)
                                for s in result.stats}
    return out


def test_the_driver_path_gives_the_spark_path_results(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_driver = _outputs(spark, tmp_path / "driver")
    # the library functions take no driver settings: the process-wide switch the README documents
    monkeypatch.setattr(local, "LOCAL_VERTICES", 0)
    on_spark = _outputs(spark, tmp_path / "spark")
    for name, got in on_driver.items():
        if name == "pagerank":
            assert got.keys() == on_spark[name].keys()
            assert max(abs(got[v] - on_spark[name][v]) for v in got) < 1e-12
        else:
            assert got == on_spark[name], name
    g = digraph(EDGES)
    assert on_driver["components"] == nx_components(digraph(BASE))
    assert on_driver["shortest_paths"] == nx_distances(g, EDGES[0][0])
    assert on_driver["dynamic"] == nx_components(digraph([*BASE, *NEW]))


def _jobs_per_superstep(spark: SparkSession, program: VertexProgram, folder: Path, **kwargs: Any) -> list[int]:
    """How many Spark jobs each superstep after superstep 0 ran."""
    sc = spark.sparkContext
    group = f"lockgate-test-{folder.name}"
    seen: list[int] = []
    sc.setJobGroup(group, "jobs per superstep")
    try:
        def count(stats: SuperstepStats) -> None:
            seen.append(len(sc.statusTracker().getJobIdsForGroup(group)))

        SuperstepDriver(program, str(folder), spark=spark, on_superstep=count, **kwargs).run(edges_df(spark, EDGES))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return [b - a for a, b in zip(seen, seen[1:], strict=False)]


def test_a_small_graph_runs_its_supersteps_without_spark_jobs(spark: SparkSession, tmp_path: Path) -> None:
    assert set(_jobs_per_superstep(spark, ConnectedComponents(), tmp_path / "cc")) == {0}
    # a program with aggregates: one job a superstep, which observes them as it computes
    pr = PageRank(tolerance=0.0, max_iterations=4)
    assert set(_jobs_per_superstep(spark, pr, tmp_path / "pr")) == {1}
    # above local_vertices the supersteps are Spark jobs
    assert min(_jobs_per_superstep(spark, ConnectedComponents(), tmp_path / "cc-spark", local_vertices=0)) >= 2


@pytest.mark.parametrize("first, then", [("driver", "spark"), ("spark", "driver")])
def test_a_resume_reads_the_other_paths_checkpoints(spark: SparkSession, tmp_path: Path, first: str, then: str) -> None:
    folder = str(tmp_path / "cc")
    limit = {"driver": None, "spark": 0}  # local_vertices: the default (this graph is small) or never
    stopped = SuperstepDriver(ConnectedComponents(), folder, spark=spark, local_vertices=limit[first]).run(
        edges_df(spark, EDGES), stop_after=2)
    assert stopped.halted_by is None
    result = SuperstepDriver(ConnectedComponents(), folder, spark=spark, local_vertices=limit[then]).resume()
    assert result.halted_by == "no_messages"
    assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(EDGES))


def test_checkpoints_every_k_supersteps_on_the_driver(spark: SparkSession, tmp_path: Path) -> None:
    program = PageRank(tolerance=0.0, max_iterations=7)
    every = SuperstepDriver(program, str(tmp_path / "every"), spark=spark).run(edges_df(spark, EDGES))
    sparse = SuperstepDriver(program, str(tmp_path / "sparse"), spark=spark, checkpoint_every=3)
    stopped = sparse.run(edges_df(spark, EDGES), stop_after=4)  # between checkpoints: 4 is written
    assert StateFolder(str(tmp_path / "sparse")).completed() == [0, 3, 4]
    assert stopped.halted_by is None
    result = SuperstepDriver(program, str(tmp_path / "sparse"), spark=spark, checkpoint_every=3).resume()
    assert StateFolder(str(tmp_path / "sparse")).completed() == [0, 3, 4, 6, 8]  # 8: the last, always
    want = {r.id: r.rank for r in every.output.collect()}
    got = {r.id: r.rank for r in result.output.collect()}
    assert max(abs(got[v] - want[v]) for v in want) < 1e-12


class _MaxLabel(VertexProgram):
    """The largest label reachable backwards, with a NaN label: Spark's MAX orders NaN above every
    number (Arrow's skips it), so the driver path must combine these messages as Spark does."""

    combiner = MAX
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx: VertexContext) -> Column:
        return F.when(ctx.id == 1, F.lit(float("nan"))).otherwise(ctx.id.cast("double"))

    def compute(self, ctx: VertexContext) -> Step:
        if ctx.superstep == 1:
            return Step(ctx.value, send_out=ctx.value)
        larger = ctx.messages > ctx.value
        value = F.when(larger, ctx.messages).otherwise(ctx.value)
        return Step(value, send_out=F.when(larger, value))


def _labels(spark: SparkSession, folder: Path, **kwargs: Any) -> dict[int, str]:
    edges = [(1, 2, 1.0), (2, 3, 1.0), (4, 3, 1.0), (5, 6, 1.0)]
    result = SuperstepDriver(_MaxLabel(), str(folder), spark=spark, **kwargs).run(edges_df(spark, edges))
    return {r.id: str(r.value) for r in result.output.collect()}


def test_nan_messages_combine_as_spark_combines_them(spark: SparkSession, tmp_path: Path) -> None:
    want = {1: "nan", 2: "nan", 3: "nan", 4: "4.0", 5: "5.0", 6: "6.0"}
    assert _labels(spark, tmp_path / "driver") == want
    assert _labels(spark, tmp_path / "spark", local_vertices=0) == want


@pytest.mark.parametrize(
    "combiner, values, want",
    [
        ("sum", [1.5, 2.5, None, 4.0], 8.0),
        ("min", [3.0, float("nan"), 1.0], None),  # NaN: left to Spark
        ("max", [3, None, 7], 7),
    ],
)
def test_combine_with_arrow(combiner: str, values: list[Any], want: Any) -> None:
    t = pa.table({"id": [9] * len(values), "__m": values})
    if want is None:
        assert not local.combinable(combiner, t)
        return
    assert local.combinable(combiner, t)
    inbox, count = local.combine(pa.chunked_array([[8, 9]]), t, combiner, t.schema.field("__m").type)
    assert inbox.to_pylist() == [None, want]
    assert count.to_pylist() == [0, sum(v is not None for v in values)]


def test_changed_is_spark_null_safe_inequality() -> None:
    value = pa.chunked_array([[1.0, None, None, float("nan"), 2.0]])
    old = pa.chunked_array([[1.0, None, 3.0, float("nan"), float("nan")]])
    assert local.changed(value, old).to_pylist() == [False, False, True, False, True]


def test_a_graph_above_the_collect_limit_runs_on_the_driver_reading_its_edges_in_place(
    spark: SparkSession, tmp_path: Path
) -> None:
    """More vertices than COLLECT_ROWS (the state comes back as Arrow), the edges read in place with
    pyarrow from a folder Spark wrote and a file pyarrow wrote (no copy, no Spark scan of them):
    networkx's components and PageRank, supersteps without a Spark job each past superstep 1, and
    the same when the edges are too many for the driver (Spark then runs the supersteps)."""
    import pyarrow.parquet as pq

    many = local.COLLECT_ROWS + 2_000
    chain = [(i, i + 1, 1.0) for i in range(0, many, 2)]  # pairs: many components, 2 supersteps
    extra = random_edges(many, 3_000, seed=45)
    spark.createDataFrame(chain, "src long, dst long, weight double").write.parquet(str(tmp_path / "a"))
    pq.write_table(pa.table({"src": [e[0] for e in extra], "dst": [e[1] for e in extra],
                             "weight": [e[2] for e in extra]}), tmp_path / "b.parquet")
    stored = [str(tmp_path / "a"), f"file://{tmp_path / 'b.parquet'}"]
    everything = [*chain, *extra]
    want_cc = nx_components(digraph(everything))
    assert len(digraph(everything)) > local.COLLECT_ROWS

    def run(name: str, local_vertices: int | None) -> tuple[dict[Any, Any], dict[Any, float], list[int]]:
        sc = spark.sparkContext
        group = f"lockgate-test-{name}"
        seen: list[int] = []
        sc.setJobGroup(group, "graph above the collect limit")
        try:
            cc = SuperstepDriver(ConnectedComponents(), str(tmp_path / f"cc-{name}"), spark=spark,
                                 local_vertices=local_vertices,
                                 on_superstep=lambda s: seen.append(len(sc.statusTracker().getJobIdsForGroup(group)))
                                 ).run(edges_df(spark, everything), stored_edges=stored)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        pr = SuperstepDriver(PageRank(tolerance=0.0, max_iterations=5), str(tmp_path / f"pr-{name}"), spark=spark,
                             local_vertices=local_vertices).run(edges_df(spark, everything), stored_edges=stored)
        jobs = [b - a for a, b in zip(seen, seen[1:], strict=False)]
        return ({r.id: r.component for r in cc.output.collect()}, {r.id: r.rank for r in pr.output.collect()},
                jobs)

    cc, ranks, jobs = run("driver", None)
    assert cc == want_cc
    assert max(jobs[1:]) <= 1  # past superstep 1 only the vertices with messages compute: no job when few
    assert 0 in jobs[1:]
    # more edges than the driver takes: read_edges gives up on the footers' count, and Spark's supersteps
    # (local_vertices=0) give the same results
    assert local.read_edges(stored, to_arrow_schema(edges_df(spark, everything).schema), 100) is None
    cc_spark, ranks_spark, jobs_spark = run("spark", 0)
    assert cc_spark == want_cc
    assert min(jobs_spark) >= 2
    assert ranks.keys() == ranks_spark.keys()
    assert max(abs(ranks[v] - ranks_spark[v]) for v in ranks) < 1e-12


class _Aging(VertexProgram):
    """Each window ages every vertex by one (``evolve`` changes every value, not only the new
    edges' ends), and a vertex takes the largest age that reaches it."""

    combiner = MAX
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx: VertexContext) -> Column:
        return F.lit(0).cast("long")

    def compute(self, ctx: VertexContext) -> Step:
        if ctx.superstep == 1:
            return Step(ctx.value, send_out=ctx.value)
        older = ctx.messages > ctx.value
        return Step(F.when(older, ctx.messages).otherwise(ctx.value), send_out=F.when(older, ctx.messages))

    def evolve(self, ctx: VertexContext) -> Step:
        assert ctx.touched is not None
        return Step(ctx.value + 1, send_out=F.when(ctx.touched, ctx.value + 1))


@pytest.mark.parametrize("driver", [True, False])
def test_an_evolve_that_changes_every_value_runs_over_every_vertex(spark: SparkSession, tmp_path: Path,
                                                                   driver: bool) -> None:
    limit = None if driver else 0
    first = SuperstepDriver(_Aging(), str(tmp_path / "w0"), spark=spark, local_vertices=limit).run(
        edges_df(spark, BASE))
    second = SuperstepDriver(_Aging(), str(tmp_path / "w1"), spark=spark, local_vertices=limit).run(
        edges_df(spark, [*BASE, *NEW]), previous=first.values, new_edges=edges_df(spark, NEW))
    ages = {r.id: r.value for r in second.output.collect()}
    # every vertex aged once, the ones far from the new edges too (new vertices start at 0)
    assert set(ages) == set(digraph([*BASE, *NEW])) and set(ages.values()) == {1}
    assert second.stats[1].active_vertices == len(ages)


def test_collect_edges_counts_a_graph_larger_than_its_first_look(spark: SparkSession) -> None:
    look = {"first": 100, "limit": 1_000}
    small = edges_df(spark, random_edges(300, 80, seed=46))
    middle = edges_df(spark, random_edges(300, 500, seed=47))
    large = edges_df(spark, random_edges(900, 1_500, seed=48))
    assert local.collect_edges(small, **look).num_rows == 80  # one look
    got = local.collect_edges(middle, **look)  # counted, then collected
    assert got is not None and sorted(got.to_pylist(), key=str) == sorted(
        [r.asDict() for r in middle.collect()], key=str)
    assert local.collect_edges(large, **look) is None  # counted: too many for the driver
    assert local.collect_edges(small, first=100, limit=50) is None  # the first look never takes more than the limit


def test_edges_pyarrow_cannot_read_as_spark_does_are_left_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    """A partition column in the folder's path (Spark reads it, pyarrow's plain dataset does not) and
    a URI pyarrow cannot reach: read_edges gives up, and the run reads the edges with Spark."""
    edges = random_edges(60, 150, seed=49)
    df = edges_df(spark, edges).withColumn("part", F.col("src") % 3)
    df.write.partitionBy("part").parquet(str(tmp_path / "parted"))
    schema = to_arrow_schema(df.schema)
    assert local.read_edges([str(tmp_path / "parted")], schema, 10_000) is None
    assert local.read_edges(["s3a://bucket/edges"], schema, 10_000) is None
    assert local.read_edges([str(tmp_path / "parted")], to_arrow_schema(df.drop("part").schema),
                            10_000).num_rows == len(edges)
    stored = spark.read.parquet(str(tmp_path / "parted"))
    result = connected_components(stored, str(tmp_path / "cc"), stored_edges=[str(tmp_path / "parted")])
    assert {r.id: r.component for r in result.output.collect()} == nx_components(digraph(edges))
