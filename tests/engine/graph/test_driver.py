"""The superstep driver: resume, the state folder, stats, a plan that does not grow, and the errors
that name the function at fault."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from graphref import clustered_edges, digraph, edges_df, nx_components, random_edges
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lockgate.errors import LockgateError
from lockgate.graph import (
    MIN,
    Combiner,
    EdgeContext,
    GraphResult,
    GraphStateError,
    Halt,
    MessageTypeError,
    NoHaltingRuleError,
    ProgramReturnError,
    Step,
    SuperstepDriver,
    SuperstepStats,
    VertexContext,
    VertexProgram,
    VertexValueTypeError,
    last_completed_superstep,
)
from lockgate.graph.library import ConnectedComponents, PageRank
from lockgate.graph.state import StateFolder

EDGES = clustered_edges(80, seed=31, per_vertex=2.0)
TINY = [(1, 2, 1.0), (2, 3, 2.0), (3, 1, 1.0), (4, 5, 1.0)]


def _components(result: GraphResult) -> dict[int, int]:
    return {r.id: r.component for r in result.output.collect()}


def test_resume_after_a_stop_and_a_half_written_superstep(spark: SparkSession, tmp_path: Path) -> None:
    whole = SuperstepDriver(ConnectedComponents(), str(tmp_path / "whole"), spark=spark).run(edges_df(spark, EDGES))
    assert _components(whole) == nx_components(digraph(EDGES))

    folder = str(tmp_path / "cut")
    first = SuperstepDriver(ConnectedComponents(), folder, spark=spark).run(edges_df(spark, EDGES), stop_after=3)
    assert (first.superstep, first.halted_by) == (3, None)
    assert last_completed_superstep(folder) == 3
    # a run killed while writing superstep 4 leaves Parquet files and no record
    half = Path(folder) / "superstep-00004"
    half.mkdir()
    (half / "part-00000-junk.snappy.parquet").write_bytes(b"not parquet")
    assert last_completed_superstep(folder) == 3

    seen: list[SuperstepStats] = []
    resumed = SuperstepDriver(ConnectedComponents(), folder, spark=spark, on_superstep=seen.append).resume()
    assert seen[0].superstep == 4
    assert (resumed.superstep, resumed.halted_by) == (whole.superstep, whole.halted_by)
    assert _components(resumed) == _components(whole)
    again = SuperstepDriver(ConnectedComponents(), folder, spark=spark).resume()  # halted: nothing to do
    assert (again.superstep, again.stats) == (resumed.superstep, [])
    # back to a checkpoint's superstep: the later ones are computed again, to the same result
    back = SuperstepDriver(ConnectedComponents(), folder, spark=spark).resume(from_superstep=2)
    assert back.stats[0].superstep == 3 and back.superstep == whole.superstep
    assert _components(back) == _components(whole)
    with pytest.raises(GraphStateError, match="not complete"):
        SuperstepDriver(ConnectedComponents(), folder, spark=spark).resume(from_superstep=99)


def test_resume_after_a_failing_callback_keeps_aggregates(spark: SparkSession, tmp_path: Path) -> None:
    program = PageRank(tolerance=1e-6)
    edges = random_edges(1000, 4000, seed=32)
    whole = SuperstepDriver(program, str(tmp_path / "whole"), spark=spark).run(edges_df(spark, edges))

    def crash(stats: SuperstepStats) -> None:
        if stats.superstep == 5:
            raise RuntimeError("checkpoint store down")

    folder = str(tmp_path / "cut")
    with pytest.raises(RuntimeError, match="store down"):
        SuperstepDriver(program, folder, spark=spark, on_superstep=crash).run(edges_df(spark, edges))
    assert last_completed_superstep(folder) == 5  # the superstep was complete before the callback
    resumed = SuperstepDriver(program, folder, spark=spark).resume()
    assert (resumed.superstep, resumed.halted_by) == (whole.superstep, "converged")
    a = {r.id: r.rank for r in whole.output.collect()}
    b = {r.id: r.rank for r in resumed.output.collect()}
    assert a.keys() == b.keys() and max(abs(a[v] - b[v]) for v in a) < 1e-12


def test_state_folder_checks_and_keep_last(spark: SparkSession, tmp_path: Path) -> None:
    folder = str(tmp_path / "cc")
    stats: list[SuperstepStats] = []
    result = SuperstepDriver(ConnectedComponents(), folder, spark=spark, keep_last=2, on_superstep=stats.append).run(
        edges_df(spark, TINY)
    )
    assert _components(result) == {1: 1, 2: 1, 3: 1, 4: 4, 5: 4}
    assert StateFolder(folder).completed() == [result.superstep - 1, result.superstep]
    assert stats[-1].state_uri == result.state_uri and Path(result.state_uri).is_dir()
    assert stats[0].vertices_changed == 5 and stats[1].messages_sent == 2 * len(TINY)
    assert all(s.elapsed_ms > 0 for s in stats)
    with pytest.raises(GraphStateError, match="not empty"):
        SuperstepDriver(ConnectedComponents(), folder, spark=spark).run(edges_df(spark, TINY))
    with pytest.raises(GraphStateError, match="PageRank"):
        SuperstepDriver(PageRank(), folder, spark=spark).resume()
    with pytest.raises(GraphStateError, match="no graph computation"):
        SuperstepDriver(ConnectedComponents(), str(tmp_path / "empty"), spark=spark).resume()


def _plan_shape(frame: DataFrame) -> tuple[int, str]:
    plan = frame._jdf.queryExecution().analyzed().toString()
    return plan.count("\n"), re.sub(r"\d+(\.\d+)?(E-?\d+)?", "0", plan)


def test_plan_does_not_grow_with_supersteps(spark: SparkSession, tmp_path: Path) -> None:
    shapes: dict[int, tuple[int, str]] = {}
    # the Spark path's plan (a small graph's supersteps run on the driver: local_vertices=0 turns it off)
    driver = SuperstepDriver(PageRank(tolerance=0.0, max_iterations=13), str(tmp_path / "pr"), spark=spark,
                             local_vertices=0)
    driver.on_superstep = lambda s: shapes.__setitem__(s.superstep, _plan_shape(driver.last_superstep_frame))
    result = driver.run(edges_df(spark, random_edges(200, 600, seed=3)))
    assert (result.superstep, result.halted_by) == (14, "max_supersteps")
    assert shapes[14] == shapes[3]
    assert shapes[14][0] < 60


# -- errors naming the function at fault -------------------------------------------------------


class Forever(VertexProgram):
    halt_when = None

    def init(self, ctx: VertexContext) -> Column:
        return ctx.id

    def compute(self, ctx: VertexContext) -> Step:
        return Step(ctx.value, send_out=ctx.value)


class BadMessage(Forever):
    halt_when = Halt.NO_MESSAGES

    def compute(self, ctx: VertexContext) -> Step:
        return Step(ctx.value, send_out=ctx.value.cast("string"))


class Drift(Forever):
    halt_when = Halt.NO_MESSAGES

    def compute(self, ctx: VertexContext) -> Step:
        return Step(ctx.value / 2, send_out=ctx.value)


class NotAStep(Forever):
    halt_when = Halt.NO_MESSAGES

    def compute(self, ctx: VertexContext) -> Column:  # type: ignore[override]
        return ctx.value


class WeightedWrong(Forever):
    halt_when = Halt.NO_MESSAGES

    def along_edge(self, message: Column, edge: EdgeContext) -> Column:
        return message + edge.attr("weight")


class Averaging(Forever):
    halt_when = Halt.NO_MESSAGES
    combiner = Combiner("avg", F.avg)


@dataclass(frozen=True)
class NullInit(Forever):
    halt_when = Halt.NO_MESSAGES

    def init(self, ctx: VertexContext) -> Column:
        return F.lit(None)


def test_no_halting_rule_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(NoHaltingRuleError, match=r"Forever has no halting rule.*Fix: set Forever.halt_when") as e:
        SuperstepDriver(Forever(), str(tmp_path / "f"), spark=spark)
    assert isinstance(e.value, LockgateError)
    SuperstepDriver(Forever(), str(tmp_path / "f"), spark=spark, max_supersteps=3)  # a bound will do


@pytest.mark.parametrize(
    ("program", "error", "message"),
    [
        (BadMessage(), MessageTypeError, r"BadMessage\.compute returned a send_out message of type string.*Fix: cast"),
        (Drift(), VertexValueTypeError, r"Drift\.compute changed the vertex value's type.*bigint.*Fix:"),
        (NotAStep(), ProgramReturnError, r"NotAStep\.compute returned Column.*not a Step"),
        (WeightedWrong(), MessageTypeError, r"WeightedWrong\.along_edge turned .* bigint into double.*Fix: cast"),
        (Averaging(), MessageTypeError, r"Averaging\.combiner \(avg\) combines messages of type bigint into double"),
        (NullInit(), VertexValueTypeError, r"NullInit\.init returned a null literal.*F\.lit\(None\)\.cast"),
    ],
)
def test_errors_name_the_function(
    spark: SparkSession, tmp_path: Path, program: VertexProgram, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        SuperstepDriver(program, str(tmp_path / "e"), spark=spark).run(edges_df(spark, TINY))


def test_a_custom_combiner_runs(spark: SparkSession, tmp_path: Path) -> None:
    class MaxInNeighbour(VertexProgram):
        combiner = Combiner("max_id", lambda m: F.max(m))
        max_supersteps = 2

        def init(self, ctx: VertexContext) -> Column:
            return ctx.id

        def compute(self, ctx: VertexContext) -> Step:
            return Step(F.coalesce(ctx.messages, F.lit(-1).cast("bigint")), send_out=ctx.id)

    out = SuperstepDriver(MaxInNeighbour(), str(tmp_path / "m"), spark=spark).run(edges_df(spark, TINY))
    assert {r.id: r.value for r in out.output.collect()} == {1: 3, 2: 1, 3: 2, 4: -1, 5: 4}
    assert MIN.name == "min"
