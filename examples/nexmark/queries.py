"""The Nexmark queries (q0 to q22 of the nexmark/nexmark repository's Flink SQL) as Lockgate
pipelines, each beside the SQL it implements.

Every query reads the three Nexmark streams from one seeded generator (so bids refer to real
auctions and people) and writes its result to a collect sink named ``out``. Run one::

    lockgate run examples/nexmark/queries.py:q5 --from 2026-01-01T00:00:00 --to 2026-01-01T00:01:00
    python -c "import lockgate as lg; print(lg.connect().read_sink('nexmark_q5', 'out'))"

``NEXMARK_EVENTS_PER_SECOND`` and ``NEXMARK_SEED`` set the generator; ``NEXMARK_SIDE_INPUT``
is q13's side-input table (Parquet files with ``key BIGINT, value STRING``).

Not here (see the README's Nexmark table): q6 takes an OVER window over an updating result
(refused at compile time, as Flink SQL refuses it). q12 windows on processing time defined as
each event's arrival time (``NexmarkSource(arrival=...)``), so a replay counts the same. The updating results of q4, q9, q15 to q19 are running
aggregates: each round emits the keys it touched with their current value; q4 aggregates one
again, taking back each auction's old maximum when a new one comes.
"""

from __future__ import annotations

import os
from datetime import timedelta

import lockgate as lg

START = "2026-01-01T00:00:00"
#: a join of the whole history is a join whose records are kept this long (no Nexmark run here
#: spans a day; Flink keeps them forever)
HISTORY = timedelta(days=1)
CYCLE = timedelta(seconds=10)


def _pipeline(name: str) -> lg.Pipeline:
    return lg.Pipeline(f"nexmark_{name}", cycle_window=CYCLE, parallelism=2)


def _source(p: lg.Pipeline, stream: str) -> lg.Stream:
    eps = int(os.environ.get("NEXMARK_EVENTS_PER_SECOND", "1000"))
    seed = int(os.environ.get("NEXMARK_SEED", "42"))
    return p.source(lg.NexmarkSource(stream, events_per_second=eps, seed=seed, start=START), name=f"{stream}s")


def _out(stream: lg.Stream) -> None:
    stream.sink(lg.CollectSink("out"), name="out")


def q0() -> lg.Pipeline:
    """Pass-through: ``SELECT auction, bidder, price, dateTime, extra FROM bid``."""
    p = _pipeline("q0")
    _out(_source(p, "bid").select("auction", "bidder", "price", "date_time", "extra"))
    return p


def q1() -> lg.Pipeline:
    """Currency conversion: ``SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid``."""
    p = _pipeline("q1")
    _out(_source(p, "bid").select("auction", "bidder", "0.908 * price AS price", "date_time", "extra"))
    return p


def q2() -> lg.Pipeline:
    """Selection: ``SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0``."""
    p = _pipeline("q2")
    _out(_source(p, "bid").filter("auction % 123 = 0").select("auction", "price"))
    return p


def q3() -> lg.Pipeline:
    """Local item suggestion::

        SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P
        ON A.seller = P.id WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')
    """
    p = _pipeline("q3")
    auctions = _source(p, "auction").filter("category = 10", name="category10")
    persons = _source(p, "person").filter("state IN ('OR', 'ID', 'CA')", name="states")
    joined = auctions.join(persons, left_on=["seller"], right_on=["id"], ttl=HISTORY, name="seller")
    _out(joined.select("name", "city", "state", "id"))
    return p


def _bids_in_auction(p: lg.Pipeline) -> lg.Stream:
    """``FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires``."""
    bids, auctions = _source(p, "bid"), _source(p, "auction")
    return (bids.join(auctions, left_on=["auction"], right_on=["id"], between=(timedelta(0), HISTORY),
                      name="in_auction")
            .filter("date_time <= expires", name="before_expiry"))


def q4() -> lg.Pipeline:
    """Average price for each category (of the auctions' final, i.e. highest, bids)::

        SELECT Q.category, AVG(Q.final)
        FROM (SELECT MAX(B.price) AS final, A.category
              FROM auction A, bid B
              WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
              GROUP BY A.id, A.category) Q
        GROUP BY Q.category

    The inner ``MAX`` is an updating result (an auction's final price rises as bids come); the
    outer aggregate over it takes back an auction's old maximum before adding its new one.
    """
    p = _pipeline("q4")
    final = _bids_in_auction(p).key_by("id", "category").aggregate(final=lg.max("price"), name="final")
    _out(final.key_by("category").aggregate(avg_final=lg.avg("final"), name="per_category"))
    return p


def q6() -> lg.Pipeline:
    """Average selling price by seller (an OVER window over winning bids)::

        SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.dateTime
                                            ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
        FROM (SELECT MAX(B.price) AS final, A.seller, B.dateTime
              FROM auction AS A, bid AS B
              WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
              GROUP BY A.id, A.seller) AS Q

    Written as it reads, and refused when compiled: an OVER window takes every row of its
    input as a new record, and ``Q`` replaces an auction's row as its final price rises (Flink
    SQL refuses it too: its OVER operator cannot consume retractions). The error names the
    operator and what to do instead.
    """
    p = _pipeline("q6")
    final = _bids_in_auction(p).key_by("id", "seller").aggregate(final=lg.max("price"), name="final")
    _out(final.key_by("seller").over(10, avg_final=lg.avg("final"), name="last_ten"))
    return p


def q5() -> lg.Pipeline:
    """Hot items: the auctions with the most bids in each 10 s window sliding by 2 s::

        SELECT AuctionBids.auction, AuctionBids.num FROM (
          SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
          FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
          GROUP BY auction, window_start, window_end) AS AuctionBids
        JOIN (SELECT max(num) AS maxn, starttime, endtime FROM (...the same...) GROUP BY starttime, endtime)
          AS MaxBids
        ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
          AND AuctionBids.num >= MaxBids.maxn
    """
    p = _pipeline("q5")
    counts = (_source(p, "bid").key_by("auction").window(lg.Sliding(timedelta(seconds=10), timedelta(seconds=2)))
              .aggregate(num=lg.count(), name="auction_bids"))
    # each sliding window's counts arrive at its end: a 2 s tumbling window over them is that window
    maxes = counts.window(lg.Tumbling(timedelta(seconds=2))).aggregate(maxn=lg.max("num"), name="max_bids")
    joined = counts.join(maxes, on="window_end", window=lg.Tumbling(timedelta(seconds=2)), name="hot")
    _out(joined.filter("num >= maxn").select("auction", "num", "window_start_left AS starttime",
                                             "window_end_left AS endtime"))
    return p


def q7() -> lg.Pipeline:
    """Highest bid of each 10 s window::

        SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra FROM bid B
        JOIN (SELECT MAX(price) AS maxprice, window_end AS dateTime
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
              GROUP BY window_start, window_end) B1
        ON B.price = B1.maxprice WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime
    """
    p = _pipeline("q7")
    bids = _source(p, "bid")
    maxes = bids.window(lg.Tumbling(timedelta(seconds=10))).aggregate(maxprice=lg.max("price"), name="max_price")
    joined = bids.join(maxes, left_on=["price"], right_on=["maxprice"], window=lg.Tumbling(timedelta(seconds=10)),
                       name="highest")
    _out(joined.select("auction", "price", "bidder", "date_time", "extra"))
    return p


def q8() -> lg.Pipeline:
    """New users who opened an auction in the 10 s window they registered in::

        SELECT P.id, P.name, P.starttime FROM (
          SELECT id, name, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY id, name, window_start, window_end) P
        JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY seller, window_start, window_end) A
        ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
    """
    p = _pipeline("q8")
    size = lg.Tumbling(timedelta(seconds=10))
    persons = _source(p, "person").key_by("id", "name").window(size).aggregate(n=lg.count(), name="people")
    sellers = _source(p, "auction").key_by("seller").window(size).aggregate(k=lg.count(), name="sellers")
    joined = persons.join(sellers, left_on=["id"], right_on=["seller"], window=size, name="new_sellers")
    _out(joined.select("id", "name", "window_start AS starttime"))
    return p


def q9() -> lg.Pipeline:
    """Winning bids: the highest bid of each auction within its lifetime (earliest on a tie)::

        SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
          auction, bidder, price, bid_dateTime, bid_extra
        FROM (SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
                ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
              FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
        WHERE rownum <= 1

    An updating result in Flink: here a running aggregate, each round emitting the auctions it
    touched with their winning bid so far (the latest row per auction is Flink's current result).
    """
    p = _pipeline("q9")
    bids, auctions = _source(p, "bid"), _source(p, "auction")
    joined = (bids.join(auctions, left_on=["auction"], right_on=["id"], between=(timedelta(0), HISTORY),
                        name="in_auction")
              .filter("date_time <= expires", name="before_expiry")
              .with_column("earliest", "-unix_micros(date_time)"))  # DESC on it: earliest first
    auction_columns = ["id", "item_name", "description", "initial_bid", "reserve", "date_time_right", "expires",
                       "seller", "category", "extra_right"]
    best = joined.key_by(*auction_columns).aggregate(
        win=lg.top_k(1, by=["price", "earliest"], columns=["bidder", "date_time", "extra"]), name="winning")
    _out(best.select(
        "id", "item_name", "description", "initial_bid", "reserve", "date_time_right AS date_time", "expires",
        "seller", "category", "extra_right AS extra", "id AS auction", "win[0].bidder AS bidder",
        "win[0].price AS price", "win[0].date_time AS bid_date_time", "win[0].extra AS bid_extra", "as_of"))
    return p


def q10() -> lg.Pipeline:
    """Log to a file system, by day and minute::

        SELECT auction, bidder, price, dateTime, extra, DATE_FORMAT(dateTime, 'yyyy-MM-dd'),
          DATE_FORMAT(dateTime, 'HH:mm') FROM bid
    """
    p = _pipeline("q10")
    _out(_source(p, "bid").select("auction", "bidder", "price", "date_time", "extra",
                                  "date_format(date_time, 'yyyy-MM-dd') AS dt",
                                  "date_format(date_time, 'HH:mm') AS hm"))
    return p


def q11() -> lg.Pipeline:
    """User sessions: bids per bidder per session of 10 s inactivity::

        SELECT B.bidder, count(*) AS bid_count, SESSION_START(B.dateTime, INTERVAL '10' SECOND) AS starttime,
          SESSION_END(B.dateTime, INTERVAL '10' SECOND) AS endtime
        FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)
    """
    p = _pipeline("q11")
    sessions = (_source(p, "bid").key_by("bidder").window(lg.Session(timedelta(seconds=10)))
                .aggregate(bid_count=lg.count(), name="sessions"))
    _out(sessions.select("bidder", "bid_count", "window_start AS starttime", "window_end AS endtime"))
    return p


def q12() -> lg.Pipeline:
    """Bids per bidder in 10 s windows of processing time::

        SELECT B.bidder, count(*) AS bid_count, TUMBLE_START(B.p_time, INTERVAL '10' SECOND) AS starttime,
          TUMBLE_END(B.p_time, INTERVAL '10' SECOND) AS endtime
        FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
        GROUP BY B.bidder, TUMBLE(B.p_time, INTERVAL '10' SECOND)

    ``PROCTIME()`` is the wall clock, which a replay would not reproduce (and Lockgate refuses):
    here ``p_time`` is each bid's arrival time, the instant the generator emits it
    (``NexmarkSource(arrival="p_time")``), the same on every replay. With events out of order
    (``NEXMARK_OUT_OF_ORDER`` seconds), the watermark allows that lateness, so no bid is late.
    """
    late = float(os.environ.get("NEXMARK_OUT_OF_ORDER", "0"))
    p = lg.Pipeline("nexmark_q12", cycle_window=CYCLE, parallelism=2,
                    watermark=lg.Watermark(lateness=timedelta(seconds=late)))
    eps, seed = int(os.environ.get("NEXMARK_EVENTS_PER_SECOND", "1000")), int(os.environ.get("NEXMARK_SEED", "42"))
    bids = p.source(lg.NexmarkSource("bid", events_per_second=eps, seed=seed, start=START, out_of_order=late,
                                     arrival="p_time"), name="bids")
    counts = bids.key_by("bidder").window(lg.Tumbling(timedelta(seconds=10), on="p_time")).aggregate(
        bid_count=lg.count(), name="per_bidder")
    _out(counts.select("bidder", "bid_count", "window_start AS starttime", "window_end AS endtime"))
    return p


def q13() -> lg.Pipeline:
    """Bounded side input join::

        SELECT B.auction, B.bidder, B.price, B.dateTime, S.value
        FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
        JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S ON mod(B.auction, 10000) = S.key

    The side input is read whole every round (``FOR SYSTEM_TIME AS OF`` the round).
    """
    p = _pipeline("q13")
    table = lg.FileTable(os.environ.get("NEXMARK_SIDE_INPUT", "side_input"))
    bids = _source(p, "bid").with_column("key", "auction % 10000")
    _out(bids.lookup(table, on="key", name="side").select("auction", "bidder", "price", "date_time", "value"))
    return p


def q14() -> lg.Pipeline:
    """Calculation: a time-of-day class and a character count (a UDF in Flink, SQL here)::

        SELECT auction, bidder, 0.908 * price AS price,
          CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
               WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime'
               ELSE 'otherTime' END AS bidTimeType,
          dateTime, extra, count_char(extra, 'c') AS c_counts
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
    """
    p = _pipeline("q14")
    _out(_source(p, "bid").filter("0.908 * price > 1000000 AND 0.908 * price < 50000000").select(
        "auction", "bidder", "0.908 * price AS price",
        "CASE WHEN hour(date_time) >= 8 AND hour(date_time) <= 18 THEN 'dayTime' "
        "WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime' ELSE 'otherTime' END AS bidTimeType",
        "date_time", "extra", "length(extra) - length(replace(extra, 'c', '')) AS c_counts"))
    return p


def _ranked(bids: lg.Stream) -> lg.Stream:
    """The columns q15 to q17 count: the day, and each bid's bidder and auction per price rank."""
    out = bids.with_column("day", "date_format(date_time, 'yyyy-MM-dd')")
    ranks = {"rank1": "price < 10000", "rank2": "price >= 10000 AND price < 1000000", "rank3": "price >= 1000000"}
    for name, cond in ranks.items():
        out = out.with_column(f"{name}_bid", f"CASE WHEN {cond} THEN 1 END")
        out = out.with_column(f"{name}_bidder", f"CASE WHEN {cond} THEN bidder END")
        out = out.with_column(f"{name}_auction", f"CASE WHEN {cond} THEN auction END")
    return out


def _report(by: list[str], **extra: lg.Aggregate) -> dict[str, lg.Aggregate]:
    aggs: dict[str, lg.Aggregate] = {"total_bids": lg.count()}
    for r in ("rank1", "rank2", "rank3"):
        aggs[f"{r}_bids"] = lg.count(f"{r}_bid")
    if "auction" not in by:
        aggs["total_bidders"] = lg.count_distinct("bidder")
        for r in ("rank1", "rank2", "rank3"):
            aggs[f"{r}_bidders"] = lg.count_distinct(f"{r}_bidder")
        aggs["total_auctions"] = lg.count_distinct("auction")
        for r in ("rank1", "rank2", "rank3"):
            aggs[f"{r}_auctions"] = lg.count_distinct(f"{r}_auction")
    return {**aggs, **extra}


def q15() -> lg.Pipeline:
    """Bidding statistics per day: bids, bidders and auctions, in all and per price rank::

        SELECT DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids,
          count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., count(DISTINCT bidder) AS total_bidders,
          count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, ..., count(DISTINCT auction) ...
        FROM bid GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')

    An updating result in Flink: here a running aggregate, each round emitting the days it
    touched with their totals so far (the latest row per day is Flink's current result).
    """
    p = _pipeline("q15")
    _out(_ranked(_source(p, "bid")).key_by("day").aggregate(name="per_day", **_report(["day"])))
    return p


def q16() -> lg.Pipeline:
    """Channel statistics per day: q15 per ``channel`` too (``GROUP BY channel, day``), with the
    minute of the day's last bid (``max(DATE_FORMAT(dateTime, 'HH:mm'))``)."""
    p = _pipeline("q16")
    bids = _ranked(_source(p, "bid")).with_column("minute", "date_format(date_time, 'HH:mm')")
    _out(bids.key_by("channel", "day").aggregate(name="per_channel", **_report(["channel", "day"],
                                                                             minute=lg.max("minute"))))
    return p


def q17() -> lg.Pipeline:
    """Auction statistics per day::

        SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids,
          count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., min(price) AS min_price,
          max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
        FROM bid GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')
    """
    p = _pipeline("q17")
    _out(_ranked(_source(p, "bid")).key_by("auction", "day").aggregate(
        name="per_auction", **_report(["auction", "day"], min_price=lg.min("price"), max_price=lg.max("price"),
                                      avg_price=lg.avg("price"), sum_price=lg.sum("price"))))
    return p


def q18() -> lg.Pipeline:
    """The last bid of each bidder on each auction::

        SELECT auction, bidder, price, channel, url, dateTime, extra FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number
          FROM bid) WHERE rank_number <= 1

    Updating in Flink; here a running aggregate of ``top_k(1, by="date_time")`` (a tie on the time
    goes to the larger price, then channel, url, extra), latest row per key = Flink's result.
    """
    p = _pipeline("q18")
    last = _source(p, "bid").key_by("bidder", "auction").aggregate(
        last=lg.top_k(1, by="date_time", columns=["price", "channel", "url", "extra"]), name="last_bid")
    _out(last.select("auction", "bidder", "last[0].price AS price", "last[0].channel AS channel",
                     "last[0].url AS url", "last[0].date_time AS date_time", "last[0].extra AS extra", "as_of"))
    return p


def q19() -> lg.Pipeline:
    """The ten highest bids of each auction::

        SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
                       FROM bid) WHERE rank_number <= 10

    Updating in Flink; here a running aggregate of ``top_k(10, by="price")`` (ties go to the larger
    bidder, channel, url, time, extra), each round emitting the touched auctions' ten rows.
    """
    p = _pipeline("q19")
    top = _source(p, "bid").key_by("auction").aggregate(
        top=lg.top_k(10, by="price", columns=["bidder", "channel", "url", "date_time", "extra"]), name="top10")
    rows = top.select("auction", "as_of", "posexplode(top) AS (pos, t)", name="rows")
    _out(rows.select("auction", "t.bidder AS bidder", "t.price AS price", "t.channel AS channel", "t.url AS url",
                     "t.date_time AS date_time", "t.extra AS extra", "pos + 1 AS rank_number", "as_of"))
    return p


def q20() -> lg.Pipeline:
    """Expand bids with their auction, of category 10::

        SELECT auction, bidder, price, channel, url, B.dateTime, B.extra, itemName, description,
          initialBid, reserve, A.dateTime, expires, seller, category, A.extra
        FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10
    """
    p = _pipeline("q20")
    auctions = _source(p, "auction").filter("category = 10", name="category10")
    joined = _source(p, "bid").join(auctions, left_on=["auction"], right_on=["id"], ttl=HISTORY, name="expand")
    _out(joined.select("auction", "bidder", "price", "channel", "url", "date_time", "extra", "item_name",
                       "description", "initial_bid", "reserve", "date_time_right AS auction_date_time",
                       "expires", "seller", "category", "extra_right AS auction_extra"))
    return p


def q21() -> lg.Pipeline:
    """A channel id from the channel's name or the URL::

        SELECT auction, bidder, price, channel,
          CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
               WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
               ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id
        FROM bid WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
          OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')

    Spark's ``regexp_extract`` gives '' where Flink's gives NULL: ``nullif`` restores NULL.
    """
    p = _pipeline("q21")
    extract = "nullif(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '')"
    _out(_source(p, "bid").filter(
        f"{extract} IS NOT NULL OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')").select(
        "auction", "bidder", "price", "channel",
        "CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' "
        "WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3' "
        f"ELSE {extract} END AS channel_id"))
    return p


def q22() -> lg.Pipeline:
    """URL directories::

        SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1,
          SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid
    """
    p = _pipeline("q22")
    _out(_source(p, "bid").select("auction", "bidder", "price", "channel",
                                  "try_element_at(split(url, '/'), 4) AS dir1",
                                  "try_element_at(split(url, '/'), 5) AS dir2",
                                  "try_element_at(split(url, '/'), 6) AS dir3"))
    return p


QUERIES = {f.__name__: f for f in (q0, q1, q2, q3, q4, q5, q7, q8, q9, q10, q11, q12, q13, q14, q15, q16, q17, q18, q19, q20,
                                   q21, q22)}
