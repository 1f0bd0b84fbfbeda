"""Phase one of the sink protocol: stage a window's sink output.

During a cycle round for window ``W`` (attempt ``A``) the worker writes each sink's
DataFrame once, to a staging folder private to that attempt, and reports the returned
*staged descriptor* in CycleDone; the controller later commits it
(:mod:`lockgate.runtime.committers`, no Spark there). :func:`stage_sink` writes with Spark;
:func:`stage_table` writes a round's small output, collected on the driver, as one
Parquet file in the same layout.

Staging locations:

- file sink: ``<path>/_staging/<job>/w=<W:010d>-a<A>/`` in the sink's format and options
  (CSV with a header), so the commit is a rename on the same file system; readers of
  ``<path>`` skip ``_staging`` (Spark and pyarrow ignore names starting with ``_``);
- postgres, delta, iceberg and collect sinks: Parquet under
  ``<home>/staging/<job>/<sink_name>/w=<W:010d>-a<A>/``.

The descriptor is plain JSON::

    {"kind": "file" | "postgres" | "delta" | "iceberg" | "collect",
     "uri": "<absolute path or file system URI of the staged folder>",
     "rows": <rows written>,
     "format": "parquet" | "csv" | "json",
     "job": ..., "sink": <sink_name>, "window": W, "attempt": A,
     "columns": [<column names>]}
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from lockgate.api.sources import FILE_FORMATS
from lockgate.errors import CompileError

from ..filesystems import delete_path, join, resolve
from ..storage_errors import write_error
from .staging import staging_uri

#: Parquet written for pyarrow and ADBC: microsecond timestamps, instants marked UTC
#: (Spark's INT96 default would read back as naive nanoseconds).
PARQUET_OPTIONS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def _spark_path(uri: str) -> str:
    """A location Spark reads the same way pyarrow does: local paths as ``file:``."""
    return uri if "://" in uri else "file://" + uri


#: sinks staged as Parquet under LOCKGATE_HOME and committed by the controller from it
TABLE_SINKS = ("postgres", "delta", "iceberg", "collect")
#: sinks whose rows carry the window id in a column of theirs (``window_column``)
WINDOW_COLUMN_SINKS = ("postgres", "delta", "iceberg")


#: Spark types whose Arrow form pyarrow writes to Parquet exactly as Spark's own writer
#: does, so files of both paths read back with one schema (variant, geometry, intervals
#: and user-defined types are not: Arrow has them as structs or durations)
_PLAIN_TYPES = (
    BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType,
    StringType, BinaryType, DateType, TimestampType, TimestampNTZType,
)


def driver_writable(dt: DataType) -> bool:
    """True when values of Spark type ``dt`` (nested types included) can be collected with
    ``toArrow`` and written by pyarrow into Parquet that Spark reads back as ``dt``."""
    if isinstance(dt, StructType):
        return all(driver_writable(f.dataType) for f in dt.fields)
    if isinstance(dt, ArrayType):
        return driver_writable(dt.elementType)
    if isinstance(dt, MapType):
        return driver_writable(dt.keyType) and driver_writable(dt.valueType)
    return isinstance(dt, _PLAIN_TYPES)


def driver_stageable(sink: dict[str, Any]) -> bool:
    """True when the sink's staged output can be written from the driver as one Parquet
    file (:func:`stage_table`) exactly as Spark would write it: Parquet with no user
    options (compression, partitioning), or the Parquet a table or collect sink stages."""
    kind = sink.get("kind")
    if kind in TABLE_SINKS:
        return True
    return kind == "file" and (sink.get("format") or "parquet").lower() == "parquet" and not sink.get("options")


def stage_table(
    table: pa.Table,
    sink: dict[str, Any],
    *,
    job: str,
    sink_name: str,
    window: int,
    attempt: int,
    home: str,
) -> dict[str, Any]:
    """Stage ``table`` (the sink's output of a round, collected on the driver) as one
    Parquet file plus ``_SUCCESS``, the layout a Spark write leaves; return the same staged
    descriptor as :func:`stage_sink`. Only for sinks :func:`driver_stageable` accepts.

    A small round's output is cheaper to collect and write here than through Spark's
    file commit protocol (job and task commits, renames), which costs more than the write
    itself for a window's worth of rows. A leftover folder of the same attempt is replaced.
    """
    if not driver_stageable(sink):
        raise ValueError(f"sink {sink_name!r} cannot be staged from the driver: {sink!r}")
    if sink.get("kind") in WINDOW_COLUMN_SINKS:
        _check_window_column(sink, table.column_names, sink_name)
    uri = staging_uri(sink, job=job, sink_name=sink_name, window=window, attempt=attempt, home=home)
    try:
        fs, path = _empty_folder(uri)
        with fs.open_output_stream(join(path, f"part-00000-{uuid.uuid4()}.snappy.parquet")) as out:
            pq.write_table(table, out, compression="snappy")
        _mark_success(fs, path)
    except OSError as exc:
        _raise_write_failed(exc, sink, uri, job, sink_name, window, direct=True)
        raise
    return _descriptor(sink, uri, table.num_rows, "parquet", job, sink_name, window, attempt, table.column_names)


def _raise_write_failed(
    exc: BaseException, sink: dict[str, Any], uri: str, job: str, sink_name: str, window: int, direct: bool
) -> None:
    """Raise the Lockgate error of a staged write that failed for want of room or
    permission (the partial attempt is removed first: it is garbage, and it takes room);
    return when ``exc`` is another error."""
    if sink.get("kind") == "file":
        elsewhere = "give the FileSink a path on another disk"
    else:
        elsewhere = "point --home (LOCKGATE_HOME), where it is staged, at another disk"
    err = write_error(
        exc, uri, context=f"job '{job}', sink '{sink_name}', window {window}",
        what="the staged output", window=window, elsewhere=elsewhere, direct=direct,
    )
    if err is None:
        return
    with contextlib.suppress(Exception):  # best effort: the next run's clean-up removes it too
        delete_path(*resolve(uri))
    raise err from exc


def _empty_folder(uri: str) -> tuple[Any, str]:
    """The staged folder at ``uri``, emptied of any leftover of the same attempt."""
    fs, path = resolve(uri)
    delete_path(fs, path)
    fs.create_dir(path, recursive=True)
    return fs, path


def _mark_success(fs: Any, path: str) -> None:
    # Spark's marker of a finished write; a staged folder always has it, so a commit never
    # renames an empty or half-written folder
    fs.open_output_stream(join(path, "_SUCCESS")).close()


_SINK_CLASSES = {"postgres": ("PostgresSink", "PostgreSQL table"), "delta": ("DeltaSink", "Delta table"),
                 "iceberg": ("IcebergSink", "Iceberg table")}


def _check_window_column(sink: dict[str, Any], columns: list[str], sink_name: str) -> None:
    wc = sink.get("window_column") or "lg_window"
    if wc in columns:
        cls, what = _SINK_CLASSES[sink["kind"]]
        raise CompileError(
            f"the stream written to {what} {sink.get('table') or sink.get('path')!r} already has a "
            f"column {wc!r}, which holds the window id; rename it or set "
            f"{cls}(window_column=...)",
            sink_name,
        )


def _descriptor(
    sink: dict[str, Any], uri: str, rows: int, fmt: str, job: str, sink_name: str, window: int, attempt: int,
    columns: list[str],
) -> dict[str, Any]:
    return {
        "kind": sink.get("kind"),
        "uri": uri,
        "rows": rows,
        "format": fmt,
        "job": job,
        "sink": sink_name,
        "window": window,
        "attempt": attempt,
        "columns": list(columns),
    }


def stage_sink(
    df: DataFrame,
    sink: dict[str, Any],
    *,
    job: str,
    sink_name: str,
    window: int,
    attempt: int,
    home: str,
) -> dict[str, Any]:
    """Write ``df`` (one Spark write action, rows counted by an Observation during that
    write) to the sink's staging folder for ``(window, attempt)``; return the staged
    descriptor the controller commits. A leftover folder of the same attempt is
    overwritten."""
    columns = df.columns
    kind = sink.get("kind")
    if kind == "file":
        fmt = (sink.get("format") or "parquet").lower()
        if fmt not in FILE_FORMATS:
            raise CompileError(f"file sink format {fmt!r}: expected one of {list(FILE_FORMATS)}", sink_name)
        options = {str(k): str(v) for k, v in (sink.get("options") or {}).items()}
        if fmt == "csv":
            options.setdefault("header", "true")
    elif kind in TABLE_SINKS:
        fmt, options = "parquet", {}
        if kind in WINDOW_COLUMN_SINKS:
            _check_window_column(sink, columns, sink_name)
    else:
        raise CompileError(f"unknown sink kind {kind!r}; expected file, {', '.join(TABLE_SINKS)}", sink_name)
    if fmt == "parquet":
        options = {**PARQUET_OPTIONS, **options}

    uri = staging_uri(sink, job=job, sink_name=sink_name, window=window, attempt=attempt, home=home)
    obs = Observation(f"lg_rows_{uuid.uuid4().hex}")
    observed = df.observe(obs, F.count(F.lit(1)).alias("rows"))
    try:
        if not columns:
            # no file format stores zero columns: count through a no-op write and stage an
            # empty folder
            observed.write.format("noop").mode("overwrite").save()
            _mark_success(*_empty_folder(uri))
        else:
            observed.write.format(fmt).mode("overwrite").options(**options).save(_spark_path(uri))
    except Exception as exc:
        # Spark's errors name the file they wrote; pyarrow's (the empty folder) are ours
        _raise_write_failed(exc, sink, uri, job, sink_name, window, direct=isinstance(exc, OSError))
        raise
    return _descriptor(sink, uri, int(obs.get["rows"]), fmt, job, sink_name, window, attempt, columns)
