"""The time bound of a SQL join may sit in ON or in WHERE (the published Nexmark q7 bounds the
time in WHERE after JOIN ... ON), as Spark SQL and Flink SQL read it; and every error that
suggests a fix suggests one that compiles as written: each suggestion below is taken out of
the message, applied to the query, and compiled."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import lockgate as lg

ROOT = Path(__file__).resolve().parents[3]
STREAMS = {"bids": "bid", "auctions": "auction", "persons": "person"}


def _pipeline(query: str) -> lg.Pipeline:
    """A pipeline with the Nexmark streams the query names."""
    p = lg.Pipeline("bounds", cycle_window=timedelta(seconds=10))
    for name, kind in STREAMS.items():
        if re.search(rf"\b{name}\b", query):
            p.source(lg.NexmarkSource(kind, events_per_second=10, seed=1), name=name)
    return p


def _graph(spark, query: str):
    from lockgate.runtime.compiler import compile_pipeline

    p = _pipeline(query)
    p.sql(query, name="q").sink(lg.CollectSink("out"))
    return compile_pipeline(p, spark).graph


def _error(query: str) -> str:
    with pytest.raises(lg.CompileError) as err:
        _pipeline(query).sql(query, name="q")
    assert err.value.operator == "q"
    return str(err.value)


# -- the bound in ON or in WHERE -------------------------------------------------------------
MAX_PER_WINDOW = ("(SELECT max(price) AS maxprice, window.end AS date_time FROM bids "
                  "GROUP BY window(date_time, '10 seconds')) B1")
#: the published Nexmark q7, in Spark's spelling of the window (TUMBLE_ROWTIME is window.end)
Q7_PUBLISHED = (f"SELECT B.auction, B.price, B.bidder, B.date_time, B.extra FROM bids B JOIN {MAX_PER_WINDOW} "
                "ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND "
                "AND B1.date_time")


def test_the_published_q7_with_its_bound_in_where_is_the_interval_join_of_the_bound_in_on(spark):
    on_form = Q7_PUBLISHED.replace(" WHERE B.date_time", " AND B.date_time")
    where, on = _graph(spark, Q7_PUBLISHED), _graph(spark, on_form)
    join = where.vertices["q_join"]
    assert join.op == "interval_join"
    assert (join.config["left_on"], join.config["right_on"]) == (["price"], ["maxprice"])
    assert (join.config["lower_us"], join.config["upper_us"]) == (-10_000_000, 0)
    assert join.config == on.vertices["q_join"].config
    assert where.state_layout() == on.state_layout() and where.state_layout()["q_join"]
    assert "q_where" not in where.vertices  # the whole WHERE was the bound: nothing left to filter
    assert [c.name for c in where.vertices["q"].schema] == ["auction", "price", "bidder", "date_time", "extra"]


JOIN = "SELECT A.id, B.price FROM auctions A JOIN bids B ON A.id = B.auction"
LOWER, UPPER = "B.date_time >= A.date_time", "B.date_time <= A.date_time + INTERVAL '1' HOUR"


@pytest.mark.parametrize("query", [
    f"{JOIN} AND {LOWER} AND {UPPER} WHERE B.price > 10",
    f"{JOIN} WHERE {LOWER} AND {UPPER} AND B.price > 10",
    f"{JOIN} AND {LOWER} WHERE B.price > 10 AND {UPPER}",
    f"{JOIN} WHERE B.price > 10 AND B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' HOUR",
    "SELECT A.id, B.price FROM auctions A JOIN bids B ON B.date_time BETWEEN A.date_time AND A.date_time "
    "+ INTERVAL '1' HOUR WHERE A.id = B.auction AND B.price > 10",
    f"SELECT A.id, B.price FROM auctions A, bids B WHERE A.id = B.auction AND {LOWER} AND {UPPER} AND B.price > 10",
], ids=["on", "where", "split", "where-between", "keys-in-where", "comma"])
def test_a_bound_in_on_or_where_is_the_same_join_and_the_rest_of_where_a_filter(spark, query):
    g = _graph(spark, query)
    join = g.vertices["q_join"]
    assert join.op == "interval_join"
    assert (join.config["left_on"], join.config["right_on"]) == (["id"], ["auction"])
    assert (join.config["lower_us"], join.config["upper_us"]) == (-3_600_000_000, 0)
    assert g.vertices["q_where"].config["condition"] == "price > 10"


def test_a_where_comparison_of_other_columns_stays_a_filter_beside_a_bound_in_on(spark):
    """``B.date_time <= A.expires + INTERVAL ...`` in WHERE compares a column that is not an event
    time: a filter of the pairs, as it was, not a second bound."""
    g = _graph(spark, f"{JOIN} AND {LOWER} AND {UPPER} WHERE B.date_time <= A.expires + INTERVAL '1' MINUTE")
    join = g.vertices["q_join"]
    assert (join.config["lower_us"], join.config["upper_us"]) == (-3_600_000_000, 0)
    assert g.vertices["q_where"].config["condition"] == "date_time_right <= expires + INTERVAL '1' MINUTE"


def test_window_equalities_in_where_make_the_windowed_join(spark):
    raw = _graph(spark, f"{JOIN} WHERE window(A.date_time, '10 seconds') = window(B.date_time, '10 seconds')")
    assert raw.vertices["q_join"].op == "join"
    assert raw.vertices["q_join"].config["window"]["size_us"] == 10_000_000
    per_window = ("(SELECT {k}, window.start AS starttime, window.end AS endtime FROM {s} "
                  "GROUP BY {k}, window(date_time, '10 seconds'))")
    q8 = (f"SELECT P.id, P.starttime FROM {per_window.format(k='id', s='persons')} P "
          f"JOIN {per_window.format(k='seller', s='auctions')} A ON P.id = A.seller "
          "WHERE P.starttime = A.starttime AND P.endtime = A.endtime")
    g = _graph(spark, q8)
    assert g.vertices["q_join"].op == "join" and "q_where" not in g.vertices


def test_an_outer_join_bounded_only_in_where_is_refused_saying_to_move_the_bound_into_on():
    message = _error("SELECT A.id, B.price FROM auctions A LEFT JOIN bids B ON A.id = B.auction "
                     "WHERE B.date_time BETWEEN A.date_time AND A.date_time + INTERVAL '1' HOUR")
    assert "LEFT JOIN ... WHERE B.date_time BETWEEN" in message and "drops its unmatched rows" in message
    assert "bounds no time" not in message  # it does bound the time: the error says where the bound must go


# -- every suggested fix compiles ------------------------------------------------------------
def _append(query: str, fix: str) -> str:
    return f"{query} {fix}"


def _replace(old: str) -> Callable[[str, str], str]:
    def apply(query: str, fix: str) -> str:
        assert old in query
        return query.replace(old, fix)

    return apply


BETWEEN_EXPIRES = "B.date_time BETWEEN A.date_time AND A.expires"
LEFT = "SELECT A.id, B.price FROM auctions A LEFT JOIN bids B ON A.id = B.auction"
SUGGESTIONS = [
    # (id, query, the error's words, the suggestion in the error, how to apply it)
    ("no-lower-bound", f"SELECT A.id, B.price FROM auctions A, bids B WHERE A.id = B.auction AND {BETWEEN_EXPIRES}",
     "no lower bound on A.date_time - B.date_time", r"add e\.g\. (AND .*)$", _append),
    ("no-lower-bound-in-where", f"{JOIN} WHERE {BETWEEN_EXPIRES}", "no lower bound", r"add e\.g\. (AND .*)$",
     _append),
    ("no-upper-bound", "SELECT b.auction FROM bids b JOIN bids c ON b.auction = c.auction AND b.date_time >= "
     "c.date_time", "no upper bound on b.date_time - c.date_time", r"add e\.g\. (AND .*)$", _append),
    ("no-upper-bound-interval", f"{JOIN} AND {UPPER}", "no upper bound", r"add e\.g\. (AND .*)$", _append),
    ("no-bound-between", JOIN, "bounds no time", r"add a time bound to ON or WHERE \((AND .*?)\),", _append),
    ("no-bound-windows", JOIN, "bounds no time", r"join equal windows \((AND .*?)\),", _append),
    ("no-bound-beside-a-filter", f"{JOIN} WHERE B.date_time BETWEEN A.expires - INTERVAL '1' HOUR AND A.expires",
     "compares A.expires and B.date_time, not the event times", r"add a time bound to ON or WHERE \((AND .*?)\),",
     _append),
    ("outer-no-bound", LEFT, "LEFT JOIN cannot run incrementally here: the condition bounds no time",
     r"add a time bound to ON \((AND .*?)\),", _append),
    ("outer-where-into-on", f"{LEFT} WHERE {LOWER} AND {UPPER}", "drops its unmatched rows",
     r"move it into ON \((ON .*?)\), or", _replace(f"ON A.id = B.auction WHERE {LOWER} AND {UPPER}")),
    ("outer-where-inner", f"{LEFT} WHERE {LOWER} AND {UPPER}", "drops its unmatched rows",
     r"or write (JOIN) for an inner join", _replace("LEFT JOIN")),
    ("outer-strict", f"{LEFT} AND B.date_time > A.date_time AND {UPPER}", "inclusive",
     r"write (B\.date_time >= A\.date_time)$", _replace("B.date_time > A.date_time")),
    ("ambiguous-column", "SELECT auction FROM bids b JOIN bids c ON b.auction = c.auction AND b.date_time BETWEEN "
     "c.date_time AND c.date_time + INTERVAL '1' MINUTE", "column auction is in both streams",
     r"\((b\.auction) or c\.auction\)", lambda query, fix: query.replace("SELECT auction", f"SELECT {fix}")),
]


@pytest.mark.parametrize(("query", "said", "pattern", "apply"), [row[1:] for row in SUGGESTIONS],
                         ids=[row[0] for row in SUGGESTIONS])
def test_each_suggested_fix_compiles_as_written(spark, query, said, pattern, apply):
    message = _error(query)
    assert said in message, message
    found = re.search(pattern, message)
    assert found, f"no suggestion {pattern!r} in: {message}"
    fix = found.group(1)
    if apply is _append:
        assert fix not in query, f"the error suggests adding what the query already has: {fix}"
    fixed = apply(query, fix)
    assert fixed != query
    g = _graph(spark, fixed)  # raises if the suggestion does not compile
    assert "q" in g.vertices


def test_the_suggested_bound_for_the_issues_query_is_the_one_that_bounds_it(spark):
    """``B.date_time BETWEEN A.date_time AND A.expires`` bounds ``A - B`` above (at 0): the
    suggestion is the bound below (``B.date_time <= A.date_time + ...``), which makes the join."""
    query = f"SELECT A.id, B.price FROM auctions A, bids B WHERE A.id = B.auction AND {BETWEEN_EXPIRES}"
    message = _error(query)
    assert message.endswith("add e.g. AND B.date_time <= A.date_time + INTERVAL '1' DAY")
    join = _graph(spark, f"{query} AND B.date_time <= A.date_time + INTERVAL '1' DAY").vertices["q_join"]
    assert (join.config["lower_us"], join.config["upper_us"]) == (-86_400_000_000, 0)
    # the bound the old error suggested (the upper again) leaves the join unbounded below, still
    assert "no lower bound" in _error(f"{query} AND A.date_time <= B.date_time + INTERVAL '1' DAY")


@pytest.mark.parametrize(("query", "how"), [(JOIN, "inner"), (LEFT, "left")], ids=["inner", "left"])
def test_the_suggested_python_join_builds(spark, query, how):
    """The error's ``Stream.join(other, ...)`` with its keys builds and compiles for the two streams."""
    from lockgate.runtime.compiler import compile_pipeline

    found = re.search(r"join with (Stream\.join\(other, .*?\)) in Python", _error(query))
    assert found, _error(query)
    p = _pipeline(query)
    auctions, bids = lg.Stream(p, "auctions"), lg.Stream(p, "bids")
    joined = eval(found.group(1).replace("Stream.join", "auctions.join"),  # the error's own text
                  {"auctions": auctions, "other": bids, "timedelta": timedelta})
    joined.sink(lg.CollectSink("out"))
    g = compile_pipeline(p, spark).graph
    join = g.vertices[joined.node]
    assert (join.config["left_on"], join.config["right_on"]) == (["id"], ["auction"])
    assert (join.config["lower_us"], join.config["upper_us"]) == (-86_400_000_000, 86_400_000_000)
    assert join.config["how"] == how


# -- the published queries, with what the README says to change -----------------------------
PUBLISHED = {
    "q2": "SELECT auction, price FROM bids WHERE MOD(auction, 123) = 0",  # as published
    # a time bound added (here in WHERE, where the published query has its conditions)
    "q3": """SELECT P.name, P.city, P.state, A.id FROM auctions AS A INNER JOIN persons AS P ON A.seller = P.id
             WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
               AND P.date_time BETWEEN A.date_time - INTERVAL '1' DAY AND A.date_time + INTERVAL '1' DAY""",
    # A.id kept in the inner SELECT, an upper bound added
    "q4": """SELECT Q.category, avg(Q.final) AS avg_final FROM (
               SELECT A.id, max(B.price) AS final, A.category FROM auctions A, bids B
               WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                 AND B.date_time <= A.date_time + INTERVAL '1' DAY
               GROUP BY A.id, A.category) Q
             GROUP BY Q.category""",
    # as published (the count per window selects no auction in MaxBids), in Spark's window spelling
    "q5": """SELECT AuctionBids.auction, AuctionBids.num FROM (
               SELECT B1.auction, count(*) AS num, window.start AS starttime, window.end AS endtime FROM bids B1
               GROUP BY B1.auction, window(B1.date_time, '10 seconds', '2 seconds')) AS AuctionBids
             JOIN (
               SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM (
                 SELECT count(*) AS num, window.start AS starttime, window.end AS endtime FROM bids B2
                 GROUP BY B2.auction, window(B2.date_time, '10 seconds', '2 seconds')) AS CountBids
               GROUP BY CountBids.starttime, CountBids.endtime) AS MaxBids
             ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
               AND AuctionBids.num >= MaxBids.maxn""",
    "q7": Q7_PUBLISHED,
    # A.* as published; an upper bound; the tie broken by a column ordered the way price is
    "q9": """SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra,
               auction, bidder, price, bid_date_time, bid_extra FROM (
               SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, B.extra AS bid_extra,
                 -unix_micros(B.date_time) AS earliest,
                 ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, earliest DESC) AS rownum
               FROM auctions A, bids B
               WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                 AND B.date_time <= A.date_time + INTERVAL '1' DAY)
             WHERE rownum <= 1""",
    # as published (B.date_time and A.date_time, B.extra and A.extra); a time bound added
    "q20": """SELECT auction, bidder, price, channel, url, B.date_time, B.extra, item_name, description,
               initial_bid, reserve, A.date_time, expires, seller, category, A.extra
             FROM bids AS B INNER JOIN auctions AS A ON B.auction = A.id
             WHERE A.category = 10
               AND B.date_time BETWEEN A.date_time - INTERVAL '1' DAY AND A.date_time + INTERVAL '1' DAY""",
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_published_queries_compile_with_the_changes_the_readme_lists(spark, name):
    g = _graph(spark, PUBLISHED[name])
    ops = {v.op for v in g.vertices.values()}
    assert ("interval_join" in ops) == (name not in ("q2", "q5")), ops
    assert ("join" in ops) == (name == "q5"), ops  # q5: the windowed join


def test_q20s_columns_of_one_name_from_both_sides_are_named_by_their_stream(spark):
    g = _graph(spark, PUBLISHED["q20"])
    cols = [c.name for c in g.vertices["q"].schema]
    assert cols == ["auction", "bidder", "price", "channel", "url", "bids_date_time", "bids_extra", "item_name",
                    "description", "initial_bid", "reserve", "auctions_date_time", "expires", "seller",
                    "category", "auctions_extra"], cols
    # an alias the query gives is kept; two aliases alike are refused with a fix that compiles
    aliased = PUBLISHED["q20"].replace("A.date_time, expires", "A.date_time AS listed_at, expires")
    cols = [c.name for c in _graph(spark, aliased).vertices["q"].schema]
    assert "listed_at" in cols and "date_time" in cols and "auctions_date_time" not in cols
    clash = (PUBLISHED["q20"].replace("B.date_time, B.extra", "B.date_time AS t, B.extra")
             .replace("A.date_time, expires", "A.date_time AS t, expires"))
    with pytest.raises(lg.CompileError, match=r"duplicate column names t: .*`t AS other_name`"):
        _graph(spark, clash)
    _graph(spark, clash.replace("A.date_time AS t", "A.date_time AS other_name"))


def test_q4_without_its_key_is_refused_saying_to_keep_it(spark):
    from lockgate.runtime.compiler import compile_pipeline

    query = PUBLISHED["q4"].replace("SELECT A.id, max", "SELECT max")
    p = _pipeline(query)
    p.sql(query, name="q").sink(lg.CollectSink("out"))
    with pytest.raises(lg.CompileError, match=r"updates rows by key \(id, category\) but drops id: keep the key"):
        compile_pipeline(p, spark)


# -- the same rows as DuckDB -----------------------------------------------------------------
EPS, SEED = 100, 7
Q12_SQL = ("SELECT B.bidder, count(*) AS bid_count, window.start AS starttime, window.end AS endtime "
           "FROM bids B GROUP BY B.bidder, window(B.p_time, '10 seconds')")
MODULE = f'''
import sys
from datetime import timedelta
sys.path.insert(0, {str(ROOT / "examples" / "nexmark")!r})
import lockgate as lg
from queries import START, _pipeline, _source


def q7_where():
    p = _pipeline("sql_q7_where")
    _source(p, "bid")
    p.sql({Q7_PUBLISHED!r}, name="q7").sink(lg.CollectSink("out"), name="out")
    return p


def q12():
    p = lg.Pipeline("nexmark_sql_q12", cycle_window=timedelta(seconds=10), parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(0)))
    p.source(lg.NexmarkSource("bid", events_per_second={EPS}, seed={SEED}, start=START, arrival="p_time"),
             name="bids")
    p.sql({Q12_SQL!r}, name="q12").sink(lg.CollectSink("out"), name="out")
    return p
'''
#: DuckDB over the same bids (``ts``: event time, ``p_time``: arrival, in µs)
DUCK = {
    "q7_where": """WITH m AS (SELECT (ts // 10000000) * 10000000 + 10000000 AS wend, max(price) AS maxprice
                              FROM bid GROUP BY 1)
                   SELECT b.auction, b.price, b.bidder, b.ts AS date_time, b.extra FROM bid b
                   JOIN m ON b.price = m.maxprice WHERE b.ts BETWEEN m.wend - 10000000 AND m.wend""",
    "q12": """SELECT bidder, count(*) AS bid_count, (p_time // 10000000) * 10000000 AS starttime,
              (p_time // 10000000) * 10000000 + 10000000 AS endtime FROM bid GROUP BY 1, 3, 4""",
}


@pytest.fixture(scope="module")
def nexmark(spark, tmp_path_factory):
    """An embedded client with the Nexmark generator's settings, the pipelines' module, and
    DuckDB holding the bids of windows W0..W0+2."""
    import os

    import duckdb

    sys.path.insert(0, str(ROOT / "tests" / "engine" / "runtime"))
    from reference import W0, nexmark_events

    bids = nexmark_events("bid", W0, W0 + 2, events_per_second=EPS, seed=SEED)
    bids["ts"], bids["p_time"] = bids["ts_us"], bids["nominal_us"]
    frame = bids.drop(columns=["n", "nominal_us", "ts_us", "cycle"])  # noqa: F841 - read by DuckDB by name
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE bid AS SELECT * FROM frame")
    home = tmp_path_factory.mktemp("sql_bounds")
    module = home / "pipelines.py"
    module.write_text(textwrap.dedent(MODULE))
    env = {"NEXMARK_EVENTS_PER_SECOND": str(EPS), "NEXMARK_SEED": str(SEED)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with lg.connect("embedded", home=str(home / "home")) as client:
            yield client, con, str(module), W0
    finally:
        con.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize(("name", "job"), [("q7_where", "nexmark_sql_q7_where"), ("q12", "nexmark_sql_q12")])
def test_the_published_form_gives_duckdbs_rows(nexmark, name, job):
    """q7 with its bound in WHERE, and q12 in SQL (windows on the arrival column), over three
    windows of bids: row for row what DuckDB gives for the published SQL."""
    from reference import read_sink, rows

    client, con, module, w0 = nexmark
    run = client.run(f"{module}:{name}", first=w0, last=w0 + 2)
    assert run.state == "FINISHED" and run.windows_run == 3
    want = con.execute(DUCK[name]).df()
    got = read_sink(client, job, "out")
    assert len(want) > 0, "the reference is empty: the data does not exercise the query"
    assert rows(got, want.columns) == rows(want, want.columns)
