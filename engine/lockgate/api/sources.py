"""Sources: where a pipeline's records come from, sliced per cycle window.

A source is a declaration; the runtime (``lockgate.runtime.sources``) reads it. Every
source has an event-time column. By default a cycle window ``W`` reads the records whose
event time falls in ``W``; a source with an ``arrival`` column is sliced by that column
instead (the time a record became available), and its event time may lag behind, which
is what the watermark's allowed lateness is for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FILE_FORMATS = ("parquet", "csv", "json")
#: payload formats of a NatsSource's messages
NATS_FORMATS = ("json", "arrow")
#: what a pipeline does with a record that breaks its source's contract (see Pipeline(invalid=))
INVALID_RULES = ("fail", "skip")


def check_invalid(rule: str | None, where: str) -> str | None:
    """``rule`` if it is one of :data:`INVALID_RULES` (or None); a ValueError naming the fix otherwise."""
    if rule is not None and rule not in INVALID_RULES:
        raise ValueError(f"{where}: invalid={rule!r}: use 'fail' (a bad record fails the window, nothing is "
                         "committed) or 'skip' (bad records are dropped and counted as invalid_rows)")
    return rule


@dataclass(frozen=True)
class FileSource:
    """Parquet, CSV or JSON files in a folder or any Hadoop file system URI.

    :param path: folder (or URI) holding the files; new files may land between cycles.
    :param format: ``parquet``, ``csv`` or ``json``.
    :param event_time: the timestamp column windows are computed on.
    :param schema: Spark DDL (``"id BIGINT, ts TIMESTAMP"``); required for CSV and JSON,
        read from the files for Parquet when omitted.
    :param arrival: optional timestamp column that slices records into cycle windows.
    :param options: reader options passed to Spark (e.g. ``{"sep": ";"}``).
    :param header: CSV only: whether each file's first line names the columns (default True). A
        header must name the schema's columns in order, or the window fails naming the file: a
        headerless file read with ``header=True`` never loses its first row silently.
    :param invalid: ``"fail"`` or ``"skip"``: what a line that does not parse into ``schema``
        (CSV, JSON) does; None takes the pipeline's ``Pipeline(invalid=)`` (``"fail"`` by
        default). A record whose event time is null fails its window either way.

    >>> FileSource("data/bids", format="parquet", event_time="date_time")
    >>> FileSource("data/links", format="csv", schema="src BIGINT, dst BIGINT, ts TIMESTAMP", header=False)
    """

    path: str
    format: str = "parquet"
    event_time: str = "ts"
    schema: str | None = None
    arrival: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    header: bool = True
    invalid: str | None = None

    kind = "file"

    def __post_init__(self) -> None:
        check_invalid(self.invalid, f"FileSource({self.path!r})")
        owned = sorted(k for k in self.options if k.lower() in ("mode", "columnnameofcorruptrecord"))
        if owned:
            raise ValueError(f"FileSource({self.path!r}): options={owned} is Lockgate's to set (lines that do "
                             "not parse are read and counted, never dropped by the reader): choose what happens "
                             "to them with invalid='fail' or invalid='skip'")
        if "header" in self.options and str(self.options["header"]).lower() != str(self.header).lower():
            raise ValueError(f"FileSource({self.path!r}): options={{'header': {self.options['header']!r}}} and "
                             f"header={self.header} disagree: pass header=True or header=False alone")

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "format": self.format,
            "event_time": self.event_time,
            "schema": self.schema,
            "arrival": self.arrival,
            "options": dict(self.options),
            # only when set: the plans of sources without them stay as they were
            **({"header": False} if not self.header else {}),
            **({"invalid": self.invalid} if self.invalid else {}),
        }


@dataclass(frozen=True)
class NexmarkSource:
    """A deterministic, seeded generator of Nexmark events (Person, Auction or Bid).

    Events follow the Nexmark benchmark's generator: a 1:3:46 mix of persons, auctions
    and bids, hot auctions, bidders and sellers, ids derived from event numbers. Event
    ``n`` is due at ``start + n / events_per_second``; the same seed gives the same events
    on every run, whatever the cycle window, so replays are exact.

    :param stream: ``person``, ``auction`` or ``bid``.
    :param events_per_second: total event rate over all three streams.
    :param seed: generator seed.
    :param start: ISO timestamp of event 0 (UTC).
    :param max_events: stop after this many events (``None``: unbounded).
    :param out_of_order: spread, in seconds, of event time behind arrival; 0 keeps
        event time equal to arrival.
    :param arrival: name of a TIMESTAMP column to add holding each event's arrival time
        (``start + n / events_per_second``, the instant a live generator emits it): processing
        time with a definition a replay reproduces. Window on it for Nexmark q12's
        ``PROCTIME()`` windows: ``.window(lg.Tumbling(size, on="p_time"))``. ``None``: no column.
    """

    stream: str = "bid"
    events_per_second: int = 1000
    seed: int = 0
    start: str = "2026-01-01T00:00:00"
    max_events: int | None = None
    out_of_order: float = 0.0
    arrival: str | None = None

    kind = "nexmark"
    event_time = "date_time"

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "stream": self.stream,
            "events_per_second": self.events_per_second,
            "seed": self.seed,
            "start": self.start,
            "max_events": self.max_events,
            "out_of_order": self.out_of_order,
            "event_time": self.event_time,
            # only when asked for: the plans of sources without it stay as they were
            **({"arrival": self.arrival} if self.arrival else {}),
        }


@dataclass(frozen=True)
class PostgresSource:
    """A PostgreSQL table read by an event-time column, Arrow-native through ADBC.

    :param url: ``postgresql://user@host:port/database``.
    :param table: table name (optionally ``schema.table``).
    :param event_time: the timestamp column that slices rows into cycle windows.
    :param columns: columns to read (all when omitted).
    """

    url: str
    table: str
    event_time: str = "ts"
    columns: tuple[str, ...] | None = None
    arrival: str | None = None

    kind = "postgres"

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "url": self.url,
            "table": self.table,
            "event_time": self.event_time,
            "columns": list(self.columns) if self.columns else None,
            "arrival": self.arrival,
        }


@dataclass(frozen=True)
class NatsSource:
    """A NATS JetStream stream: a message log read by sequence range, replayed exactly.

    A cycle window's records are the messages of one sequence range, decided by arrival (the
    message's JetStream timestamp) when the window is first run and recorded in its checkpoint:
    the range starts right after the previous window's recorded last sequence (a job's first
    window: at the first message arriving at or after the window's start) and ends before the
    first message arriving at or after the window's end. A replay (after a crash, or a restore)
    reads the same messages even after more were published. Event time is a field of the
    message, held to the pipeline's watermark like any source sliced by arrival (records below
    it are late). See :mod:`lockgate.runtime.nats` for the rule and how a Kafka source fits it.

    :param url: ``nats://host:port`` of a server with JetStream.
    :param stream: the JetStream stream's name.
    :param subject: only the stream's messages on this subject (wildcards allowed); all when None.
    :param event_time: the payload's timestamp field windows are computed on.
    :param format: ``json`` (one JSON object per message; timestamps as ISO-8601 strings, UTC
        when without offset) or ``arrow`` (an Arrow IPC stream per message, with the schema's columns).
    :param schema: Spark DDL of the payload's fields (``"auction BIGINT, price BIGINT, ts TIMESTAMP"``).
    :param arrival: name of a TIMESTAMP column to add holding each message's JetStream timestamp
        (processing time a replay reproduces). None: no column.
    :param invalid: ``"fail"`` or ``"skip"``: what a message that does not parse into ``schema``
        does; None takes the pipeline's ``Pipeline(invalid=)``.

    >>> NatsSource("nats://127.0.0.1:4222", "bids", schema="auction BIGINT, price BIGINT, ts TIMESTAMP")
    """

    url: str
    stream: str
    subject: str | None = None
    event_time: str = "ts"
    format: str = "json"
    schema: str | None = None
    arrival: str | None = None
    invalid: str | None = None

    kind = "nats"

    def __post_init__(self) -> None:
        where = f"NatsSource({self.stream!r})"
        check_invalid(self.invalid, where)
        if self.format not in NATS_FORMATS:
            raise ValueError(f"{where}: format={self.format!r}: use one of {', '.join(NATS_FORMATS)}")
        if not self.schema:
            raise ValueError(f"{where}: pass schema= (Spark DDL of the message's fields, e.g. "
                             "\"auction BIGINT, price BIGINT, ts TIMESTAMP\")")
        if self.arrival is not None and self.arrival == self.event_time:
            raise ValueError(f"{where}: arrival={self.arrival!r} is the event-time field's name: call the "
                             "arrival column something else")

    def to_config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "url": self.url,
            "stream": self.stream,
            "subject": self.subject,
            "event_time": self.event_time,
            "format": self.format,
            "schema": self.schema,
            "arrival": self.arrival,
            **({"invalid": self.invalid} if self.invalid else {}),
        }


Source = FileSource | NexmarkSource | PostgresSource | NatsSource
