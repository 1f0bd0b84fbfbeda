"""Key ranges: the (min, max) of a round's integer key values, known on the driver before any
Spark job, so that a state lookup reads only the layers' row groups that can hold them.

A running aggregate or a deduplication looks the state of the keys its window touched up in
every layer of the table's chain: a scan of the whole state for a window's worth of keys. When a
key column comes unchanged from a source whose slice the driver already knows (a Parquet
file's footer statistics, rows made on the driver), the window's values of that column lie in a
:data:`KeyRange`. The lookup then filters every layer by it, ``key BETWEEN lo AND hi OR key IS
NULL``: Spark pushes that filter into the Parquet scan, which skips every row group whose
statistics lie outside the range. State layers are written sorted by their identity
(:func:`sort_columns`) in row groups of :data:`LAYER_ROW_GROUP_ROWS` rows, so a key range that is
narrow next to the state (ids of recent auctions, active users) reads a few row groups, not the
state. Exact either way: a row outside the range has a key no record of the window carries, which
the lookup's semi-join would drop anyway.

A range passes through operators that keep their input's values (a filter, a new column that does
not replace a ranged column) and is dropped by any other. ``LOCKGATE_KEY_RANGES=0`` turns the
filters off.

    >>> ranges = {"auction": (1_000, 1_180)}
    >>> str(range_filter(ranges, ["auction"]))                       # doctest: +SKIP
    "Column<'(((auction >= 1000) AND (auction <= 1180)) OR (auction IS NULL))'>"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType, StructType

from ..settings import switch

#: (lowest, highest) value of one integer column (nulls aside); an end may be several values
#: whose least (lowest) or greatest (highest) it is: a join's key ranges over both of its sides,
#: which in a round template are parameters, each bound to its own side's value
KeyRange = tuple[int | tuple[int, ...], int | tuple[int, ...]]
#: a frame's ranged columns, by lower-cased name
Ranges = dict[str, KeyRange]

#: rows per row group of a state layer: row groups are what a key range lets a scan skip
LAYER_ROW_GROUP_ROWS = 16_384
#: Spark's Parquet writer sizes row groups in bytes (``parquet.block.size``): 1 MiB, a few
#: ten thousand rows of a typical state table
LAYER_ROW_GROUP_BYTES = 1 << 20
_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
#: operators whose output rows carry their input's values in every column they keep
_KEEPS_VALUES = frozenset({"filter", "with_column"})


def enabled() -> bool:
    """Whether state lookups are filtered by key ranges (``LOCKGATE_KEY_RANGES=0``: never)."""
    return switch("LOCKGATE_KEY_RANGES")


def of_schema(ranges: Mapping[str, KeyRange] | None, schema: StructType) -> Ranges:
    """``ranges`` restricted to the integer columns of ``schema`` (lower-cased names)."""
    if not ranges:
        return {}
    integral = {f.name.lower() for f in schema.fields if isinstance(f.dataType, _INTEGRAL)}
    return {c: r for c, r in ranges.items() if c in integral}


def union(parts: Iterable[Mapping[str, KeyRange] | None]) -> Ranges:
    """The ranges that hold over all of ``parts`` (rows of several files): a column is ranged
    only when every part ranges it; one part unknown (None) leaves nothing ranged."""
    out: Ranges | None = None
    for part in parts:
        if part is None:
            return {}
        if out is None:
            out = dict(part)
            continue
        out = {c: (min(_ends(r[0]) + _ends(part[c][0])), max(_ends(r[1]) + _ends(part[c][1])))
               for c, r in out.items() if c in part}
    return out or {}


def of_table(table: pa.Table) -> Ranges:
    """The ranges of a table's signed integer columns, computed on the driver (a column of nulls
    only, or no rows, has none)."""
    out: Ranges = {}
    for field in table.schema:
        if not pa.types.is_signed_integer(field.type):
            continue
        mm = pc.min_max(table[field.name])
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is not None and hi is not None:
            out[field.name.lower()] = (int(lo), int(hi))
    return out


def passed(op: str, config: Mapping[str, object], ranges: Ranges) -> Ranges:
    """The ranges that hold after operator ``op`` (its ``config``) when ``ranges`` hold before it."""
    if op not in _KEEPS_VALUES:
        return {}
    if op == "with_column":
        replaced = str(config["column"]).lower()
        return {c: r for c, r in ranges.items() if c != replaced}
    return dict(ranges)


def on(ranges: Mapping[str, KeyRange] | None, columns: Sequence[str]) -> dict[str, KeyRange]:
    """The ranges of ``columns`` (by their own names, matched case-insensitively)."""
    if not ranges or not enabled():
        return {}
    return {c: ranges[c.lower()] for c in columns if c.lower() in ranges}


def renamed(ranges: Mapping[str, KeyRange] | None, columns: Sequence[str], as_: Sequence[str]) -> dict[str, KeyRange]:
    """The ranges of ``columns`` under the names ``as_`` (a join's keys, looked up on its other side)."""
    out = on(ranges, columns)
    return {a: out[c] for c, a in zip(columns, as_, strict=True) if c in out}


def join_output(
    left: Mapping[str, KeyRange] | None, right: Mapping[str, KeyRange] | None, left_on: Sequence[str],
    right_on: Sequence[str], right_out: Mapping[str, str],
) -> Ranges:
    """The ranges of an inner equi-join's key columns over this round's pairs, each holding a new
    record of one side (``left`` or ``right``: their ranges) with equal keys: under the left key's
    name and the right key's output name (``right_out``), the union of both sides' ranges. Other
    columns may come from either side's state, so they have none."""
    if not left or not right or not enabled():
        return {}
    out: Ranges = {}
    for lk, rk in zip(left_on, right_on, strict=True):
        a, b = left.get(lk.lower()), right.get(rk.lower())
        if a is not None and b is not None:
            both = (_ends(a[0]) + _ends(b[0]), _ends(a[1]) + _ends(b[1]))
            out[lk.lower()] = both
            out[right_out[rk].lower()] = both
    return out


def range_filter(ranges: Mapping[str, KeyRange]) -> Column | None:
    """Rows whose every ranged column is in its range or null (None: no range)."""
    cond = None
    for c, (lo, hi) in ranges.items():
        col = F.col(c)
        term = ((col >= _end(lo, F.least)) & (col <= _end(hi, F.greatest))) | col.isNull()
        cond = term if cond is None else cond & term
    return cond


def _ends(end: int | tuple[int, ...]) -> tuple[int, ...]:
    return end if isinstance(end, tuple) else (end,)


def _end(end: int | tuple[int, ...], pick: Callable[..., Column]) -> Column:
    """One end of a range as a column: its value, or the least or greatest (``pick``) of its values
    (Spark folds that to a literal when it optimises the plan, before pushing the filter down)."""
    values = _ends(end)
    return F.lit(values[0]) if len(values) == 1 else pick(*[F.lit(v) for v in values])


def parameter(source: str, column: str, end: str) -> str:
    """The round template parameter of a source's column range's ``end`` (``lo`` or ``hi``)."""
    return f"range:{source}:{column}:{end}"


def sort_columns(identity: Sequence[str] | None, schema: pa.Schema | StructType) -> list[str]:
    """The identity's columns a layer is sorted by: its leading columns of plain types (integers,
    strings, times), up to the first that is not; [] when there is none or no identity."""
    if not identity:
        return []
    if isinstance(schema, StructType):
        types = {f.name: f.dataType.typeName() for f in schema.fields}
        plain = {"byte", "short", "integer", "long", "string", "date", "timestamp", "timestamp_ntz", "boolean"}
        ok = [types.get(c) in plain for c in identity]
    else:
        names = set(schema.names)
        ok = [c in names and _plain_arrow(schema.field(c).type) for c in identity]
    out = []
    for c, good in zip(identity, ok, strict=True):
        if not good:
            break
        out.append(c)
    return out


def _plain_arrow(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_boolean(t))


__all__ = ["KeyRange", "LAYER_ROW_GROUP_BYTES", "LAYER_ROW_GROUP_ROWS", "Ranges", "enabled", "join_output",
           "of_schema", "of_table", "on", "parameter", "passed", "range_filter", "renamed", "sort_columns", "union"]
