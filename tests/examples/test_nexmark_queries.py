"""The Nexmark queries of ``examples/nexmark/queries.py``, run through the embedded client
over one minute of events, each checked against DuckDB running the query's published SQL
(adapted to DuckDB's dialect) over the very same events: an engine that shares nothing with
Spark or Lockgate.

Windowed results are compared for the windows the last cycle's watermark has closed; the
running aggregates of q15 to q17 by their latest row per key (Flink's current result)."""

from __future__ import annotations

import math
import os
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT / "tests" / "engine" / "runtime", ROOT / "examples" / "nexmark"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
import queries  # noqa: E402
import sql_queries  # noqa: E402
from reference import W0, read_sink  # noqa: E402

EPS, SEED = 200, 42
LAST = W0 + 5
END_US = (LAST + 1) * 10_000_000
QUERIES = str(ROOT / "examples" / "nexmark" / "queries.py")

#: DuckDB over tables bid, auction, person (``ts``: event time in µs) and side_input
SQL: dict[str, str] = {
    "q0": "SELECT auction, bidder, price, ts AS date_time, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, ts AS date_time, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q3": """SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
             WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')""",
    "q4": """SELECT Q.category, avg(Q.final) AS avg_final FROM (
               SELECT max(B.price) AS final, A.category FROM auction A, bid B
               WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires GROUP BY A.id, A.category) Q
             GROUP BY Q.category""",
    "q5": """WITH hop AS (SELECT auction, (ts // 2000000) * 2000000 - k * 2000000 AS starttime
                          FROM bid, range(5) t(k)),
             counts AS (SELECT auction, starttime, starttime + 10000000 AS endtime, count(*) AS num
                        FROM hop GROUP BY auction, starttime),
             maxes AS (SELECT starttime, max(num) AS maxn FROM counts GROUP BY starttime)
             SELECT c.auction, c.num, c.starttime, c.endtime FROM counts c JOIN maxes m USING (starttime)
             WHERE c.num >= m.maxn AND c.endtime <= {end}""",
    "q7": """WITH m AS (SELECT (ts // 10000000) * 10000000 + 10000000 AS wend, max(price) AS maxprice
                        FROM bid GROUP BY 1)
             SELECT b.auction, b.price, b.bidder, b.ts AS date_time, b.extra FROM bid b
             JOIN m ON b.price = m.maxprice WHERE b.ts BETWEEN m.wend - 10000000 AND m.wend""",
    "q8": """WITH p AS (SELECT DISTINCT id, name, ts // 10000000 AS w FROM person),
                  a AS (SELECT DISTINCT seller, ts // 10000000 AS w FROM auction)
             SELECT p.id, p.name, p.w * 10000000 AS starttime FROM p JOIN a ON p.id = a.seller AND p.w = a.w""",
    "q9": """SELECT id, item_name, description, initial_bid, reserve, a_ts AS date_time, expires, seller, category,
              extra, auction, bidder, price, ts AS bid_date_time, bid_extra FROM (
                SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve, A.ts AS a_ts,
                  epoch_us(A.expires) AS expires, A.seller, A.category, A.extra, B.auction, B.bidder, B.price, B.ts,
                  B.extra AS bid_extra, row_number() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.ts ASC,
                  B.bidder DESC, B.extra DESC) AS rownum
                FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires)
              WHERE rownum <= 1""",
    "q18": """SELECT auction, bidder, price, channel, url, ts AS date_time, extra FROM (
               SELECT *, row_number() OVER (PARTITION BY bidder, auction ORDER BY ts DESC, price DESC, channel DESC,
                 url DESC, extra DESC) AS rank_number FROM bid) WHERE rank_number <= 1""",
    "q19": """SELECT auction, bidder, price, channel, url, ts AS date_time, extra, rank_number FROM (
               SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC, bidder DESC, channel DESC,
                 url DESC, ts DESC, extra DESC) AS rank_number FROM bid) WHERE rank_number <= 10""",
    "q10": """SELECT auction, bidder, price, ts AS date_time, extra, strftime(date_time, '%Y-%m-%d') AS dt,
              strftime(date_time, '%H:%M') AS hm FROM bid""",
    "q11": """WITH o AS (SELECT bidder, ts, CASE WHEN ts - lag(ts) OVER (PARTITION BY bidder ORDER BY ts) <= 10000000
                                          THEN 0 ELSE 1 END AS new FROM bid),
              s AS (SELECT bidder, ts, sum(new) OVER (PARTITION BY bidder ORDER BY ts ROWS UNBOUNDED PRECEDING)
                    AS sid FROM o)
              SELECT bidder, count(*) AS bid_count, min(ts) AS starttime, max(ts) + 10000000 AS endtime
              FROM s GROUP BY bidder, sid HAVING max(ts) + 10000000 < {end}""",
    "q12": """SELECT bidder, count(*) AS bid_count, (p_time // 10000000) * 10000000 AS starttime,
              (p_time // 10000000) * 10000000 + 10000000 AS endtime FROM bid GROUP BY 1, 3, 4""",
    "q13": """SELECT B.auction, B.bidder, B.price, B.ts AS date_time, S.value FROM bid B
              JOIN side_input S ON B.auction % 10000 = S.key""",
    "q14": """SELECT auction, bidder, 0.908 * price AS price,
              CASE WHEN hour(date_time) >= 8 AND hour(date_time) <= 18 THEN 'dayTime'
                   WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime'
                   ELSE 'otherTime' END AS bidTimeType,
              ts AS date_time, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts
              FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
    "q15": """SELECT strftime(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids,
              count(*) FILTER (WHERE price < 10000) AS rank1_bids,
              count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              count(DISTINCT bidder) AS total_bidders,
              count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
              count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
              count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
              count(DISTINCT auction) AS total_auctions,
              count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
              count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
              count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
              FROM bid GROUP BY 1""",
    "q17": """SELECT auction, strftime(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids,
              count(*) FILTER (WHERE price < 10000) AS rank1_bids,
              count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
              FROM bid GROUP BY 1, 2""",
    "q20": """SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.ts AS date_time, B.extra, A.item_name,
              A.description, A.initial_bid, A.reserve, A.ts AS auction_date_time, epoch_us(A.expires) AS expires,
              A.seller, A.category, A.extra AS auction_extra
              FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10""",
    "q21": """SELECT auction, bidder, price, channel,
              CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
                   WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
                   ELSE nullif(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') END AS channel_id
              FROM bid WHERE nullif(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') IS NOT NULL
                OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "q22": """SELECT auction, bidder, price, channel, string_split(url, '/')[4] AS dir1,
              string_split(url, '/')[5] AS dir2, string_split(url, '/')[6] AS dir3 FROM bid""",
}
SQL["q16"] = SQL["q15"].replace("SELECT strftime", "SELECT channel, strftime").replace(
    "AS total_bids,", "AS total_bids, max(strftime(date_time, '%H:%M')) AS minute,").replace("GROUP BY 1", "GROUP BY 1, 2")
#: DuckDB for the queries written with Pipeline.sql (examples/nexmark/sql_queries.py)
SQL_OF_SQL = {
    "q0": SQL["q0"], "q1": SQL["q1"], "q2": SQL["q2"], "q11": SQL["q11"],
    "q_bids_per_auction": """SELECT auction, (ts // 10000000) * 10000000 AS starttime,
                               (ts // 10000000) * 10000000 + 10000000 AS endtime, count(*) AS num, max(price) AS top
                             FROM bid GROUP BY 1, 2, 3""",
    "q_bidder_totals": """SELECT bidder, count(*) AS bids, sum(price) AS spent, avg(price / 100) AS mean_dollars
                          FROM bid WHERE price > 0 GROUP BY bidder""",
    **{q: SQL[q] for q in ("q3", "q4", "q5", "q7", "q8", "q9", "q18", "q19", "q20")},
    "q_top_bids_per_window": """SELECT auction, bidder, price, window_start, rn FROM (
                                  SELECT auction, bidder, price, (ts // 10000000) * 10000000 AS window_start,
                                    row_number() OVER (PARTITION BY auction, ts // 10000000 ORDER BY price DESC,
                                      ts ASC, bidder, channel, url, extra) AS rn FROM bid) WHERE rn <= 3""",
    "q_top_auctions_per_window": """SELECT auction, num, starttime, rn FROM (
                                      SELECT auction, num, starttime, row_number() OVER (PARTITION BY starttime
                                        ORDER BY num DESC, auction) AS rn FROM (
                                        SELECT auction, count(*) AS num, (ts // 10000000) * 10000000 AS starttime
                                        FROM bid GROUP BY 1, 3)) WHERE rn <= 3""",
}
#: the running aggregates: compared by their latest row per key
RUNNING = {"q4": ["category"], "q9": ["id"], "q15": ["day"], "q16": ["channel", "day"], "q17": ["auction", "day"],
           "q18": ["bidder", "auction"], "q19": ["auction"]}


def _events(stream: str) -> pd.DataFrame:
    from reference import nexmark_events

    df = nexmark_events(stream, W0, LAST, events_per_second=EPS, seed=SEED)
    df["ts"] = df["ts_us"]
    df["p_time"] = df["nominal_us"]  # arrival: q12's processing time
    return df.drop(columns=["n", "nominal_us", "ts_us", "cycle"])


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    side = tmp_path_factory.mktemp("side_input")
    keys = list(range(0, 10000, 3))
    pq.write_table(pa.table({"key": pa.array(keys, pa.int64()), "value": [f"side-{k}" for k in keys]}),
                   side / "part-0.parquet")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in ("bid", "auction", "person"):
        frame = _events(name)  # noqa: F841 - read by DuckDB by name
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
    con.execute(f"CREATE TABLE side_input AS SELECT * FROM read_parquet('{side}/*.parquet')")
    yield con, side
    con.close()


@pytest.fixture(scope="module")
def client(spark, tmp_path_factory, duck):
    _, side = duck
    env = {"NEXMARK_EVENTS_PER_SECOND": str(EPS), "NEXMARK_SEED": str(SEED), "NEXMARK_SIDE_INPUT": str(side)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with lg.connect("embedded", home=str(tmp_path_factory.mktemp("nexmark") / "home")) as c:
            yield c
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _norm(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def _rows(df: pd.DataFrame, cols: list[str]) -> list[tuple]:
    rows = [tuple(_norm(v) for v in r) for r in df[cols].itertuples(index=False)]
    return sorted(rows, key=lambda r: tuple((x is None, str(type(x)), x if x is not None else 0) for x in r))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    return a == b


#: Python queries whose operators their SQL version runs the same way: run by ``make test-long``
SAME_AS_SQL = ("q4",)


@pytest.mark.parametrize("name", [pytest.param(q, marks=pytest.mark.long) if q in SAME_AS_SQL else q
                                  for q in sorted(queries.QUERIES, key=lambda q: int(q[1:]))])
def test_query_matches_duckdb(client, duck, name):
    _check(client, duck, QUERIES, name, f"nexmark_{name}", SQL[name], RUNNING.get(name))


#: SQL queries whose operators the Python version of the query runs the same way (their translation
#: is checked in tests/engine/api/test_sql.py): run by ``make test-long``
SAME_AS_PYTHON = ("q0", "q1", "q2", "q3", "q5", "q19", "q20", "q_bids_per_auction", "q_bidder_totals")


@pytest.mark.parametrize("name", [pytest.param(q, marks=pytest.mark.long) if q in SAME_AS_PYTHON else q
                                  for q in sql_queries.QUERIES])
def test_query_written_in_sql_matches_duckdb(client, duck, name):
    """The same queries written with Pipeline.sql: the same results as DuckDB over the same events."""
    running = {"q_bidder_totals": ["bidder"], **{q: RUNNING[q] for q in ("q4", "q9", "q18", "q19")}}.get(name)
    _check(client, duck, str(ROOT / "examples" / "nexmark" / "sql_queries.py"), name, f"nexmark_sql_{name}",
           SQL_OF_SQL[name], running)


def _check(client, duck, module: str, name: str, job: str, sql: str, running: list[str] | None) -> None:
    con, _ = duck
    run = client.run(f"{module}:{name}", first=W0, last=LAST)
    assert run.state == "FINISHED" and run.windows_run == LAST - W0 + 1
    want = con.execute(sql.format(end=END_US)).df()
    got = read_sink(client, job, "out")
    if running:  # an updating result: the rows of each key's latest round
        latest = got.groupby(running)["as_of"].transform("max")
        got = got[got["as_of"] == latest]
        if "op" in got.columns:  # an aggregate over updates: a key whose latest row deletes it is gone
            got = got[got["op"] != "-D"]
    cols = list(want.columns)
    missing = [c for c in cols if c not in got.columns]
    assert not missing, f"{name}: columns {missing} missing (has {list(got.columns)})"
    assert len(want) > 0, f"{name}: the reference is empty: the data does not exercise the query"
    a, e = _rows(got, cols), _rows(want, cols)
    assert len(a) == len(e), f"{name}: {len(a)} rows, expected {len(e)}"
    bad = [(x, y) for x, y in zip(a, e, strict=True) if not all(_same(p, q) for p, q in zip(x, y, strict=True))]
    assert not bad, f"{name}: {len(bad)} rows differ, e.g. got/expected {bad[:3]}"


def test_over_an_updating_result_q6_is_refused_naming_the_operator(spark):
    """q6 takes an OVER window over q4's kind of updating result (each auction's final price
    rises): refused when compiled, naming the OVER operator, as Flink SQL refuses it."""
    from lockgate.runtime.compiler import compile_pipeline

    with pytest.raises(lg.CompileError, match=r"over\(\) over an updating stream .*'final'") as err:
        compile_pipeline(queries.q6(), spark)
    assert err.value.operator == "last_ten"


def test_the_wall_clock_as_processing_time_is_refused(spark):
    """q12 as Flink writes it (``PROCTIME()``, the wall clock) is refused, as a replay would
    count differently; the error says what to use (the arrival column q12 windows on)."""
    from lockgate.runtime.compiler import compile_pipeline

    p = lg.Pipeline("nexmark_q12", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", events_per_second=EPS, seed=SEED), name="bids")
    (bids.with_column("p_time", "current_timestamp()", name="proctime").key_by("bidder")
     .window(lg.Tumbling(timedelta(seconds=10), on="p_time")).aggregate(bid_count=lg.count())
     .sink(lg.CollectSink("out")))
    with pytest.raises(lg.CompileError, match=r"current_timestamp\(\).*arrival"):
        compile_pipeline(p, spark)


def test_q12_windows_on_arrival_not_event_time(spark, tmp_path, monkeypatch):
    """With events out of order (event time up to 3 s behind arrival), q12's windows hold the
    bids that arrived in them: DuckDB's counts by arrival time, not by event time."""
    from reference import nexmark_events

    monkeypatch.setenv("NEXMARK_EVENTS_PER_SECOND", str(EPS))
    monkeypatch.setenv("NEXMARK_SEED", str(SEED))
    monkeypatch.setenv("NEXMARK_OUT_OF_ORDER", "3")
    with lg.connect("embedded", home=str(tmp_path / "home")) as c:
        run = c.run(f"{QUERIES}:q12", first=W0, last=W0 + 2)
        assert run.state == "FINISHED"
        got = read_sink(c, "nexmark_q12", "out")
    bids = nexmark_events("bid", W0, W0 + 2, events_per_second=EPS, seed=SEED, out_of_order=3.0)
    closed = (W0 + 3) * 10_000_000 - 3_000_000  # the watermark after the last window: end - lateness

    def counts(col: str) -> list[tuple]:
        w = (bids[col] // 10_000_000) * 10_000_000
        df = bids.assign(w=w)[w + 10_000_000 <= closed].groupby(["bidder", "w"]).size()
        return sorted((int(b), int(t), int(n)) for (b, t), n in df.items())

    mine = sorted(zip(got["bidder"].astype(int), got["starttime"].astype(int), got["bid_count"].astype(int),
                      strict=True))
    assert mine == counts("nominal_us")
    assert mine != counts("ts_us"), "the data put no bid in another window by event time: the check proves nothing"
