"""Compile-time analysis: expressions whose value a replay would not reproduce (the wall
clock, randomness) are refused with the reason and what to use instead."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lockgate as lg
from lockgate.errors import CompileError
from lockgate.runtime.compiler import compile_pipeline


def _bids(name: str) -> tuple[lg.Pipeline, lg.Stream]:
    p = lg.Pipeline(name, cycle_window=timedelta(seconds=10))
    return p, p.source(lg.NexmarkSource("bid", events_per_second=10, max_events=10), name="bids")


@pytest.mark.parametrize(("build", "fn"), [
    (lambda s: s.with_column("pt", "current_timestamp()", name="stamp"), "current_timestamp"),
    (lambda s: s.with_column("pt", "CURRENT_TIMESTAMP", name="stamp"), "current_timestamp"),
    (lambda s: s.select("auction", "now() AS pt", name="stamp"), "now"),
    (lambda s: s.filter("rand() < 0.1", name="stamp"), "rand"),
    (lambda s: s.sql("SELECT *, uuid() AS id FROM input", name="stamp"), "uuid"),
    (lambda s: s.with_column("t", "unix_timestamp()", name="stamp"), "unix_timestamp"),
])
def test_processing_time_and_randomness_are_refused(spark, build, fn):
    p, bids = _bids("nondeterministic")
    build(bids).sink(lg.CollectSink("out"))
    with pytest.raises(CompileError) as err:
        compile_pipeline(p, spark)
    text = str(err.value)
    assert err.value.operator == "stamp"
    assert f"uses {fn}()" in text and "replayed" in text and "arrival" in text


def test_deterministic_time_functions_still_compile(spark):
    p, bids = _bids("deterministic")
    (bids.with_column("day", "to_date(date_time)").with_column("t", "unix_timestamp(date_time)")
     .select("auction", "day", "t", "price AS now_price").sink(lg.CollectSink("out")))
    plan = compile_pipeline(p, spark)
    assert "day" in [c.name for c in plan.graph.vertices["select_1"].schema]
