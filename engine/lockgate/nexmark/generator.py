"""A seeded, vectorised generator of Nexmark events (persons, auctions, bids).

This follows the Nexmark benchmark generator (Apache Beam's
``org.apache.beam.sdk.nexmark.sources.generator`` and the Flink ``nexmark`` repository:
``GeneratorConfig``, ``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``,
``PriceGenerator``, ``StringsGenerator``) but is written for NumPy/Arrow: a whole range of
event numbers is generated at once, with no per-event Python loop.

Events are numbered ``n = 0, 1, 2, ...``. In every block of
:data:`PROPORTION_DENOMINATOR` (50) events, the first is a person, the next three are
auctions and the remaining 46 are bids. Ids follow the spec's arithmetic
(:func:`last_base0_person_id`, :func:`last_base0_auction_id`, ``nextBase0PersonId``,
``nextBase0AuctionId``).

Determinism: instead of a stateful ``java.util.Random``, every random draw of event ``n`` is
a counter-based hash (splitmix64) of ``(seed, n, field)``. An event's fields therefore
depend only on ``(seed, n)`` and never on how a range of event numbers is sliced into
calls of :func:`generate`.

Timing: event ``n`` has the *nominal* (arrival) time
``start + n * 1_000_000 // events_per_second`` microseconds. Its event time ``date_time``
is the nominal time, minus a hash-based delay uniform in ``[0, out_of_order_s]`` seconds
when ``out_of_order_s > 0``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "AUCTION_PROPORTION",
    "AUCTION_SCHEMA",
    "BID_PROPORTION",
    "BID_SCHEMA",
    "FIRST_AUCTION_ID",
    "FIRST_CATEGORY_ID",
    "FIRST_PERSON_ID",
    "PERSON_PROPORTION",
    "PERSON_SCHEMA",
    "PROPORTION_DENOMINATOR",
    "SCHEMAS",
    "STREAMS",
    "NexmarkConfig",
    "generate",
    "generate_all",
    "last_base0_auction_id",
    "last_base0_person_id",
    "stream_event_numbers",
    "write_parquet_windows",
]

# --------------------------------------------------------------------------------------
# Spec constants (GeneratorConfig / NexmarkConfiguration defaults / *Generator classes).
# --------------------------------------------------------------------------------------

#: Id of the first person (``GeneratorConfig.FIRST_PERSON_ID``).
FIRST_PERSON_ID = 1000
#: Id of the first auction (``GeneratorConfig.FIRST_AUCTION_ID``).
FIRST_AUCTION_ID = 1000
#: Id of the first category (``GeneratorConfig.FIRST_CATEGORY_ID``).
FIRST_CATEGORY_ID = 10

#: Persons per block of :data:`PROPORTION_DENOMINATOR` events.
PERSON_PROPORTION = 1
#: Auctions per block of :data:`PROPORTION_DENOMINATOR` events.
AUCTION_PROPORTION = 3
#: Bids per block of :data:`PROPORTION_DENOMINATOR` events.
BID_PROPORTION = 46
#: Events per block: person, then auctions, then bids.
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

NUM_CATEGORIES = 5
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
#: P(hot auction) = 1 - 1/HOT_AUCTION_RATIO, etc. (``NexmarkConfiguration`` defaults).
HOT_AUCTION_RATIO = 2
HOT_SELLER_RATIO = 4
HOT_BIDDER_RATIO = 4
#: The generators' inner ``HOT_*_RATIO = 100``: hot ids are the first of the last 100.
HOT_BATCH = 100
#: Number of yet-to-be-created person / auction ids the spec allows (``*_ID_LEAD``).
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
#: Bid channels (Flink nexmark ``BidGenerator``).
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
    "Bend", "Redmond", "Seattle", "Kent", "Cheyenne",
)  # fmt: skip
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")

# Events between "now" and the auction NUM_IN_FLIGHT_AUCTIONS auctions ahead.
_NUM_EVENTS_FOR_AUCTIONS = (NUM_IN_FLIGHT_AUCTIONS * PROPORTION_DENOMINATOR) // AUCTION_PROPORTION
_MIN_STRING_LENGTH = 3
# ``extra`` is kept short (the spec pads events to 200/500/100 bytes on average).
_EXTRA_MIN_LENGTH = 3
_EXTRA_MAX_LENGTH = 5

_US_PER_S = 1_000_000
_DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)
_CHUNK_EVENTS = 1_000_000

# --------------------------------------------------------------------------------------
# Schemas.
# --------------------------------------------------------------------------------------

_TS = pa.timestamp("us", tz="UTC")

#: Schema of the ``person`` stream.
PERSON_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("email_address", pa.string()),
        ("credit_card", pa.string()),
        ("city", pa.string()),
        ("state", pa.string()),
        ("date_time", _TS),
        ("extra", pa.string()),
    ]
)

#: Schema of the ``auction`` stream.
AUCTION_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("item_name", pa.string()),
        ("description", pa.string()),
        ("initial_bid", pa.int64()),
        ("reserve", pa.int64()),
        ("date_time", _TS),
        ("expires", _TS),
        ("seller", pa.int64()),
        ("category", pa.int64()),
        ("extra", pa.string()),
    ]
)

#: Schema of the ``bid`` stream.
BID_SCHEMA = pa.schema(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.int64()),
        ("channel", pa.string()),
        ("url", pa.string()),
        ("date_time", _TS),
        ("extra", pa.string()),
    ]
)

#: Schema of each stream, by stream name.
SCHEMAS: dict[str, pa.Schema] = {"person": PERSON_SCHEMA, "auction": AUCTION_SCHEMA, "bid": BID_SCHEMA}

#: The stream names, in the order events of a block are generated.
STREAMS: tuple[str, ...] = ("person", "auction", "bid")

# Offsets within a block of PROPORTION_DENOMINATOR events that belong to each stream.
_STREAM_OFFSETS: dict[str, np.ndarray] = {
    "person": np.arange(0, PERSON_PROPORTION, dtype=np.int64),
    "auction": np.arange(PERSON_PROPORTION, PERSON_PROPORTION + AUCTION_PROPORTION, dtype=np.int64),
    "bid": np.arange(PERSON_PROPORTION + AUCTION_PROPORTION, PROPORTION_DENOMINATOR, dtype=np.int64),
}

# --------------------------------------------------------------------------------------
# Configuration.
# --------------------------------------------------------------------------------------


def _to_utc(value: datetime | str) -> datetime:
    """Return ``value`` as a tz-aware UTC datetime (naive means UTC; strings are ISO 8601)."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        value = datetime.fromisoformat(text)
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime or an ISO 8601 string, got {type(value).__name__}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _epoch_us(value: datetime | str) -> int:
    """Microseconds since the Unix epoch of ``value`` (exact integer arithmetic)."""
    delta = _to_utc(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds


@dataclass(frozen=True)
class NexmarkConfig:
    """Parameters of a Nexmark event stream.

    Attributes:
        events_per_second: Events (of all three kinds together) per second of nominal time.
        seed: Seed of every random draw; same seed, same events.
        start: Nominal time of event 0. A tz-aware datetime; a naive datetime is taken as
            UTC and an ISO 8601 string is parsed (see also :meth:`from_iso`).
        max_events: Total number of events in the stream, or ``None`` for unbounded.
        out_of_order_s: Maximum lateness, in seconds, of an event's ``date_time`` behind its
            nominal (arrival) time. ``0`` means ``date_time`` is the nominal time.
        strict_references: When true (the default), bids and auctions only reference persons
            and auctions that already exist at that event number: the spec's id leads
            (``PERSON_ID_LEAD`` / ``AUCTION_ID_LEAD`` = 10) are set to 0 and the hot bidder
            (``... * 100 + 1``) is capped at the last person id. When false, the spec's
            arithmetic is followed verbatim, so about 1% of references point a few ids ahead.
    """

    events_per_second: int = 1000
    seed: int = 0
    start: datetime = _DEFAULT_START
    max_events: int | None = None
    out_of_order_s: float = 0.0
    strict_references: bool = True

    def __post_init__(self) -> None:
        """Normalise ``start`` to UTC and validate the numeric parameters."""
        object.__setattr__(self, "start", _to_utc(self.start))
        if int(self.events_per_second) != self.events_per_second or self.events_per_second < 1:
            raise ValueError(f"events_per_second must be a positive integer, got {self.events_per_second!r}")
        object.__setattr__(self, "events_per_second", int(self.events_per_second))
        object.__setattr__(self, "seed", int(self.seed))
        if self.max_events is not None:
            if self.max_events < 0:
                raise ValueError(f"max_events must be >= 0 or None, got {self.max_events!r}")
            object.__setattr__(self, "max_events", int(self.max_events))
        if not (self.out_of_order_s >= 0 and math.isfinite(self.out_of_order_s)):
            raise ValueError(f"out_of_order_s must be a finite number >= 0, got {self.out_of_order_s!r}")

    @classmethod
    def from_iso(cls, start: str, **kwargs: object) -> NexmarkConfig:
        """Build a config whose ``start`` is the ISO 8601 string ``start`` (naive means UTC)."""
        return cls(start=_to_utc(start), **kwargs)  # type: ignore[arg-type]

    @property
    def start_us(self) -> int:
        """Nominal time of event 0, in microseconds since the Unix epoch."""
        return _epoch_us(self.start)

    @property
    def out_of_order_us(self) -> int:
        """``out_of_order_s`` in whole microseconds."""
        return round(self.out_of_order_s * _US_PER_S)

    def event_time_us(self, n: np.ndarray) -> np.ndarray:
        """Nominal (arrival) time of events ``n``, in epoch microseconds (int64 array).

        ``start + n * 1_000_000 // events_per_second``, in exact integer arithmetic.
        """
        n = np.asarray(n, dtype=np.int64)
        return self.start_us + (n * _US_PER_S) // self.events_per_second

    def _first_event_at_or_after(self, offset_us: int) -> int:
        """Smallest event number whose nominal time is >= ``start + offset_us`` (unclipped)."""
        # floor(n * 1e6 / eps) >= s  <=>  n * 1e6 >= s * eps  <=>  n >= ceil(s * eps / 1e6).
        return -((-offset_us * self.events_per_second) // _US_PER_S)

    def _clip(self, n: int) -> int:
        """Clip an event number to ``[0, max_events]``."""
        n = max(n, 0)
        return n if self.max_events is None else min(n, self.max_events)

    def events_between(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Half-open range ``[first, last)`` of event numbers with nominal time in ``[start, end)``.

        The range is clipped to ``[0, max_events)``; it is empty (``first == last``) when no
        event falls in the interval. Naive datetimes are taken as UTC.
        """
        base = self.start_us
        first = self._clip(self._first_event_at_or_after(_epoch_us(start) - base))
        last = self._clip(self._first_event_at_or_after(_epoch_us(end) - base))
        return first, max(first, last)


# --------------------------------------------------------------------------------------
# Counter-based randomness (vectorised splitmix64).
# --------------------------------------------------------------------------------------

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_U_GOLDEN = np.uint64(_GOLDEN)
_U_MIX1 = np.uint64(_MIX1)
_U_MIX2 = np.uint64(_MIX2)


def _mix_int(x: int) -> int:
    """splitmix64 finaliser on a Python int (used for seeds and field salts)."""
    x = (x + _GOLDEN) & _MASK64
    x ^= x >> 30
    x = (x * _MIX1) & _MASK64
    x ^= x >> 27
    x = (x * _MIX2) & _MASK64
    return x ^ (x >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (returns a new array; wraps modulo 2**64)."""
    z = z + _U_GOLDEN
    z ^= z >> np.uint64(30)
    z *= _U_MIX1
    z ^= z >> np.uint64(27)
    z *= _U_MIX2
    z ^= z >> np.uint64(31)
    return z


@cache
def _salt(name: str) -> np.uint64:
    """A 64-bit constant naming one random draw of an event (stable across runs)."""
    acc = 0
    for ch in name.encode():
        acc = _mix_int(acc ^ ch)
    return np.uint64(acc)


def _event_keys(seed: int, n: np.ndarray) -> np.ndarray:
    """Per-event 64-bit keys: a hash of ``(seed, n)``."""
    seed_key = np.uint64(_mix_int(_mix_int(seed & _MASK64) ^ 0x6E65786D61726B))  # "nexmark"
    return _mix(n.astype(np.uint64) * _U_GOLDEN ^ seed_key)


def _draw(keys: np.ndarray, name: str) -> np.ndarray:
    """The uint64 random draw ``name`` of each event (a hash of ``(seed, n, name)``)."""
    return _mix(keys ^ _salt(name))


def _draws(keys: np.ndarray, name: str, count: int) -> np.ndarray:
    """``count`` independent uint64 draws per event, shape ``(len(keys), count)``."""
    salts = np.array([_salt(f"{name}#{i}") for i in range(count)], dtype=np.uint64)
    return _mix(keys[:, None] ^ salts[None, :])


def _below(h: np.ndarray, bound: np.ndarray | int) -> np.ndarray:
    """Uniform int64 in ``[0, bound)`` from draws ``h`` (``bound`` >= 1, < 2**53)."""
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    bound = np.asarray(bound, dtype=np.int64)
    return np.minimum((u * bound).astype(np.int64), bound - 1)


def _unit(h: np.ndarray) -> np.ndarray:
    """Uniform float64 in ``[0, 1)`` from draws ``h``."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


# --------------------------------------------------------------------------------------
# Spec id arithmetic (vectorised).
# --------------------------------------------------------------------------------------


def last_base0_person_id(n: np.ndarray) -> np.ndarray:
    """``PersonGenerator.lastBase0PersonId``: the last valid base-0 person id at event ``n``.

    It is the current person's id when event ``n`` is a person.
    """
    n = np.asarray(n, dtype=np.int64)
    epoch = n // PROPORTION_DENOMINATOR
    offset = n % PROPORTION_DENOMINATOR
    offset = np.where(offset >= PERSON_PROPORTION, PERSON_PROPORTION - 1, offset)
    return epoch * PERSON_PROPORTION + offset


def last_base0_auction_id(n: np.ndarray) -> np.ndarray:
    """``AuctionGenerator.lastBase0AuctionId``: the last valid base-0 auction id at event ``n``.

    It is the current auction's id when event ``n`` is an auction (and -1 before the first
    auction).
    """
    n = np.asarray(n, dtype=np.int64)
    epoch = n // PROPORTION_DENOMINATOR
    offset = n % PROPORTION_DENOMINATOR
    is_person = offset < PERSON_PROPORTION
    is_bid = offset >= PERSON_PROPORTION + AUCTION_PROPORTION
    epoch = np.where(is_person, epoch - 1, epoch)
    offset = np.where(is_person | is_bid, AUCTION_PROPORTION - 1, offset - PERSON_PROPORTION)
    return epoch * AUCTION_PROPORTION + offset


def _next_base0_person_id(n: np.ndarray, h: np.ndarray, lead: int) -> np.ndarray:
    """``PersonGenerator.nextBase0PersonId``: a random active person (plus ``lead`` ahead)."""
    num_people = last_base0_person_id(n) + 1
    active = np.minimum(num_people, NUM_ACTIVE_PEOPLE)
    return num_people - active + _below(h, active + lead)


def _next_base0_auction_id(n: np.ndarray, h: np.ndarray, lead: int) -> np.ndarray:
    """``AuctionGenerator.nextBase0AuctionId``: a random in-flight auction (plus ``lead``)."""
    max_auction = last_base0_auction_id(n)
    min_auction = np.maximum(max_auction - NUM_IN_FLIGHT_AUCTIONS, 0)
    return min_auction + _below(h, max_auction - min_auction + 1 + lead)


def _next_price(h: np.ndarray) -> np.ndarray:
    """``PriceGenerator.nextPrice``: ``Math.round(10 ** (u * 6) * 100)``."""
    return np.floor(np.power(10.0, _unit(h) * 6.0) * 100.0 + 0.5).astype(np.int64)


# --------------------------------------------------------------------------------------
# Vectorised strings.
# --------------------------------------------------------------------------------------

# A string "part" is (bytes matrix (N, w) uint8, start (N,), end (N,)): row i is
# matrix[i, start[i]:end[i]]. Parts are concatenated row-wise into one Arrow array.
_Part = tuple[np.ndarray, np.ndarray, np.ndarray]


def _literal(text: str, count: int) -> _Part:
    """The same literal ``text`` on each of ``count`` rows."""
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    mat = np.broadcast_to(raw, (count, raw.size))
    return mat, np.zeros(count, dtype=np.int64), np.full(count, raw.size, dtype=np.int64)


def _to_string_array(parts: list[_Part], count: int) -> pa.Array:
    """Concatenate ``parts`` row-wise into a pyarrow string array of ``count`` rows."""
    if count == 0:
        return pa.array([], type=pa.string())
    mats, masks, lengths = [], [], np.zeros(count, dtype=np.int64)
    for mat, start, end in parts:
        cols = np.arange(mat.shape[1], dtype=np.int64)[None, :]
        mats.append(mat)
        masks.append((cols >= start[:, None]) & (cols < end[:, None]))
        lengths += np.maximum(end - start, 0)
    data = np.concatenate(mats, axis=1)[np.concatenate(masks, axis=1)]
    if data.size >= 2**31:
        raise ValueError("string column too large for one chunk; generate a smaller range")
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data)))


def _chars16(h: np.ndarray, width: int) -> np.ndarray:
    """``width`` independent 16-bit values per row from a ``(N, k)`` uint64 draw matrix."""
    return np.ascontiguousarray(h).view(np.uint16).reshape(h.shape[0], -1)[:, :width]


@cache
def _string_lut(special: str) -> np.ndarray:
    """Map a uniform 16-bit value to a char: ``special`` w.p. 1/13, else a uniform letter."""
    x = (np.arange(1 << 16, dtype=np.int64) * 338) >> 16  # uniform in [0, 338) = 13 * 26
    return np.where(x < 26, ord(special), ord("a") + (x - 26) % 26).astype(np.uint8)


@cache
def _letter_lut() -> np.ndarray:
    """Map a uniform 16-bit value to a uniform lowercase letter."""
    return (ord("a") + ((np.arange(1 << 16, dtype=np.int64) * 26) >> 16)).astype(np.uint8)


def _next_string(keys: np.ndarray, name: str, max_length: int, special: str = " ") -> _Part:
    """``StringsGenerator.nextString(random, maxLength, special)``, vectorised.

    Length uniform in ``[3, max_length)``; each char is ``special`` with probability 1/13,
    else a uniform lowercase letter; the result is trimmed of surrounding spaces (as Java's
    ``String.trim``).
    """
    count = keys.size
    width = max_length - 1
    length = _MIN_STRING_LENGTH + _below(_draw(keys, name + ".len"), max_length - _MIN_STRING_LENGTH)
    mat = _string_lut(special)[_chars16(_draws(keys, name + ".chars", (width + 3) // 4), width)]
    if special != " ":
        return mat, np.zeros(count, dtype=np.int64), length
    cols = np.arange(width, dtype=np.int64)[None, :]
    keep = (cols < length[:, None]) & (mat != ord(" "))
    any_kept = keep.any(axis=1)
    start = np.where(any_kept, np.argmax(keep, axis=1), 0)
    end = np.where(any_kept, width - np.argmax(keep[:, ::-1], axis=1), 0)
    return mat, start.astype(np.int64), end.astype(np.int64)


def _next_extra(keys: np.ndarray) -> pa.Array:
    """A short random lowercase ``extra`` string (3 to 5 chars)."""
    count = keys.size
    length = _EXTRA_MIN_LENGTH + _below(_draw(keys, "extra.len"), _EXTRA_MAX_LENGTH - _EXTRA_MIN_LENGTH + 1)
    draws = _draws(keys, "extra.chars", (_EXTRA_MAX_LENGTH + 3) // 4)
    mat = _letter_lut()[_chars16(draws, _EXTRA_MAX_LENGTH)]
    return _to_string_array([(mat, np.zeros(count, dtype=np.int64), length)], count)


def _take(table: pa.Array, idx: np.ndarray) -> pa.Array:
    """``table[idx]`` for a small string lookup table."""
    return table.take(pa.array(idx, type=pa.int64()))


_NAME_TABLE = pa.array([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES], type=pa.string())
_CITY_TABLE = pa.array(US_CITIES, type=pa.string())
_STATE_TABLE = pa.array(US_STATES, type=pa.string())
_CHANNEL_TABLE = pa.array(
    list(HOT_CHANNELS) + [f"channel-{k}" for k in range(CHANNELS_NUMBER)], type=pa.string()
)


def _java_abs_reverse(k: np.ndarray) -> np.ndarray:
    """``Math.abs(Integer.reverse(k))`` with Java int semantics (``abs(MIN_VALUE) == MIN_VALUE``)."""
    v = k.astype(np.uint32)
    v = ((v >> 1) & 0x55555555) | ((v & 0x55555555) << 1)
    v = ((v >> 2) & 0x33333333) | ((v & 0x33333333) << 2)
    v = ((v >> 4) & 0x0F0F0F0F) | ((v & 0x0F0F0F0F) << 4)
    v = ((v >> 8) & 0x00FF00FF) | ((v & 0x00FF00FF) << 8)
    v = (v >> 16) | (v << 16)
    signed = v.view(np.int32).astype(np.int64)
    return np.where(signed == -(2**31), signed, np.abs(signed))


@lru_cache(maxsize=16)
def _url_table(seed: int) -> pa.Array:
    """Urls of the 4 hot channels then of ``channel-0`` .. ``channel-9999`` for ``seed``.

    Flink's ``BidGenerator.getBaseUrl`` draws each url once per JVM with an unseeded
    ``Random``; here each is a hash of ``(seed, channel)``, so urls are reproducible.
    """
    count = len(HOT_CHANNELS) + CHANNELS_NUMBER
    keys = _event_keys(seed ^ 0x75726C73, np.arange(count, dtype=np.int64))  # "urls"
    parts = [_literal("https://www.nexmark.com/", count)]
    for i in range(3):
        parts += [_next_string(keys, f"url.seg{i}", 5, "_"), _literal("/", count)]
    parts.append(_literal("item.htm?query=1", count))
    base = _to_string_array(parts, count)
    channel = np.arange(count, dtype=np.int64) - len(HOT_CHANNELS)
    with_id = (channel >= 0) & (_below(_draw(keys, "url.with_id"), 10) > 0)
    ids = pa.array(_java_abs_reverse(np.maximum(channel, 0))).cast(pa.string())
    suffix = pc.binary_join_element_wise("&channel_id=", ids, "")
    suffix = pc.if_else(pa.array(with_id), suffix, "")
    return pc.binary_join_element_wise(base, suffix, "")


# --------------------------------------------------------------------------------------
# Event generation.
# --------------------------------------------------------------------------------------


def _ts_array(values: np.ndarray) -> pa.Array:
    """An int64 array of epoch microseconds as a ``timestamp[us, tz=UTC]`` Arrow array."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(_TS, values.size, [None, pa.py_buffer(values)])


def _check_stream(stream: str) -> None:
    """Raise ``ValueError`` for an unknown stream name."""
    if stream not in SCHEMAS:
        raise ValueError(f"unknown Nexmark stream {stream!r}; expected one of {', '.join(STREAMS)}")


def stream_event_numbers(config: NexmarkConfig, stream: str, first: int, last: int) -> np.ndarray:
    """Event numbers in ``[first, last)`` (clipped to ``[0, max_events)``) that are of ``stream``.

    Ascending int64 array.
    """
    _check_stream(stream)
    first, last = config._clip(int(first)), config._clip(int(last))
    if last <= first:
        return np.empty(0, dtype=np.int64)
    offsets = _STREAM_OFFSETS[stream]
    epochs = np.arange(
        first // PROPORTION_DENOMINATOR, (last - 1) // PROPORTION_DENOMINATOR + 1, dtype=np.int64
    )
    n = (epochs[:, None] * PROPORTION_DENOMINATOR + offsets[None, :]).ravel()
    lo = np.searchsorted(n, first, side="left")
    hi = np.searchsorted(n, last, side="left")
    return n[lo:hi]


def _event_time(config: NexmarkConfig, keys: np.ndarray, nominal: np.ndarray) -> np.ndarray:
    """``date_time`` of each event: nominal time minus a delay uniform in ``[0, out_of_order]``."""
    spread = config.out_of_order_us
    if spread <= 0:
        return nominal
    return nominal - _below(_draw(keys, "out_of_order"), spread + 1)


def _persons(config: NexmarkConfig, n: np.ndarray, keys: np.ndarray, date_time: np.ndarray) -> list[pa.Array]:
    """Columns of ``PERSON_SCHEMA`` for person events ``n`` (``PersonGenerator.nextPerson``)."""
    count = n.size
    ids = last_base0_person_id(n) + FIRST_PERSON_ID
    name_idx = _below(_draw(keys, "person.first"), len(FIRST_NAMES)) * len(LAST_NAMES) + _below(
        _draw(keys, "person.last"), len(LAST_NAMES)
    )
    email = _to_string_array(
        [
            _next_string(keys, "person.email.user", 7),
            _literal("@", count),
            _next_string(keys, "person.email.domain", 5),
            _literal(".com", count),
        ],
        count,
    )
    # Credit card: four zero-padded groups of 4 digits separated by spaces.
    groups = _below(_draws(keys, "person.card", 4), 10_000)
    digits = (groups[:, :, None] // np.array([1000, 100, 10, 1], dtype=np.int64)[None, None, :]) % 10
    card = np.full((count, 4, 5), ord(" "), dtype=np.uint8)
    card[:, :, :4] = (ord("0") + digits).astype(np.uint8)
    card = card.reshape(count, 20)
    credit_card = _to_string_array(
        [(card, np.zeros(count, dtype=np.int64), np.full(count, 19, dtype=np.int64))], count
    )
    city = _take(_CITY_TABLE, _below(_draw(keys, "person.city"), len(US_CITIES)))
    state = _take(_STATE_TABLE, _below(_draw(keys, "person.state"), len(US_STATES)))
    return [
        pa.array(ids),
        _take(_NAME_TABLE, name_idx),
        email,
        credit_card,
        city,
        state,
        _ts_array(date_time),
        _next_extra(keys),
    ]


def _auctions(
    config: NexmarkConfig, n: np.ndarray, keys: np.ndarray, date_time: np.ndarray
) -> list[pa.Array]:
    """Columns of ``AUCTION_SCHEMA`` for auction events ``n`` (``AuctionGenerator.nextAuction``)."""
    lead = 0 if config.strict_references else PERSON_ID_LEAD
    ids = last_base0_auction_id(n) + FIRST_AUCTION_ID
    hot = _below(_draw(keys, "auction.hot_seller"), HOT_SELLER_RATIO) > 0
    hot_seller = (last_base0_person_id(n) // HOT_BATCH) * HOT_BATCH
    seller = np.where(hot, hot_seller, _next_base0_person_id(n, _draw(keys, "auction.seller"), lead))
    seller += FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + _below(_draw(keys, "auction.category"), NUM_CATEGORIES)
    initial_bid = _next_price(_draw(keys, "auction.initial_bid"))
    reserve = initial_bid + _next_price(_draw(keys, "auction.reserve"))
    # nextAuctionLengthMs: uniform in [1, 2 * horizon] ms, where horizon is the time until the
    # auction NUM_IN_FLIGHT_AUCTIONS auctions ahead is generated.
    horizon_ms = (config.event_time_us(n + _NUM_EVENTS_FOR_AUCTIONS) - date_time) // 1000
    length_ms = 1 + _below(_draw(keys, "auction.length"), np.maximum(horizon_ms * 2, 1))
    expires = date_time + length_ms * 1000
    count = n.size
    return [
        pa.array(ids),
        _to_string_array([_next_string(keys, "auction.item_name", 20)], count),
        _to_string_array([_next_string(keys, "auction.description", 100)], count),
        pa.array(initial_bid),
        pa.array(reserve),
        _ts_array(date_time),
        _ts_array(expires),
        pa.array(seller),
        pa.array(category),
        _next_extra(keys),
    ]


def _bids(config: NexmarkConfig, n: np.ndarray, keys: np.ndarray, date_time: np.ndarray) -> list[pa.Array]:
    """Columns of ``BID_SCHEMA`` for bid events ``n`` (``BidGenerator.nextBid``)."""
    strict = config.strict_references
    last_person = last_base0_person_id(n)
    hot_auction = _below(_draw(keys, "bid.hot_auction"), HOT_AUCTION_RATIO) > 0
    auction = np.where(
        hot_auction,
        (last_base0_auction_id(n) // HOT_BATCH) * HOT_BATCH,
        _next_base0_auction_id(n, _draw(keys, "bid.auction"), 0 if strict else AUCTION_ID_LEAD),
    )
    auction += FIRST_AUCTION_ID
    hot_bidder = (last_person // HOT_BATCH) * HOT_BATCH + 1
    if strict:
        hot_bidder = np.minimum(hot_bidder, last_person)
    bidder = np.where(
        _below(_draw(keys, "bid.hot_bidder"), HOT_BIDDER_RATIO) > 0,
        hot_bidder,
        _next_base0_person_id(n, _draw(keys, "bid.bidder"), 0 if strict else PERSON_ID_LEAD),
    )
    bidder += FIRST_PERSON_ID
    price = _next_price(_draw(keys, "bid.price"))
    # Channel: half the bids on one of 4 hot channels, the rest on channel-0 .. channel-9999.
    channel_idx = np.where(
        _below(_draw(keys, "bid.hot_channel"), HOT_CHANNELS_RATIO) > 0,
        _below(_draw(keys, "bid.hot_channel_idx"), len(HOT_CHANNELS)),
        len(HOT_CHANNELS) + _below(_draw(keys, "bid.channel"), CHANNELS_NUMBER),
    )
    return [
        pa.array(auction),
        pa.array(bidder),
        pa.array(price),
        _take(_CHANNEL_TABLE, channel_idx),
        _take(_url_table(config.seed), channel_idx),
        _ts_array(date_time),
        _next_extra(keys),
    ]


_BUILDERS = {"person": _persons, "auction": _auctions, "bid": _bids}


def generate(config: NexmarkConfig, stream: str, first: int, last: int) -> pa.Table:
    """The ``stream`` events ("person", "auction" or "bid") among event numbers ``[first, last)``.

    The range is clipped to ``[0, max_events)``. Rows are in event-number order and follow
    :data:`SCHEMAS` ``[stream]``. Each row depends only on ``(config, n)``, so generating
    ``[a, c)`` equals concatenating ``[a, b)`` and ``[b, c)``.
    """
    _check_stream(stream)
    n = stream_event_numbers(config, stream, first, last)
    if n.size == 0:
        return SCHEMAS[stream].empty_table()
    keys = _event_keys(config.seed, n)
    date_time = _event_time(config, keys, config.event_time_us(n))
    columns = _BUILDERS[stream](config, n, keys, date_time)
    return pa.Table.from_arrays(columns, schema=SCHEMAS[stream])


def generate_all(config: NexmarkConfig, first: int, last: int) -> dict[str, pa.Table]:
    """All three streams among event numbers ``[first, last)``: ``{stream: table}``."""
    return {stream: generate(config, stream, first, last) for stream in STREAMS}


def write_parquet_windows(
    config: NexmarkConfig,
    out_dir: str | os.PathLike[str],
    num_events: int,
    window_s: float = 10,
    streams: Iterable[str] = STREAMS,
) -> dict[str, list[str]]:
    """Write events ``[0, num_events)`` as one Parquet file per nominal window per stream.

    Window ``w`` holds the events whose NOMINAL time lies in
    ``[start + w * window_s, start + (w + 1) * window_s)``; its rows go to
    ``out_dir/<stream>/part-<w:06d>.parquet`` (a file is written for every window, possibly
    with no rows). ``num_events`` is capped at ``max_events``. Events are generated in
    chunks of at most one million, so memory stays bounded however many events are written.
    Existing files of the same names are overwritten; others are left alone.

    Returns ``{stream: [path of window 0, path of window 1, ...]}``.
    """
    streams = tuple(streams)
    for stream in streams:
        _check_stream(stream)
    window_us = round(window_s * _US_PER_S)
    if window_us <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    total = config._clip(int(num_events))
    paths: dict[str, list[str]] = {stream: [] for stream in streams}
    if total == 0 or not streams:
        return paths
    for stream in streams:
        os.makedirs(os.path.join(out_dir, stream), exist_ok=True)
    last_offset_us = ((total - 1) * _US_PER_S) // config.events_per_second
    num_windows = last_offset_us // window_us + 1
    for w in range(num_windows):
        lo = min(max(config._first_event_at_or_after(w * window_us), 0), total)
        hi = min(max(config._first_event_at_or_after((w + 1) * window_us), 0), total)
        writers: dict[str, pq.ParquetWriter] = {}
        try:
            for stream in streams:
                path = os.path.join(os.fspath(out_dir), stream, f"part-{w:06d}.parquet")
                writers[stream] = pq.ParquetWriter(path, SCHEMAS[stream])
                paths[stream].append(path)
            for chunk_lo in range(lo, hi, _CHUNK_EVENTS):
                chunk_hi = min(chunk_lo + _CHUNK_EVENTS, hi)
                for stream in streams:
                    writers[stream].write_table(generate(config, stream, chunk_lo, chunk_hi))
        finally:
            for writer in writers.values():
                writer.close()
    return paths
