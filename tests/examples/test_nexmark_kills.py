"""kill -9 of a job holding the kinds of state the Nexmark suite adds: a join with a TTL (q20's
bid-auction join), a windowed top-N, a running aggregate (q17's per-auction totals) and an
aggregate over that updating result (q4's kind: auctions per bid count, retracting).
``lockgate run`` is killed at aimed crash points (during a sink commit, with a window staged and
not committed, before staging), run again, and its output is compared with DuckDB over the same
events: nothing lost, nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

import lockgate as lg

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tests" / "engine" / "runtime") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests" / "engine" / "runtime"))
from reference import T0_ISO, W0, nexmark_events, read_sink  # noqa: E402

pytestmark = [pytest.mark.slow]

SOURCE = {"events_per_second": 60, "seed": 8}
LAST = W0 + 5
#: (crash point, window): a run dies there, the next one resumes
KILLS = [("mid_commit", W0 + 1), ("after_stage", W0 + 3), ("before_stage", W0 + 4)]


def stateful() -> lg.Pipeline:
    p = lg.Pipeline("nexmark_state", cycle_window=timedelta(seconds=10), parallelism=2)
    bids = p.source(lg.NexmarkSource("bid", start=T0_ISO, **SOURCE), name="bids")
    auctions = p.source(lg.NexmarkSource("auction", start=T0_ISO, **SOURCE), name="auctions")
    (bids.join(auctions.filter("category = 10", name="cat10"), left_on=["auction"], right_on=["id"],
               ttl=timedelta(days=1), name="expand")
     .select("auction", "bidder", "price", "date_time", "seller", name="pairs").sink(lg.CollectSink("joined")))
    (bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10))).top_n(3, by="price", name="top3")
     .select("auction", "price", "bidder", "date_time", "rank", "window_start", name="ranked")
     .sink(lg.CollectSink("top")))
    totals = bids.key_by("auction").aggregate(n=lg.count(), total=lg.sum("price"), hi=lg.max("price"),
                                              name="totals")
    totals.sink(lg.CollectSink("totals"))
    # a histogram over the updating totals: an auction leaves group n when its n-th bid comes
    totals.key_by("n").aggregate(auctions=lg.count(), name="by_count").sink(lg.CollectSink("histogram"))
    return p


def _run(home: Path, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCKGATE_HOME": str(home)}
    env.pop("LOCKGATE_FAULT", None)
    if fault:
        env["LOCKGATE_FAULT"] = fault
    cmd = [sys.executable, "-m", "lockgate.cli.main", "run", f"{__file__}:stateful",
           "--from-window", str(W0), "--to-window", str(LAST)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def duck():
    con = duckdb.connect()
    for name in ("bid", "auction"):
        frame = nexmark_events(name, W0, LAST, **SOURCE)  # noqa: F841 - read by DuckDB by name
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
    yield con
    con.close()


def _rows(df) -> list[tuple]:
    return sorted(tuple(v.item() if hasattr(v, "item") else v for v in r) for r in df.itertuples(index=False))


@pytest.mark.parametrize("kills", [pytest.param(KILLS[:2], id="short"),
                                   pytest.param(KILLS, id="all", marks=pytest.mark.long)])
def test_kills_of_a_join_a_top_n_and_updating_aggregates_lose_and_duplicate_nothing(tmp_path, duck, kills):
    home = tmp_path / "home"
    for point, window in kills:
        proc = _run(home, f"{point}:{window}")
        assert proc.returncode == -signal.SIGKILL, f"{point}:{window} did not kill the run: {proc.stderr[-2000:]}"
    done = _run(home, None)
    assert done.returncode == 0, done.stderr[-2000:]
    with lg.connect("embedded", home=str(home)) as client:
        assert client.get_job("nexmark_state").last_window == LAST
        joined = read_sink(client, "nexmark_state", "joined")
        top = read_sink(client, "nexmark_state", "top")
        totals = read_sink(client, "nexmark_state", "totals")
        histogram = read_sink(client, "nexmark_state", "histogram")

    want = duck.execute("""SELECT b.auction, b.bidder, b.price, b.ts_us AS date_time, a.seller FROM bid b
                           JOIN auction a ON b.auction = a.id WHERE a.category = 10""").df()
    assert len(want) > 20
    assert _rows(joined[list(want.columns)]) == _rows(want)

    want = duck.execute("""SELECT auction, price, bidder, date_time, rank, window_start FROM (
                             SELECT auction, price, bidder, ts_us AS date_time, (ts_us // 10000000) * 10000000
                               AS window_start, row_number() OVER (PARTITION BY auction, ts_us // 10000000
                               ORDER BY price DESC, bidder, channel, url, ts_us, extra) AS rank FROM bid)
                           WHERE rank <= 3""").df()
    assert _rows(top[list(want.columns)]) == _rows(want)

    # one row per auction and cycle it had bids in, with its totals up to that cycle
    want = duck.execute("""SELECT DISTINCT auction, cycle,
                             count(*) OVER w AS n, sum(price) OVER w AS total, max(price) OVER w AS hi
                           FROM bid WINDOW w AS (PARTITION BY auction ORDER BY cycle
                             RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)""").df()
    assert len(totals) == len(want), "a window's running totals were lost or written twice"
    got = sorted(totals.groupby("auction")[["n", "total", "hi"]].max().itertuples())
    last = sorted(want.groupby("auction")[["n", "total", "hi"]].max().itertuples())
    assert [tuple(r) for r in got] == [tuple(r) for r in last]

    # the histogram's current rows (each group's latest round, less the groups it deleted)
    latest = histogram[histogram["as_of"] == histogram.groupby("n")["as_of"].transform("max")]
    assert not latest.duplicated("n").any(), "a group has two rows in one round"
    current = latest[latest["op"] != "-D"]
    want = duck.execute("SELECT n, count(*) AS auctions FROM (SELECT auction, count(*) AS n FROM bid GROUP BY "
                        "auction) GROUP BY n").df()
    assert (histogram["op"] == "-D").any(), "no group was ever left empty: the retraction is not exercised"
    assert _rows(current[["n", "auctions"]]) == _rows(want)
