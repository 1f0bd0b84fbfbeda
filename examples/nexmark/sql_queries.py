"""Nexmark queries written with ``Pipeline.sql``: Spark SQL over the pipeline's named streams,
compiled to the same operators as ``queries.py`` builds in Python. Each reads close to the
published Flink SQL; the differences are Spark's spelling (``window(...)`` and
``session_window(...)`` in ``GROUP BY``, ``window.start`` for ``TUMBLE_START``).

    lockgate run examples/nexmark/sql_queries.py:q11 --from 2026-01-01T00:00:00 --to 2026-01-01T00:01:00

Where the SQL differs from the published one: a stream join is bounded in event time (an
``INTERVAL`` either way), an inner query keeps the key of its rows (q4's ``A.id``), an
unbounded top-N orders every column one way (q9's ``-unix_micros(B.date_time) AS earliest``).
Not in SQL: q13's lookup join (``Stream.lookup``), and OVER aggregates (``Stream.over``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lockgate as lg

sys.path.insert(0, str(Path(__file__).resolve().parent))  # queries.py, beside this file
from queries import _pipeline, _source


def _sql(name: str, query: str, *streams: str) -> lg.Pipeline:
    p = _pipeline(f"sql_{name}")
    for stream in streams or ("bid",):
        _source(p, stream)
    p.sql(query, name=name).sink(lg.CollectSink("out"), name="out")
    return p


def q0() -> lg.Pipeline:
    """Pass-through."""
    return _sql("q0", "SELECT auction, bidder, price, date_time, extra FROM bids")


def q1() -> lg.Pipeline:
    """Currency conversion."""
    return _sql("q1", "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bids")


def q2() -> lg.Pipeline:
    """Selection."""
    return _sql("q2", "SELECT auction, price FROM bids WHERE auction % 123 = 0")


def q11() -> lg.Pipeline:
    """User sessions (Flink: ``GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)``)."""
    return _sql("q11", """
        SELECT bidder, count(*) AS bid_count, session_window.start AS starttime, session_window.end AS endtime
        FROM bids
        GROUP BY bidder, session_window(date_time, '10 seconds')""")


def q3() -> lg.Pipeline:
    """Local item suggestion: an interval join of auctions and their sellers (a day either way:
    Flink keeps both sides forever, a stream join here is bounded in event time)."""
    return _sql("q3", """
        SELECT P.name, P.city, P.state, A.id
        FROM auctions A JOIN persons P ON A.seller = P.id
          AND P.date_time BETWEEN A.date_time - INTERVAL '1' DAY AND A.date_time + INTERVAL '1' DAY
        WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')""", "auction", "person")


def q4() -> lg.Pipeline:
    """Average final price per category: an aggregate (over the updating result) of an
    aggregate (each auction's highest bid so far) of a join. The inner query keeps ``A.id``, the
    key of its rows; ``B.dateTime <= A.expires`` is a filter of the joined pairs."""
    return _sql("q4", """
        SELECT Q.category, avg(Q.final) AS avg_final
        FROM (SELECT A.id, A.category, max(B.price) AS final
              FROM auctions A, bids B
              WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                AND B.date_time <= A.date_time + INTERVAL '1' DAY
              GROUP BY A.id, A.category) Q
        GROUP BY Q.category""", "auction", "bid")


def q5() -> lg.Pipeline:
    """Hot items: per sliding window, the auctions with the most bids (a window join of two
    windowed aggregates on their window columns)."""
    counts = """SELECT auction, count(*) AS num, window.start AS starttime, window.end AS endtime
                FROM bids GROUP BY auction, window(date_time, '10 seconds', '2 seconds')"""
    return _sql("q5", f"""
        SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime, AuctionBids.endtime
        FROM ({counts}) AuctionBids
        JOIN (SELECT max(C.num) AS maxn, C.starttime, C.endtime FROM ({counts}) C
              GROUP BY C.starttime, C.endtime) MaxBids
        ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
          AND AuctionBids.num >= MaxBids.maxn""")


def q7() -> lg.Pipeline:
    """Highest bid of each 10 s window: the window's maximum joined back to its bids."""
    return _sql("q7", """
        SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
        FROM bids B
        JOIN (SELECT max(price) AS maxprice, window.end AS date_time FROM bids
              GROUP BY window(date_time, '10 seconds')) B1
        ON B.price = B1.maxprice
          AND B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time""")


def q8() -> lg.Pipeline:
    """New users who opened an auction in the 10 s window they registered in."""
    return _sql("q8", """
        SELECT P.id, P.name, P.starttime
        FROM (SELECT id, name, window.start AS starttime, window.end AS endtime FROM persons
              GROUP BY id, name, window(date_time, '10 seconds')) P
        JOIN (SELECT seller, window.start AS starttime, window.end AS endtime FROM auctions
              GROUP BY seller, window(date_time, '10 seconds')) A
        ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""", "person", "auction")


def q9() -> lg.Pipeline:
    """Winning bids: the highest bid of each auction in its lifetime, earliest first on a tie
    (``-unix_micros(B.date_time)`` descending: an unbounded top-N orders every column one way)."""
    return _sql("q9", """
        SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra,
          auction, bidder, price, bid_date_time, bid_extra
        FROM (SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, A.expires,
                A.seller, A.category, A.extra, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
                B.extra AS bid_extra, -unix_micros(B.date_time) AS earliest,
                ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, earliest DESC) AS rownum
              FROM auctions A, bids B
              WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                AND B.date_time <= A.date_time + INTERVAL '1' DAY)
        WHERE rownum <= 1""", "auction", "bid")


def q18() -> lg.Pipeline:
    """The last bid of each bidder on each auction (an unbounded top-1 per key)."""
    return _sql("q18", """
        SELECT auction, bidder, price, channel, url, date_time, extra FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
          FROM bids)
        WHERE rank_number <= 1""")


def q19() -> lg.Pipeline:
    """The ten highest bids of each auction (an unbounded top-10 per key)."""
    return _sql("q19", """
        SELECT * FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bids)
        WHERE rank_number <= 10""")


def q20() -> lg.Pipeline:
    """Bids expanded with their auction, of category 10."""
    return _sql("q20", """
        SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra, A.item_name, A.description,
          A.initial_bid, A.reserve, A.date_time AS auction_date_time, A.expires, A.seller, A.category,
          A.extra AS auction_extra
        FROM bids AS B INNER JOIN auctions AS A ON B.auction = A.id
          AND B.date_time BETWEEN A.date_time - INTERVAL '1' DAY AND A.date_time + INTERVAL '1' DAY
        WHERE A.category = 10""", "bid", "auction")


def q_top_bids_per_window() -> lg.Pipeline:
    """The three highest bids of each auction in each 10 s window (a windowed top-N: final when
    the window closes, its state three rows per auction and window)."""
    return _sql("q_top_bids_per_window", """
        SELECT auction, bidder, price, window_start, rn FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY auction, window(date_time, '10 seconds')
                                       ORDER BY price DESC, date_time ASC) AS rn FROM bids)
        WHERE rn <= 3""")


def q_bids_per_auction() -> lg.Pipeline:
    """Bid count and highest price per auction in 10 s tumbling windows (q5 and q7's first step)."""
    return _sql("q_bids_per_auction", """
        SELECT auction, window.start AS starttime, window.end AS endtime, count(*) AS num, max(price) AS top
        FROM bids
        GROUP BY auction, window(date_time, '10 seconds')""")


def q_bidder_totals() -> lg.Pipeline:
    """A running aggregate (an updating result): bids and spend per bidder so far."""
    return _sql("q_bidder_totals", """
        SELECT bidder, count(*) AS bids, sum(price) AS spent, avg(price / 100) AS mean_dollars
        FROM bids WHERE price > 0
        GROUP BY bidder""")


def q_top_auctions_per_window() -> lg.Pipeline:
    """The three auctions with the most bids in each 10 s window (Flink's window top-N: ROW_NUMBER()
    partitioned by a windowed result's window columns)."""
    return _sql("q_top_auctions_per_window", """
        SELECT auction, num, starttime, rn FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY starttime ORDER BY num DESC) AS rn FROM (
            SELECT auction, count(*) AS num, window.start AS starttime, window.end AS endtime
            FROM bids GROUP BY auction, window(date_time, '10 seconds')) q)
        WHERE rn <= 3""")


QUERIES = {f.__name__: f for f in (q0, q1, q2, q3, q4, q5, q7, q8, q9, q11, q18, q19, q20, q_bids_per_auction,
                                   q_bidder_totals, q_top_bids_per_window, q_top_auctions_per_window)}
