"""Nexmark queries written with ``Pipeline.sql``: Spark SQL over the pipeline's named streams,
compiled to the same operators as ``queries.py`` builds in Python. Each reads close to the
published Flink SQL; the differences are Spark's spelling (``window(...)`` and
``session_window(...)`` in ``GROUP BY``, ``window.start`` for ``TUMBLE_START``).

    lockgate run examples/nexmark/sql_queries.py:q11 --from 2026-01-01T00:00:00 --to 2026-01-01T00:01:00

Not written in SQL yet: the joins (``Pipeline.sql`` reads one stream; ``queries.py`` joins with
``Stream.join``), top-N (``ROW_NUMBER() ... <= N``) and OVER windows.
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


QUERIES = {f.__name__: f for f in (q0, q1, q2, q11, q_bids_per_auction, q_bidder_totals)}
