"""Records that break a source's contract: found while the window is read, counted with its
rows, dropped, and named in one line when the pipeline's rule is ``invalid="fail"``.

A file source's records are invalid when a CSV or JSON line does not parse into the declared
schema (Spark's ``PERMISSIVE`` mode keeps the line in a corrupt-record column, which is how it is
found: nothing is dropped by the reader) or when a record has no event time: no window can hold
it, so that one fails the window whatever the rule (:func:`timeless`). Each read of a file source carries a boolean :data:`FLAG` column; the round counts the
flagged rows in the same Spark job that counts the window's rows, and drops them before any
operator sees them. Under ``"fail"`` (the default) a window with any of them fails before
anything of it is committed, with :func:`describe` naming the source, the file, the column and
the count; under ``"skip"`` they are counted as the round's ``invalid_rows``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegralType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..errors import InvalidRecordsError

#: the reader's corrupt-record column of CSV and JSON sources (the line as it was)
CORRUPT = "_lg_corrupt"
#: true on a record that breaks the source's contract (dropped before any operator)
FLAG = "__lg_invalid"
#: the file formats whose lines are parsed into the declared schema
PARSED = ("csv", "json")


def rule_of(cfg: dict[str, Any]) -> str:
    """``"fail"`` or ``"skip"``: the source's (or graph operator's) rule for invalid records."""
    return cfg.get("invalid") or "fail"


def reader_schema(cfg: dict[str, Any], schema: StructType) -> StructType:
    """The schema a file source is read with: the declared one, plus the corrupt-record column
    for formats whose lines are parsed."""
    if cfg["format"] not in PARSED:
        return schema
    return StructType([*schema.fields, StructField(CORRUPT, StringType(), True)])


def reader_options(cfg: dict[str, Any]) -> dict[str, str]:
    """Spark reader options of a file source: the user's, then what keeps bad lines visible. A
    CSV header is checked against the schema's names (``enforceSchema=false``), so a headerless
    file read with ``header=True`` fails instead of losing its first row."""
    options = {k: str(v) for k, v in (cfg.get("options") or {}).items()}
    if cfg["format"] in PARSED:
        options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT)
    if cfg["format"] == "csv":
        header = str(options.pop("header", cfg.get("header", True))).lower() == "true"
        options["header"] = "true" if header else "false"
        if header:
            options.setdefault("enforceSchema", "false")
    return options


def flagged(cfg: dict[str, Any], df: DataFrame, time_col: str) -> DataFrame:
    """``df`` (a raw read of a file source) with :data:`FLAG`, and without the corrupt column."""
    bad: Column = F.col(time_col).isNull()
    if cfg["format"] in PARSED:
        bad = bad | F.col(CORRUPT).isNotNull()
    return df.withColumn(FLAG, bad)


def timeless(df: DataFrame, time_col: str) -> Column:
    """True on a record that parsed but has no event time: no cycle window holds it, so it fails
    the window whatever the rule (a line that did not parse at all is invalid by the rule)."""
    no_time = F.col(time_col).isNull()
    return no_time & F.col(CORRUPT).isNull() if CORRUPT in df.columns else no_time


def every_column(schema: StructType) -> Column:
    """An aggregate over every declared column of a parsed source, observed with the window's
    counts: Spark parses (and checks) only the columns a query reads, and this makes every line's
    every field read, so a line is invalid whatever the pipeline's operators use of it."""
    return F.max(F.xxhash64(*[F.col(f.name) for f in schema.fields if f.name != CORRUPT]))


def clean(df: DataFrame) -> DataFrame:
    """The valid records of a flagged read, as the source's declared columns."""
    if FLAG not in df.columns:
        return df
    return df.filter(~F.col(FLAG)).drop(FLAG, *([CORRUPT] if CORRUPT in df.columns else []))


# -- naming the problem ------------------------------------------------------------------------
def _parses(value: str, dtype: DataType) -> bool:
    """Whether one CSV field parses into ``dtype`` (a check for the message only, Spark decides)."""
    text = value.strip()
    if text == "":
        return True  # an empty field is a null
    try:
        if isinstance(dtype, IntegralType):
            int(text)
        elif isinstance(dtype, FloatType | DoubleType | DecimalType):
            float(text)
        elif isinstance(dtype, BooleanType):
            return text.lower() in ("true", "false")
        elif isinstance(dtype, TimestampType | TimestampNTZType | DateType):
            from datetime import datetime

            datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return False
    return True


def _bad_column(cfg: dict[str, Any], schema: StructType, line: str) -> tuple[str | None, str | None]:
    """``(column, found)`` of the first field of a corrupt line that does not fit the schema."""
    fields = [f for f in schema.fields if f.name != CORRUPT]
    if cfg["format"] == "csv":
        options = cfg.get("options") or {}
        sep = options.get("sep") or options.get("delimiter") or ","
        try:
            values = next(csv.reader(io.StringIO(line), delimiter=sep))
        except (csv.Error, StopIteration):
            return None, None
        if len(values) != len(fields):
            return None, f"{len(values)} fields where the schema has {len(fields)}"
        for f, v in zip(fields, values, strict=True):
            if not _parses(v, f.dataType):
                return f.name, repr(v)
        return None, None
    try:
        record = json.loads(line)
    except ValueError:
        return None, "a line that is not JSON"
    if not isinstance(record, dict):
        return None, "a JSON value that is not an object"
    for f in fields:
        v = record.get(f.name)
        if v is not None and not _parses(str(v), f.dataType):
            return f.name, repr(v)
    return None, None


def describe(source: str, cfg: dict[str, Any], schema: StructType, raw: DataFrame, count: int,
             time_col: str, no_time: bool = False) -> InvalidRecordsError:
    """One line naming the invalid records of a window: source, file, column, count and fix
    (reads the first few of them again, which only a failing window pays). ``no_time``: the
    records with no event time, which fail a window whatever the rule (no window holds them)."""
    sample = raw.withColumn("__lg_file", F.input_file_name())
    sample = flagged(cfg, sample, time_col)
    bad = timeless(sample, time_col) if no_time else F.col(FLAG)
    # every column read (no projection): a line is checked only in the columns a query reads
    rows = sample.filter(bad).limit(3).collect()
    first = rows[0] if rows else None
    file = first["__lg_file"] if first is not None else None
    column = found = None
    if not no_time and first is not None and cfg["format"] in PARSED and first[CORRUPT] is not None:
        column, found = _bad_column(cfg, schema, first[CORRUPT].rstrip("\r\n"))
        what = f"{'does' if count == 1 else 'do'} not parse into the declared schema"
        if column is not None:
            detail = f"column '{column}' {schema[column].dataType.simpleString().upper()}: {found} on the first"
        elif found is not None:
            detail = found
        else:
            detail = f"first: {first[CORRUPT][:80]!r}"
    else:
        column = time_col
        what = f"{'has' if count == 1 else 'have'} no event time (column '{time_col}' is null)"
        detail = None
    where = f" in {file}" if file else ""
    if no_time:
        fix = ("no cycle window holds a record without an event time, whatever invalid= says: fix the file "
               "(or remove the records)")
    else:
        fix = ("fix the file, or pass invalid='skip' (FileSource or Pipeline) to drop such records and count "
               "them as invalid_rows")
    if not no_time and cfg["format"] == "csv" and cfg.get("header", True) and column is not None:
        fix += "; a file without a header line needs FileSource(header=False)"
    message = (f"source '{source}': {count} record{'s' if count != 1 else ''}{where} {what}"
               f"{f' ({detail})' if detail else ''}: {fix}")
    return InvalidRecordsError(message, source=source, file=file, column=column, count=count)


_HEADER = re.compile(r"CSV header does not conform to the schema\.(?P<body>.*?)CSV file: (?P<file>\S+)", re.S)
_EXPECTED = re.compile(r"Expected: (?P<expected>.*?) but found: (?P<found>[^\n]*)")


def header_mismatch(exc: BaseException, sources: dict[str, dict[str, Any]]) -> InvalidRecordsError | None:
    """The one-line error of a CSV file whose first line is not a header naming the schema's
    columns (Spark's header check fails the read), or None when ``exc`` is something else.
    ``sources``: the plan's CSV sources' configs by name."""
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    while cause is not None and "CSV header does not conform" not in text:
        text = str(cause)
        cause = cause.__cause__ or cause.__context__
    m = _HEADER.search(text)
    if m is None:
        return None
    file = m.group("file")
    name = next((n for n, cfg in sources.items() if cfg["path"].rstrip("/").split("://")[-1] in file), None)
    wrong = _EXPECTED.search(m.group("body"))
    detail = f" (column '{wrong.group('expected')}' is headed '{wrong.group('found').strip()}')" if wrong else ""
    where = f"source '{name}'" if name else "a CSV source"
    return InvalidRecordsError(
        f"{where}: the first line of {file} is not a header naming the schema's columns{detail}: a file "
        "without a header line needs FileSource(header=False); one with other names needs a schema= in "
        "the header's order",
        source=name, file=file, column=wrong.group("expected") if wrong else None, count=1)


def null_ids(df: DataFrame, columns: list[str]) -> Column:
    """True on a row with a null in any of ``columns`` (a graph's ``src``, ``dst`` or ``id``)."""
    cond: Column | None = None
    for c in columns:
        term = F.col(c).isNull()
        cond = term if cond is None else cond | term
    return cond if cond is not None else F.lit(False)


__all__ = ["CORRUPT", "FLAG", "PARSED", "clean", "describe", "every_column", "flagged", "timeless", "header_mismatch", "null_ids",
           "reader_options",
           "reader_schema", "rule_of"]
