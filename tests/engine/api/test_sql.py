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
    ("SELECT b.auction FROM bids b JOIN bids c ON b.auction = c.auction", r"JOIN .*bounds no time.*ttl="),
    ("SELECT b.auction FROM bids b JOIN bids c ON b.date_time BETWEEN c.date_time AND c.date_time "
     "+ INTERVAL '1' MINUTE", r"JOIN .*equates no column"),
    ("SELECT b.auction FROM bids b JOIN bids c ON b.auction = c.auction AND b.date_time >= c.date_time",
     r"no upper bound on b.date_time - c.date_time.*INTERVAL '1' DAY"),
    ("SELECT b.auction FROM bids b LEFT JOIN bids c ON b.auction = c.auction AND b.price > c.price AND "
     "b.date_time BETWEEN c.date_time AND c.date_time + INTERVAL '1' MINUTE", r"LEFT JOIN .*keys and the time"),
    ("SELECT auction FROM bids b JOIN bids c ON b.auction = c.auction AND b.date_time BETWEEN c.date_time "
     "AND c.date_time + INTERVAL '1' MINUTE", r"column auction is in both streams: qualify it .*b.auction"),
    ("SELECT bidder, avg(price) OVER (PARTITION BY bidder) AS a FROM bids", r"OVER .*over\(preceding"),
    ("SELECT * FROM (SELECT *, avg(price) OVER (PARTITION BY bidder) AS a FROM bids) WHERE a < 3",
     r"OVER: .*one ROW_NUMBER\(\)"),
    ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY price) AS rn FROM bids)",
     r"ROW_NUMBER\(\) AS rn .*WHERE rn <= n"),
    ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY price DESC, date_time) AS rn "
     "FROM bids) WHERE rn <= 2", r"ORDER BY .*orders every column one way"),
    ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price) AS rn FROM bids) WHERE rn <= 2",
     r"PARTITION BY .*a key or a window"),
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


def test_a_join_in_sql_is_the_interval_join_the_python_api_builds(spark):
    """``FROM a, b WHERE a.k = b.k AND b.ts BETWEEN a.ts AND a.ts + INTERVAL`` is an interval
    join with those bounds; the rest of the condition a filter of its pairs."""
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.source(lg.NexmarkSource("auction", events_per_second=10, seed=1), name="auctions")
    p.sql("SELECT A.id, B.price, B.date_time AS bid_time FROM auctions A, bids B WHERE A.id = B.auction "
          "AND B.date_time BETWEEN A.date_time AND A.expires AND B.date_time < A.date_time + INTERVAL '1' HOUR",
          name="in_auction").sink(lg.CollectSink("out"))
    g = compile_pipeline(p, spark).graph
    join = g.vertices["in_auction_join"]
    assert join.op == "interval_join"
    assert (join.config["left_on"], join.config["right_on"]) == (["id"], ["auction"])
    # auctions.ts - bids.ts in [-1 h, 0]; the strict upper bound and the expiry are a filter
    assert (join.config["lower_us"], join.config["upper_us"]) == (-3_600_000_000, 0)
    cond = g.vertices["in_auction_where"].config["condition"]
    assert "date_time_right <= expires" in cond and "date_time_right < date_time + INTERVAL" in cond
    assert [c.name for c in g.vertices["in_auction"].schema] == ["id", "price", "bid_time"]
    assert g.state_layout()["in_auction_join"]


def test_a_join_whose_time_condition_is_not_the_event_time_is_refused_naming_the_column(spark):
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.source(lg.NexmarkSource("auction", events_per_second=10, seed=1), name="auctions")
    p.sql("SELECT A.id, B.price FROM auctions A JOIN bids B ON A.id = B.auction "
          "AND B.date_time BETWEEN A.expires - INTERVAL '1' HOUR AND A.expires + INTERVAL '1' MINUTE",
          name="near_expiry").sink(lg.CollectSink("out"))
    with pytest.raises(lg.CompileError, match=r"compares column 'expires' of the left stream 'auctions', whose "
                       r"event time is 'date_time'") as err:
        compile_pipeline(p, spark)
    assert err.value.operator == "near_expiry_join"


def test_row_number_per_window_is_a_windowed_top_n_and_per_key_a_bounded_running_top_k(spark):
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.sql("SELECT * FROM (SELECT auction, price, date_time, ROW_NUMBER() OVER (PARTITION BY auction, "
          "window(date_time, '10 seconds') ORDER BY price DESC, date_time ASC) AS rn FROM bids) WHERE rn <= 3",
          name="windowed").sink(lg.CollectSink("w"))
    p.sql("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY date_time DESC) AS latest "
          "FROM bids) WHERE latest = 1", name="last").sink(lg.CollectSink("l"))
    g = compile_pipeline(p, spark).graph
    top = g.vertices["windowed_q_top"]
    assert top.op == "window_top_n" and top.config["n"] == 3 and top.config["ascending"] == [False, True]
    assert [c.name for c in g.vertices["windowed"].schema] == [
        "window_start", "window_end", "auction", "price", "date_time", "rn"]
    running = g.vertices["last_q_top"]
    assert running.op == "running_aggregate" and running.config["aggs"]["__top"]["k"] == 1
    assert g.vertices["last"].upsert_key == ["bidder"]
    assert [c.name for c in g.vertices["last"].schema] == [
        "auction", "bidder", "price", "channel", "url", "date_time", "extra", "latest", "as_of"]


def test_row_number_over_a_windowed_result_is_a_top_n_per_its_window(spark):
    """Flink's window top-N: ROW_NUMBER() partitioned by a windowed aggregate's window columns
    ranks each window's rows, final when the window closes."""
    from lockgate.runtime.compiler import compile_pipeline

    p, _ = _pipeline()
    p.sql("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY starttime ORDER BY num DESC) AS rn FROM ("
          "SELECT auction, count(*) AS num, window.start AS starttime, window.end AS endtime FROM bids "
          "GROUP BY auction, window(date_time, '10 seconds')) q) WHERE rn <= 3", name="hot").sink(
        lg.CollectSink("hot"))
    g = compile_pipeline(p, spark).graph
    top = g.vertices["hot_q_top"]
    assert top.op == "window_top_n" and top.config["n"] == 3 and top.config["keys"] == []
    assert top.config["window"]["on"] == "endtime"
    assert [c.name for c in g.vertices["hot"].schema] == ["auction", "num", "starttime", "endtime", "rn"]
