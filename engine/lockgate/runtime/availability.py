"""What a source holds now, without Spark: the slice positions available to read.

The controller decides which windows can run from these bounds, and it never imports
pyspark; the worker's reader (:mod:`lockgate.runtime.sources`) uses the same file listing
and Parquet footer ranges to skip files with no record in a window. Positions are
microseconds since the epoch (:mod:`lockgate.clock`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..clock import to_micros
from ..filesystems import list_data_files, resolve
from ..nexmark import NexmarkConfig


def slice_column(cfg: dict[str, Any]) -> str:
    """The column that assigns a record to a cycle window."""
    return cfg.get("arrival") or cfg["event_time"]


def slices_by_arrival(cfg: dict[str, Any]) -> bool:
    """True when event time may lag behind the slice position (late records possible). A NATS
    source is always sliced by arrival (the JetStream timestamp), its column or not."""
    return (bool(cfg.get("arrival")) or cfg["kind"] == "nats"
            or (cfg["kind"] == "nexmark" and cfg.get("out_of_order", 0) > 0))


def nexmark_config(cfg: dict[str, Any]) -> NexmarkConfig:
    """The generator configuration of a Nexmark source's config dict."""
    start = datetime.fromisoformat(cfg["start"])
    return NexmarkConfig(
        events_per_second=cfg["events_per_second"],
        seed=cfg["seed"],
        start=start if start.tzinfo else start.replace(tzinfo=UTC),
        max_events=cfg.get("max_events"),
        out_of_order_s=cfg.get("out_of_order", 0.0),
    )


# -- files -----------------------------------------------------------------------------
def list_files(path: str) -> list[pafs.FileInfo]:
    """The data files of a file source (a file, or a folder read recursively; hidden files
    and folders skipped), by path."""
    fs, root = resolve(path)
    return list_data_files(fs, root)


_STATS: dict[tuple[str, int, int, str], tuple[int, int] | None] = {}
#: rows with a value in the column, from the same footers (None: a row group without null counts)
_ROWS: dict[tuple[str, int, int, str], int | None] = {}
#: (min, max) of every integer column with statistics in each row group, from the same footers
_INTEGER_RANGES: dict[tuple[str, int, int], dict[str, tuple[int, int]]] = {}


def _integer_ranges(meta: pq.FileMetaData) -> dict[str, tuple[int, int]]:
    """(min, max) of each top-level signed integer column of a Parquet file (by lower-cased name) whose
    every row group has both in its statistics; nulls are not counted (a column of nulls only has
    no range)."""
    schema = meta.schema.to_arrow_schema()
    out: dict[str, tuple[int, int]] = {}
    for j in range(meta.num_columns):
        path = meta.schema.column(j).path
        if "." in path or schema.get_field_index(path) < 0 or not pa.types.is_signed_integer(schema.field(path).type):
            continue
        lo = hi = None
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(j).statistics
            if st is None or not st.has_min_max:
                lo = None
                break
            lo = st.min if lo is None else min(lo, st.min)
            hi = st.max if hi is None else max(hi, st.max)
        if lo is not None and hi is not None:
            out[path.lower()] = (int(lo), int(hi))
    return out


def parquet_integer_ranges(info: pafs.FileInfo) -> dict[str, tuple[int, int]] | None:
    """The integer columns' ranges of a Parquet file, once :func:`parquet_range` read its footer
    (None: not read)."""
    return _INTEGER_RANGES.get((info.path, info.size or 0, info.mtime_ns or 0))


def parquet_rows(info: pafs.FileInfo, column: str) -> int | None:
    """Rows of a Parquet file as its footer says, once :func:`parquet_range` read that footer
    (None: unknown, or the column holds a null somewhere)."""
    return _ROWS.get((info.path, info.size or 0, info.mtime_ns or 0, column))


def parquet_range(fs: pafs.FileSystem, info: pafs.FileInfo, column: str) -> tuple[int, int] | None:
    """(min, max) of ``column`` in µs from the footer, cached by path, size and mtime;
    ``None`` when the footer has no statistics for it."""
    key = (info.path, info.size or 0, info.mtime_ns or 0, column)
    if key not in _STATS:
        rng: tuple[int, int] | None = None
        try:
            with fs.open_input_file(info.path) as f:
                meta = pq.ParquetFile(f).metadata
            _INTEGER_RANGES[key[:3]] = _integer_ranges(meta)
            idx = meta.schema.to_arrow_schema().get_field_index(column)
            lo = hi = None
            rows: int | None = 0
            for rg in range(meta.num_row_groups):
                st = meta.row_group(rg).column(idx).statistics
                if st is None or not st.has_min_max:
                    lo = None
                    break
                if rows is not None:
                    # a null in the column is a record no window holds: such a file is counted by a
                    # scan, which finds it (lockgate.runtime.invalid), never by its footer
                    clean = st.has_null_count and st.null_count == 0
                    rows = rows + meta.row_group(rg).num_rows if clean else None
                mn, mx = to_micros(st.min), to_micros(st.max)
                lo = mn if lo is None else min(lo, mn)
                hi = mx if hi is None else max(hi, mx)
            if lo is not None and hi is not None:
                rng = (lo, hi)
                _ROWS[key] = rows
        except Exception:  # unreadable footer: let Spark read it and report
            rng = None
        _STATS[key] = rng
    return _STATS[key]


def file_ranges(cfg: dict[str, Any]) -> Iterator[tuple[pafs.FileInfo, tuple[int, int] | None]]:
    """Each data file of a file source with its slice-column range (``None``: unknown,
    always the case for formats other than Parquet); footers are read as iterated."""
    col = slice_column(cfg)
    fs, _ = resolve(cfg["path"])
    for info in list_files(cfg["path"]):
        yield info, (parquet_range(fs, info, col) if cfg["format"] == "parquet" else None)


# -- bounds ----------------------------------------------------------------------------
def available_until(cfg: dict[str, Any]) -> int | None:
    """Exclusive upper bound (µs) of the slice positions present in the source now;
    ``None`` when the source is unbounded in time (then wall-clock time is the bound: a NATS
    stream's windows are due once they have ended)."""
    kind = cfg["kind"]
    if kind == "nexmark":
        if cfg.get("max_events") is None:
            return None
        conf = nexmark_config(cfg)
        return int(conf.event_time_us(np.array([cfg["max_events"] - 1]))[0]) + 1
    if kind == "postgres":
        from .postgres import max_event_time

        t = max_event_time(cfg["url"], cfg["table"], slice_column(cfg))
        return None if t is None else to_micros(t) + 1
    if kind == "file":
        hi = None
        for _info, rng in file_ranges(cfg):
            if rng is None:
                return None
            hi = rng[1] if hi is None else max(hi, rng[1])
        return None if hi is None else hi + 1
    return None


def available_from(cfg: dict[str, Any]) -> int | None:
    """Earliest slice position (µs) present in the source, when the source can tell."""
    kind = cfg["kind"]
    if kind == "nexmark":
        return nexmark_config(cfg).start_us
    if kind == "nats":  # the arrival of the stream's first message
        from .nats import first_arrival

        return first_arrival(cfg)
    if kind == "file":
        lo = None
        for _info, rng in file_ranges(cfg):
            if rng is None:
                return None
            lo = rng[0] if lo is None else min(lo, rng[0])
        return lo
    return None
