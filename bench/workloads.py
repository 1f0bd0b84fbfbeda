"""The workloads, each written once per contender API and meaning the same thing.

- ``w0`` stateless, Nexmark q1: every bid with its price in another currency.
- ``w1`` tumbling, near q7: 10 s tumbling windows, bid count and max(price) per auction.
- ``w2`` sliding, q5: 10 s windows every 2 s, bid count per auction, and the top auction of
  each window (highest count; ties go to the highest auction id, so the result is unique).
- ``w3`` windowed join, q8: persons joined to the auctions they sell (``person.id =
  auction.seller``) within the same 10 s tumbling window.
- ``w4`` q7: the highest bid(s) of each 10 s tumbling window: the window's max(price), joined
  back to the bids of that window with that price (a windowed aggregate, then a join).
- ``w5`` q9: each auction's winning bid: bids joined to their auction when ``auction.date_time
  <= bid.date_time <= auction.expires`` (and at most a day after the auction opened, the join's
  state bound in every contender), then the highest price per auction, the earliest bid on a
  tie (an interval join, then a running aggregate: an updating result).
- ``w6`` q18: the last bid of each bidder on each auction (a running aggregate: an updating
  result; a tie on the time goes to the larger price, then channel, url, extra).

Every contender's output is reduced to :attr:`Workload.columns` before comparison (Lockgate's
FileSink adds an ``lg_window`` partition column; Spark's ``window`` struct becomes
``window_start``/``window_end``). Windowed results are compared on the windows that close
before the end of the data (``window_end < end``): a streaming engine emits a window once its
watermark passes it, and Structured Streaming's watermark stops at the last event, so the final
window is emitted by Lockgate (whose cycle closes it) and by the batch job, never by Structured
Streaming. An updating result (:attr:`Workload.upsert_key`) is compared as its final current table:
the latest row of each key once all the data is in. Lockgate's FileSink and Structured
Streaming (update mode, ``foreachBatch``: its file sink takes append mode only) both write the
changelog, each cycle's or micro-batch's updated rows, and the verifier takes each key's latest
row (:mod:`bench.verify`); the batch job computes the table itself. (Lockgate's
``FileSink(key=...)`` would also rewrite a compacted current table every window: work
Structured Streaming's sink does not do, so it is left out.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

#: Nexmark q1's conversion (dollars to euros in the benchmark's text)
Q1_PRICE = "0.908 * price AS price"
Q1_COLUMNS = ("auction", "bidder", Q1_PRICE, "date_time", "extra")
TOP_SQL = (
    "SELECT window_start, window_end, max(named_struct('bids', bids, 'auction', auction)) AS top "
    "FROM input GROUP BY window_start, window_end"
)
#: q9's join keeps a record this long of event time (Lockgate's examples do the same): the
#: bound that lets every contender drop join state; no auction of the generator lasts as long
AUCTION_HISTORY = timedelta(days=1)
#: the auction's own columns in q9's output (``date_time``, ``extra``: the auction's)
AUCTION_COLUMNS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
                   "category", "extra")
BID_COLUMNS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
WINDOW_COLUMNS = ("window_start", "window_end")
#: what q18's last bid carries besides its time (a tie on the time goes to these, larger first)
LAST_CARRIED = ("price", "channel", "url", "extra")


@dataclass(frozen=True)
class Workload:
    """What a workload reads and which of its output columns are compared."""

    key: str
    title: str
    streams: tuple[str, ...]
    columns: tuple[str, ...]
    #: compare only windows with window_end < end of data (see module doc)
    closed_windows_only: bool
    #: an updating result's key: compared as the latest row per key (see module doc)
    upsert_key: tuple[str, ...] = ()

    @property
    def updating(self) -> bool:
        """Whether the output is an updating result (rows replaced by key) rather than appended."""
        return bool(self.upsert_key)


WORKLOADS: dict[str, Workload] = {
    "w0": Workload("w0", "W0 stateless (q1)", ("bid",), ("auction", "bidder", "price", "date_time", "extra"), False),
    "w1": Workload("w1", "W1 tumbling 10 s (q7-like)", ("bid",),
                   ("window_start", "window_end", "auction", "bids", "top"), True),
    "w2": Workload("w2", "W2 sliding 10 s/2 s top auction (q5)", ("bid",),
                   ("window_start", "window_end", "auction", "bids"), True),
    "w3": Workload("w3", "W3 windowed join (q8)", ("person", "auction"),
                   ("window_start", "window_end", "person", "name", "auction", "reserve"), False),
    "w4": Workload("w4", "W4 highest bid per 10 s window (q7)", ("bid",),
                   (*WINDOW_COLUMNS, "auction", "price", "bidder", "date_time", "extra"), True),
    "w5": Workload("w5", "W5 winning bid per auction (q9)", ("bid", "auction"),
                   (*AUCTION_COLUMNS, "auction", "bidder", "price", "bid_date_time", "bid_extra"), False,
                   upsert_key=("id",)),
    "w6": Workload("w6", "W6 last bid per bidder and auction (q18)", ("bid",), BID_COLUMNS, False,
                   upsert_key=("bidder", "auction")),
}


def schema_ddl(stream: str) -> str:
    """Spark DDL of a Nexmark stream (the explicit schema every reader is given)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lockgate.nexmark import SCHEMAS

    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in from_arrow_schema(SCHEMAS[stream]).fields)


# -- Lockgate ----------------------------------------------------------------------------
TEN = timedelta(seconds=10)


def _lg_w0(src: Callable[[str], Any]) -> Any:
    return src("bid").select(*Q1_COLUMNS, name="q1")


def _lg_w1(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    return (src("bid").key_by("auction").window(lg.Tumbling(TEN))
            .aggregate(bids=lg.count(), top=lg.max("price"), name="per_auction"))


def _lg_w2(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    return (
        src("bid").key_by("auction").window(lg.Sliding(TEN, timedelta(seconds=2)))
        .aggregate(bids=lg.count(), name="per_auction")
        .sql(TOP_SQL, name="top")
        .select("window_start", "window_end", "top.auction AS auction", "top.bids AS bids", name="flat")
    )


def _lg_w3(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    persons, auctions = src("person"), src("auction")
    return (
        persons.join(auctions, left_on=["id"], right_on=["seller"], window=lg.Tumbling(TEN), name="q8")
        .select("window_start", "window_end", "id AS person", "name", "id_right AS auction", "reserve", name="flat")
    )


def _lg_w4(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    bids = src("bid")
    maxes = bids.window(lg.Tumbling(TEN)).aggregate(maxprice=lg.max("price"), name="max_price")
    joined = bids.join(maxes, left_on=["price"], right_on=["maxprice"], window=lg.Tumbling(TEN), name="highest")
    return joined.select(*WORKLOADS["w4"].columns, name="flat")


def _lg_w5(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    bids, auctions = src("bid"), src("auction")
    joined = (bids.join(auctions, left_on=["auction"], right_on=["id"], between=(timedelta(0), AUCTION_HISTORY),
                        name="in_auction")
              .filter("date_time <= expires", name="before_expiry")
              .with_column("earliest", "-unix_micros(date_time)", name="earliest"))  # DESC on it: earliest first
    # the right side's date_time and extra are the auction's (renamed by the join)
    right = {"date_time": "date_time_right", "extra": "extra_right"}
    best = joined.key_by(*[right.get(c, c) for c in AUCTION_COLUMNS]).aggregate(
        win=lg.top_k(1, by=["price", "earliest"], columns=["bidder", "date_time", "extra"]), name="winning")
    return best.select(
        *[f"{right[c]} AS {c}" if c in right else c for c in AUCTION_COLUMNS], "id AS auction",
        "win[0].bidder AS bidder", "win[0].price AS price", "win[0].date_time AS bid_date_time",
        "win[0].extra AS bid_extra", name="flat")


def _lg_w6(src: Callable[[str], Any]) -> Any:
    import lockgate as lg

    last = src("bid").key_by("bidder", "auction").aggregate(
        last=lg.top_k(1, by="date_time", columns=list(LAST_CARRIED)), name="last_bid")
    return last.select("auction", "bidder", *[f"last[0].{c} AS {c}" for c in BID_COLUMNS[2:]], name="flat")


LOCKGATE: dict[str, Callable[[Callable[[str], Any]], Any]] = {
    "w0": _lg_w0, "w1": _lg_w1, "w2": _lg_w2, "w3": _lg_w3, "w4": _lg_w4, "w5": _lg_w5, "w6": _lg_w6,
}


def lockgate_pipeline(workload: str, data: str, out: str, cycle_s: float, origin: str, name: str) -> Any:
    """The workload as a Lockgate pipeline: one cycle window of ``cycle_s`` seconds per
    cycle, a checkpoint after each, a Parquet FileSink committed once per window (for an
    updating result: the rows each window updated, like Structured Streaming's update mode)."""
    import lockgate as lg

    if workload not in LOCKGATE:
        raise ValueError(f"unknown workload {workload!r}")
    p = lg.Pipeline(
        name,
        cycle_window=timedelta(seconds=cycle_s),
        origin=datetime.fromisoformat(origin).astimezone(UTC),
        parallelism=2,
    )

    def src(stream: str) -> Any:
        source = lg.FileSource(f"{data}/{stream}", format="parquet", event_time="date_time", schema=schema_ddl(stream))
        return p.source(source, name=f"{stream}s")

    LOCKGATE[workload](src).sink(lg.FileSink(out), name="out")
    return p


PIPELINE_FILE = '''"""Generated by bench/ for one run; not for editing."""
import sys

sys.path.insert(0, {repo!r})

from bench.workloads import lockgate_pipeline  # noqa: E402

pipeline = lockgate_pipeline(**{kwargs!r})
'''


# -- Spark (Structured Streaming and batch) ---------------------------------------------
def _flat(df: Any, window: str, *cols: Any) -> Any:
    """``df`` with its window struct ``window`` as ``window_start``/``window_end`` columns first."""
    from pyspark.sql import functions as F

    return df.select(F.col(f"{window}.start").alias("window_start"), F.col(f"{window}.end").alias("window_end"),
                     *cols)


def _sp_w0(read: Callable[[str], Any]) -> Any:
    return read("bid").selectExpr(*Q1_COLUMNS)


def _sp_w1(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    agg = read("bid").groupBy(F.window("date_time", "10 seconds"), "auction").agg(
        F.count(F.lit(1)).alias("bids"), F.max("price").alias("top")
    )
    return _flat(agg, "window", "auction", "bids", "top")


def _sp_w2(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    counts = read("bid").groupBy(F.window("date_time", "10 seconds", "2 seconds"), "auction").agg(
        F.count(F.lit(1)).alias("bids")
    )
    top = counts.groupBy("window").agg(F.max(F.struct("bids", "auction")).alias("top"))
    return _flat(top, "window", F.col("top.auction").alias("auction"), F.col("top.bids").alias("bids"))


def _sp_w3(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    p = read("person").select(F.col("id").alias("person"), "name", F.window("date_time", "10 seconds").alias("pw"))
    a = read("auction").select(
        F.col("id").alias("auction"), "seller", "reserve", F.window("date_time", "10 seconds").alias("aw")
    )
    joined = p.join(a, (p.person == a.seller) & (p.pw == a.aw), "inner")
    return _flat(joined, "pw", "person", "name", "auction", "reserve")


def _sp_w4(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    bids = read("bid")
    maxes = bids.groupBy(F.window("date_time", "10 seconds")).agg(F.max("price").alias("maxprice"))
    # the bid's window is the max's: a range on date_time, so the bids keep one event-time column
    # (a second window column on them is refused: MULTIPLE_EVENT_TIME_COLUMNS)
    same_window = (bids.date_time >= maxes.window.start) & (bids.date_time < maxes.window.end)
    joined = bids.join(maxes, (bids.price == maxes.maxprice) & same_window, "inner")
    return _flat(joined, "window", *WORKLOADS["w4"].columns[2:])


def _sp_w5(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    bids = read("bid").select("auction", "bidder", "price", F.col("date_time").alias("bid_date_time"),
                              F.col("extra").alias("bid_extra"))
    auctions = read("auction")
    history = F.expr(f"INTERVAL {int(AUCTION_HISTORY.total_seconds())} SECONDS")
    during = ((bids.bid_date_time >= auctions.date_time) & (bids.bid_date_time <= auctions.date_time + history)
              & (bids.bid_date_time <= auctions.expires))
    joined = bids.join(auctions, (bids.auction == auctions.id) & during, "inner")
    # top_k(1, by=[price, earliest], columns=[bidder, date_time, extra]) is this max of a struct
    entry = F.struct("price", (-F.unix_micros("bid_date_time")).alias("earliest"), "bidder", "bid_date_time",
                     "bid_extra")
    best = joined.groupBy(*AUCTION_COLUMNS).agg(F.max(entry).alias("win"))
    return best.select(*AUCTION_COLUMNS, F.col("id").alias("auction"),
                       *[F.col(f"win.{c}").alias(c) for c in ("bidder", "price", "bid_date_time", "bid_extra")])


def _sp_w6(read: Callable[[str], Any]) -> Any:
    from pyspark.sql import functions as F

    # top_k(1, by=date_time, columns=LAST_CARRIED) is this max of a struct
    entry = F.struct("date_time", *LAST_CARRIED)
    last = read("bid").groupBy("bidder", "auction").agg(F.max(entry).alias("last"))
    return last.select("auction", "bidder", *[F.col(f"last.{c}").alias(c) for c in BID_COLUMNS[2:]])


SPARK: dict[str, Callable[[Callable[[str], Any]], Any]] = {
    "w0": _sp_w0, "w1": _sp_w1, "w2": _sp_w2, "w3": _sp_w3, "w4": _sp_w4, "w5": _sp_w5, "w6": _sp_w6,
}


def spark_output(spark: Any, workload: str, data: str, streaming: bool, max_files: int = 1) -> Any:
    """The workload's output DataFrame over the files under ``data``: a streaming
    DataFrame (readStream with an explicit schema, maxFilesPerTrigger, a watermark of 0 s)
    or a batch one over all files."""
    from pyspark.sql.types import StructType

    if workload not in SPARK:
        raise ValueError(f"unknown workload {workload!r}")

    def read(stream: str) -> Any:
        schema = StructType.fromDDL(schema_ddl(stream))
        path = f"{data}/{stream}"
        if streaming:
            df = spark.readStream.schema(schema).option("maxFilesPerTrigger", max_files).parquet(path)
            return df.withWatermark("date_time", "0 seconds")
        return spark.read.schema(schema).parquet(path)

    return SPARK[workload](read)
