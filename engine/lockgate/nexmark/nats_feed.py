"""A live Nexmark bid feed published to a NATS JetStream stream, for ``NatsSource`` examples.

Event ``n`` of :func:`~lockgate.nexmark.generate` is due at ``start + n / events_per_second``
with ``start`` the instant the feed begins; the feed publishes every bid when it is due (in
batches every ``tick`` seconds), as one JSON object per message on ``<stream>.bids``, its
``date_time`` an ISO-8601 UTC string. JetStream stamps each message's arrival as it stores it,
a little after its ``date_time``.

    >>> feed = publish_bids("nats://127.0.0.1:4222", "nexmark_bids", seconds=5)  # doctest: +SKIP
    >>> feed.messages, feed.first_seq, feed.last_seq                             # doctest: +SKIP
    (920, 1, 920)
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from .generator import BID_SCHEMA, NexmarkConfig, generate

#: the payload schema of a published bid, as Spark DDL (a NatsSource's ``schema=``)
BID_DDL = ("auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time TIMESTAMP, "
           "extra STRING")


@dataclass(frozen=True)
class FeedResult:
    """What a feed published: its bids' time span, count and stream sequences."""

    start: datetime
    end: datetime
    messages: int
    first_seq: int
    last_seq: int
    bids: pa.Table


def bid_payloads(table: pa.Table) -> list[bytes]:
    """Each bid of a generated table as one JSON object (``date_time`` ISO-8601 UTC)."""
    out = []
    for row in table.to_pylist():
        row["date_time"] = row["date_time"].astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        out.append(json.dumps(row, separators=(",", ":")).encode())
    return out


def publish_bids(url: str, stream: str, *, seconds: float, events_per_second: int = 200, seed: int = 7,
                 tick: float = 0.05) -> FeedResult:
    """Publish ``seconds`` of live Nexmark bids to ``stream`` (created on ``<stream>.>`` when
    missing), each when it is due; returns what was published."""
    return asyncio.run(_publish(url, stream, seconds, events_per_second, seed, tick))


async def _publish(url: str, stream: str, seconds: float, eps: int, seed: int, tick: float) -> FeedResult:
    import nats
    from nats.js.errors import NotFoundError

    now = datetime.now(UTC)
    start = now.replace(microsecond=now.microsecond // 1000 * 1000)
    conf = NexmarkConfig(events_per_second=eps, seed=seed, start=start, max_events=int(seconds * eps))
    nc = await nats.connect(url)
    tables: list[pa.Table] = []
    seqs: list[int] = []
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(stream)
        except NotFoundError:
            await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        done = 0
        while done < conf.max_events:  # type: ignore[operator]
            due = conf.events_between(start, datetime.now(UTC) + timedelta(microseconds=1))[1]
            if due > done:
                bids = generate(conf, "bid", done, due)
                for payload in bid_payloads(bids):
                    ack = await js.publish(f"{stream}.bids", payload)
                    seqs.append(ack.seq)
                tables.append(bids)
                done = due
            await asyncio.sleep(tick)
    finally:
        await nc.close()
    table = pa.concat_tables(tables) if tables else BID_SCHEMA.empty_table()
    return FeedResult(start, start + timedelta(seconds=seconds), table.num_rows,
                      seqs[0] if seqs else 0, seqs[-1] if seqs else 0, table)
