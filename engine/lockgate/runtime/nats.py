"""A NATS JetStream stream read by sequence range, as Arrow, without Spark.

A message log is read by *positions*, not by time: a cycle window's records are the messages
of one sequence range, ``(first, last)`` inclusive, decided when the window is first run and
recorded in its checkpoint (the source's position, ``offset_ranges``), like Spark's offset log
and Kafka's committed offsets. The rule that decides a range is one a replay repeats:

- **first** is right after the previous window's recorded ``last`` (the restore point's
  position); a job's first window, having none, starts at the first message whose JetStream
  timestamp (its *arrival*) is at or after the window's start (JetStream's
  ``DeliverByStartTime``, Kafka's ``offsetsForTimes``);
- **last** is the message before the first one, from ``first`` on in sequence order, whose
  arrival is at or after the window's end (the end of the stream if there is none yet).

The log is append-only and a window is read only once its end has passed (:func:`read_range`
refuses an open window), so a message arriving later has a later sequence and a later arrival:
the same window read again (after a crash before its checkpoint, or a restore) gets the same
range even after more messages were published, and the next window starts right after it. A
window whose sequences the stream no longer holds (retention, a purge) fails with one line
naming them and nothing of it is committed.

**Partitions.** A range is a mapping *partition -> (first, last)*; a JetStream stream is one
partition, ``"0"``. A Kafka source fits the same shape unchanged: one entry per topic
partition, ``first`` from the previous window's recorded offset + 1 (``offsetsForTimes(start)``
for a job's first window), ``last`` the offset before ``offsetsForTimes(end)`` (the log end
offset when none), each partition read with ``assign`` + ``seek(first)`` + ``poll`` up to
``last``, and a partition whose log start offset is past ``first`` is the same
missing-messages error. The checkpoint, the replay and the cycle code would not change.

No Spark here: the controller asks :func:`first_arrival` where a new job starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import LockgateError, SourceRefusedError, SourceUnavailableError

#: the one partition of a JetStream stream (a Kafka source would have one key per partition)
PARTITION = "0"
#: messages asked for in one fetch
BATCH = 1000
#: seconds a connection, a request or a fetch may take before the server counts as unavailable
TIMEOUT = 5.0

T = TypeVar("T")


@dataclass
class LogSlice:
    """The messages of one window: parallel lists, in sequence order, and the range read."""

    seqs: list[int] = field(default_factory=list)
    #: each message's JetStream timestamp, µs since the epoch (its arrival)
    arrivals: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    #: partition -> [first, last] (inclusive; ``last == first - 1`` when the window is empty)
    ranges: dict[str, list[int]] = field(default_factory=dict)


def endpoint(url: str) -> str:
    """``host:port`` of a NATS URL, for messages."""
    try:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        return f"{parts.hostname or 'localhost'}:{parts.port or 4222}"
    except ValueError:
        return url


def next_after(position: dict[str, Any] | None) -> int | None:
    """The sequence a window starts at, from the previous window's recorded position (None: no
    recorded range, start by time)."""
    if not position or not position.get("offset_ranges"):
        return None
    return int(position["offset_ranges"][PARTITION][1]) + 1


# -- the public calls: synchronous, each on its own connection ------------------------------
def read_range(cfg: dict[str, Any], start_us: int, end_us: int, first: int | None, window: str = "") -> LogSlice:
    """The messages of the window ``[start_us, end_us)`` from sequence ``first`` (None: the first
    message arriving at or after ``start_us``), cut at the first message arriving at or after
    ``end_us``. ``window`` names the window in errors (its time range by default)."""
    window = window or f"the window {_iso(start_us)} to {_iso(end_us)}"
    now_us = int(time.time() * 1_000_000)
    if end_us > now_us:
        raise LockgateError(
            f"NATS source stream {cfg['stream']!r}: {window} ends in the future: its messages are "
            "decided by arrival once the window has ended; run it after that (a scheduled or continuous "
            "run waits by itself)"
        )
    return _run(cfg, "reading a window's messages", lambda nc: _read(nc, cfg, start_us, end_us, first, window))


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000).isoformat()


def first_arrival(cfg: dict[str, Any]) -> int | None:
    """The arrival (µs) of the stream's first message (None: the stream is empty)."""
    return _run(cfg, "looking up its first message", lambda nc: _first_arrival(nc, cfg))


def stream_state(cfg: dict[str, Any]) -> tuple[int, int]:
    """``(first_seq, last_seq)`` the stream holds now."""
    return _run(cfg, "reading its state", lambda nc: _state(nc, cfg))


# -- connection and failures ---------------------------------------------------------------
def _run(cfg: dict[str, Any], doing: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``fn(connection)`` on a fresh connection, its failures as one Lockgate error."""

    async def main() -> T:
        nc = await _connect(cfg["url"])
        try:
            return await fn(nc)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the usual case: no event loop in this thread
            return asyncio.run(main())
        # called from a running event loop (a notebook): run on a thread of its own
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, main()).result()
    except LockgateError:
        raise
    except Exception as exc:
        raise _failure(cfg, exc, doing) from exc


async def _connect(url: str) -> Any:
    """A connection that tries the server twice and never reconnects: a server that is down is
    an error at once (the last connect error, ``ConnectionRefusedError``..., not nats-py's
    ``NoServersError``)."""
    import nats
    from nats.errors import NoServersError

    seen: list[Exception] = []

    async def keep(exc: Exception) -> None:  # nats-py logs every failed try otherwise
        seen.append(exc)

    try:
        return await asyncio.wait_for(nats.connect(
            servers=[url], connect_timeout=TIMEOUT / 2, allow_reconnect=False, max_reconnect_attempts=1,
            reconnect_time_wait=0.1, error_cb=keep,
        ), TIMEOUT * 2)
    except NoServersError as exc:
        if seen:
            raise seen[-1] from exc
        raise


def _failure(cfg: dict[str, Any], exc: BaseException, doing: str) -> LockgateError:
    """A NATS client failure as SourceRefusedError (no such stream) or SourceUnavailableError."""
    from nats.js.errors import NotFoundError

    where = f"NATS source stream {cfg['stream']!r} at {endpoint(cfg['url'])}"
    if isinstance(exc, NotFoundError):
        return SourceRefusedError(
            f"{where} does not exist ({doing}): create the stream (nats stream add, or "
            "JetStreamContext.add_stream) or fix the source's stream name, then run the job again"
        )
    reason = _reason(exc)
    return SourceUnavailableError(
        f"{where} is unavailable ({reason}, while {doing}). The server is down or unreachable: nothing of "
        "the window was read or committed; start it (or check the URL and the network), then run the job "
        "again (a controller retries by itself)"
    )


def _reason(exc: BaseException) -> str:
    """The gist of a client failure on one line: ``connection refused``, ``timeout``..."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.removeprefix("nats: ").strip()
    return text or type(exc).__name__


# -- reading -----------------------------------------------------------------------------
async def _state(nc: Any, cfg: dict[str, Any]) -> tuple[int, int]:
    info = await nc.jetstream(timeout=TIMEOUT).stream_info(cfg["stream"])
    return int(info.state.first_seq), int(info.state.last_seq)


async def _first_arrival(nc: Any, cfg: dict[str, Any]) -> int | None:
    js = nc.jetstream(timeout=TIMEOUT)
    info = await js.stream_info(cfg["stream"])
    if info.state.messages == 0:
        return None
    from nats.js.errors import NotFoundError

    try:
        if cfg.get("subject"):
            msg = await js.get_msg(cfg["stream"], seq=info.state.first_seq, subject=cfg["subject"], next=True)
        else:
            msg = await js.get_msg(cfg["stream"], seq=info.state.first_seq)
    except NotFoundError:
        return None
    return None if msg.time is None else int(msg.time.timestamp() * 1_000_000)


def _reply_fields(reply: str) -> tuple[int, int, int]:
    """``(stream sequence, timestamp in ns, pending)`` of a JetStream message's reply subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, or the form with
    a domain and an account hash before the stream), exact to the nanosecond."""
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[7]), int(tokens[8])
    return int(tokens[7]), int(tokens[9]), int(tokens[10])


async def _read(nc: Any, cfg: dict[str, Any], start_us: int, end_us: int, first: int | None, window: str) -> LogSlice:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    js = nc.jetstream(timeout=TIMEOUT)
    stream = cfg["stream"]
    info = await js.stream_info(stream)
    held_first, held_last = int(info.state.first_seq), int(info.state.last_seq)
    if first is not None and held_first > first:
        raise SourceRefusedError(
            f"NATS source stream {stream!r} at {endpoint(cfg['url'])} no longer holds sequences "
            f"{first}..{held_first - 1}, where {window} starts (its first message now is "
            f"{held_first}: retention or a purge removed them); nothing of the window was committed. Keep "
            "messages until their window is committed (the stream's max_age, max_msgs, max_bytes); to go on "
            "without them, run the pipeline as a new job (lockgate run --job NEW), which starts at the first "
            "message arriving in its first window"
        )
    out = LogSlice()
    if first is not None and first > held_last:  # nothing published since the last window
        out.ranges = {PARTITION: [first, first - 1]}
        return out
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE, filter_subject=cfg.get("subject") or None, inactive_threshold=30.0,
        mem_storage=True, max_deliver=1,
    )
    if first is None:
        config.deliver_policy = DeliverPolicy.BY_START_TIME
        config.opt_start_time = datetime.fromtimestamp(start_us // 1_000_000, UTC).replace(
            microsecond=start_us % 1_000_000).isoformat().replace("+00:00", "Z")
    else:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = first
    consumer = await js.add_consumer(stream, config=config)
    delivered = None
    try:
        pending = int(consumer.num_pending or 0)
        if pending:
            delivered = await _fetch(nc, stream, consumer.name, out, pending, end_us)
    finally:
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, consumer.name)
    if first is None:  # the first message at or after the start, or after everything the stream holds
        first = delivered if delivered is not None else held_last + 1
    out.ranges = {PARTITION: [first, out.seqs[-1] if out.seqs else first - 1]}
    return out


async def _fetch(nc: Any, stream: str, consumer: str, out: LogSlice, pending: int, end_us: int) -> int | None:
    """Pull the consumer's messages into ``out`` until one arrived at or after ``end_us`` (the
    next window's first) or it has none left; returns the sequence of the first one delivered.

    Batches of :data:`BATCH` are pulled with ``no_wait`` on one inbox subscription (JetStream's
    ``CONSUMER.MSG.NEXT`` request, as nats-py's ``fetch`` sends it, without its per-message
    futures: a window of thousands of messages is read in a few milliseconds per batch)."""
    inbox = nc.new_inbox()
    got: list[Any] = []
    done = asyncio.Event()
    want = 0

    async def on_msg(msg: Any) -> None:
        if not msg.reply:  # a status (404 no messages, 408 timeout): the batch is over
            done.set()
            return
        got.append(msg)
        if len(got) >= want:
            done.set()

    sub = await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=4 * BATCH)
    end_ns = end_us * 1000
    delivered = None
    try:
        while pending > 0:
            want = min(BATCH, pending)
            got.clear()
            done.clear()
            request = json.dumps({"batch": want, "no_wait": True}).encode()
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, reply=inbox)
            await asyncio.wait_for(done.wait(), TIMEOUT)
            if not got:
                break
            for msg in got:
                seq, ts_ns, pending = _reply_fields(msg.reply)
                if delivered is None:
                    delivered = seq
                if ts_ns >= end_ns:
                    return delivered
                out.seqs.append(seq)
                out.arrivals.append(ts_ns // 1000)
                out.payloads.append(msg.data)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return delivered
