"""Pipeline.sql: Spark SQL over named streams compiles to the operators the Python API builds
(the same state layout), and each clause that cannot run incrementally is a CompileError that
names it and says what to use."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lockgate as lg


def _pipeline() -> tuple[lg.Pipeline, lg.Stream]:
    p = lg.Pipeline("sql", cycle_window=timedelta(seconds=10))
    return p, p.source(lg.NexmarkSource("bid", events_per_second=10, seed=1), name="bids")


def test_a_windowed_aggregate_in_sql_has_the_state_layout_of_the_same_python_pipeline(spark):
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.sql("SELECT auction, window.start AS starttime, count(*) AS num, max(price) AS top FROM bids "
          "WHERE price > 10 GROUP BY auction, window(date_time, '10 seconds', '5 seconds')", name="hot").sink(
        lg.CollectSink("hot"))
    q, bids = _pipeline()
    (bids.filter("price > 10", name="hot_where").key_by("auction")
     .window(lg.Sliding(timedelta(seconds=10), timedelta(seconds=5), on="date_time"))
     .aggregate(num=lg.count(), top=lg.max("price"), name="hot_agg").sink(lg.CollectSink("hot")))
    a, b = compile_pipeline(p, spark).graph, compile_pipeline(q, spark).graph
    assert a.vertices["hot_agg"].op == "window_aggregate"
    assert a.state_layout() == b.state_layout() and a.state_layout()["hot_agg"]
    assert a.state_settings() == b.state_settings()
    assert [c.name for c in a.vertices["hot"].schema] == ["auction", "starttime", "num", "top"]


def test_group_by_keys_alone_is_a_running_aggregate_an_updating_stream(spark):
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.sql("SELECT bidder, count(*) AS n, sum(price * 2) AS doubled FROM bids GROUP BY bidder", name="totals").sink(
        lg.CollectSink("totals"))
    g = compile_pipeline(p, spark).graph
    assert g.vertices["totals_agg"].op == "running_aggregate"
    assert g.vertices["totals"].upsert_key == ["bidder"]
    assert [c.name for c in g.vertices["totals"].schema] == ["bidder", "n", "doubled", "as_of"]


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT * FROM bids ORDER BY price", r"ORDER BY .*top_n"),
    ("SELECT * FROM bids LIMIT 3", r"LIMIT .*top_n"),
    ("SELECT DISTINCT bidder FROM bids", r"SELECT DISTINCT .*deduplicate"),
    ("SELECT b.auction FROM bids b JOIN bids c ON b.auction = c.auction", r"JOIN .*Stream.join"),
    ("SELECT bidder, avg(price) OVER (PARTITION BY bidder) AS a FROM bids", r"OVER .*over\(preceding"),
    ("SELECT x FROM (SELECT bidder AS x FROM bids)", r"FROM .*subquery"),
    ("SELECT a FROM nope", r"FROM nope: the pipeline has no stream of that name \(streams: bids\)"),
    ("SELECT count(*) AS n FROM bids", r"an aggregate without GROUP BY"),
    ("SELECT bidder, price FROM bids GROUP BY bidder", r"SELECT price .*needs an aggregate"),
    ("SELECT bidder, count(*) FROM bids GROUP BY bidder", r"name each aggregate"),
    ("SELECT bidder, count(*) AS n FROM bids GROUP BY bidder HAVING n > 2", r"HAVING .*running aggregate"),
    ("SELECT bidder, count(*) AS n FROM bids GROUP BY bidder, window(date_time, 'ten')", r"not a duration"),
    ("SELECT bidder, stddev(price) AS s FROM bids GROUP BY bidder", r"aggregate .*not supported"),
    ("DELETE FROM bids", r"takes one SELECT"),
])
def test_what_cannot_run_incrementally_is_refused_naming_the_clause(query, message):
    p, _ = _pipeline()
    with pytest.raises(lg.CompileError, match=message) as err:
        p.sql(query, name="q")
    assert err.value.operator == "q"
