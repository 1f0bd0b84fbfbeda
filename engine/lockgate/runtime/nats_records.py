"""A NATS source's messages as records: payloads parsed into the declared schema on the driver.

``format="json"``: each payload is one JSON object, parsed with pyarrow's JSON reader into the
source's Spark DDL schema (fields not in the schema ignored, missing ones null; timestamps as
ISO-8601 strings, UTC when they carry no offset). A window's payloads are parsed in one call;
only when that fails are they parsed one by one, to find the messages that do not parse.
``format="arrow"``: each payload is an Arrow IPC stream whose columns include the schema's,
cast to it.

A message that does not parse is an invalid record (:mod:`lockgate.runtime.invalid`): under
``invalid="fail"`` the window fails with one line naming the stream, the sequences and the fix;
under ``"skip"`` it is dropped and counted. A record with no event time fails the window
whatever the rule: no window holds it.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ..errors import InvalidRecordsError
from .nats import LogSlice

#: payload formats a NatsSource reads
NATS_FORMATS = ("json", "arrow")


def declared(cfg: dict[str, Any], schema: StructType) -> StructType:
    """The payload's columns: the source's schema without its arrival column."""
    return StructType([f for f in schema.fields if f.name != cfg.get("arrival")])


def to_table(cfg: dict[str, Any], schema: StructType, piece: LogSlice) -> tuple[pa.Table, int]:
    """The window's records as an Arrow table of ``schema`` (the arrival column last, when the
    source has one) and the number of invalid messages dropped (``invalid="skip"``)."""
    target = to_arrow_schema(declared(cfg, schema), timezone="UTC")
    parse = _json if cfg.get("format", "json") == "json" else _arrow
    table, rows = parse(piece.payloads, target)
    bad = [i for i, n in enumerate(rows) if n is None]
    if bad and (cfg.get("invalid") or "fail") == "fail":
        raise _invalid(cfg, [piece.seqs[i] for i in bad], "do not parse into the declared schema")
    # each record's message: its sequence and arrival (an Arrow payload may hold several records)
    seqs = [s for s, n in zip(piece.seqs, rows, strict=True) for _ in range(n or 0)]
    arrivals = pa.array([a for a, n in zip(piece.arrivals, rows, strict=True) for _ in range(n or 0)], pa.int64())
    no_time = table[cfg["event_time"]].is_null()
    if table.num_rows and pc.any(no_time).as_py():
        nulls = [s for s, null in zip(seqs, no_time.to_pylist(), strict=True) if null]
        raise _invalid(cfg, nulls, f"have no event time (field {cfg['event_time']!r} missing or null)",
                       always=True)
    if cfg.get("arrival"):
        arrival_type = to_arrow_schema(schema, timezone="UTC").field(cfg["arrival"]).type
        table = table.append_column(pa.field(cfg["arrival"], arrival_type), arrivals.cast(arrival_type))
    return table, len(bad)


def _invalid(cfg: dict[str, Any], seqs: list[int], what: str, always: bool = False) -> InvalidRecordsError:
    shown = ", ".join(str(s) for s in seqs[:5]) + (", ..." if len(seqs) > 5 else "")
    n = len(seqs)
    fix = ("fix the publisher (such a record is in no window, whatever invalid= says)" if always else
           "fix the publisher, or pass invalid='skip' (NatsSource or Pipeline) to drop such messages and count "
           "them as invalid_rows")
    return InvalidRecordsError(
        f"NATS source stream {cfg['stream']!r}: {n} message{'s' if n != 1 else ''} (sequence{'s' if n != 1 else ''} "
        f"{shown}) {what}: {fix}",
        source=cfg["stream"], column=cfg["event_time"] if always else None, count=n,
    )


def _json(payloads: list[bytes], target: pa.Schema) -> tuple[pa.Table, list[int | None]]:
    """Payloads parsed as JSON objects, and the records of each (None: it does not parse)."""
    options = pj.ParseOptions(explicit_schema=target, unexpected_field_behavior="ignore")
    if not payloads:
        return target.empty_table(), []
    lines = [p if b"\n" not in p and b"\r" not in p else _one_line(p) for p in payloads]
    try:
        table = pj.read_json(io.BytesIO(b"\n".join(lines)), parse_options=options)
        if table.num_rows == len(payloads) and all(line.strip() for line in lines):
            return table.select(target.names).cast(target), [1] * len(payloads)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    parts: list[pa.Table] = []
    rows: list[int | None] = []
    for line in lines:
        try:
            one = pj.read_json(io.BytesIO(line), parse_options=options) if line.strip() else None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            one = None
        if one is None or one.num_rows != 1:
            rows.append(None)
        else:
            parts.append(one.select(target.names).cast(target))
            rows.append(1)
    return (pa.concat_tables(parts) if parts else target.empty_table()), rows


def _one_line(payload: bytes) -> bytes:
    """A JSON payload written over several lines, on one (unchanged when it is not JSON)."""
    try:
        return json.dumps(json.loads(payload), separators=(",", ":")).encode()
    except ValueError:
        return payload.replace(b"\r", b" ").replace(b"\n", b" ")


def _arrow(payloads: list[bytes], target: pa.Schema) -> tuple[pa.Table, list[int | None]]:
    """Payloads read as Arrow IPC streams cast to the schema, and the records of each (None: not
    an Arrow stream holding the schema's columns)."""
    parts: list[pa.Table] = []
    rows: list[int | None] = []
    for payload in payloads:
        try:
            one = pa.ipc.open_stream(payload).read_all().select(target.names).cast(target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError, ValueError):
            rows.append(None)
            continue
        parts.append(one)
        rows.append(one.num_rows)
    return (pa.concat_tables(parts) if parts else target.empty_table()), rows
