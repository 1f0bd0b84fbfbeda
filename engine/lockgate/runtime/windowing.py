"""Assigning records to the windows of windowed operators (event time in microseconds)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

WS, WE = "__ws", "__we"


def event_micros(column: str, is_end: bool) -> Column:
    """Event time of ``column`` in epoch microseconds; a window end (exclusive) counts as
    the last microsecond inside its window, so cascaded windows group results correctly."""
    t = F.unix_micros(F.col(column))
    return t - F.lit(1) if is_end else t


def window_time(spec: dict[str, Any], ts_col: str, ts_is_end: bool) -> Column:
    """The instant (µs) a windowed operator places a record at: the window's ``on=`` column,
    else the stream's event-time column ``ts_col``. ``ts_is_end`` (``ts_col`` holds an
    exclusive window end) applies to ``ts_col`` only, whether or not ``on=`` names it."""
    column = spec.get("on") or ts_col
    return event_micros(column, ts_is_end and column == ts_col)


def assign(df: DataFrame, spec: dict[str, Any], ts: Column) -> DataFrame:
    """Add ``__ws``/``__we`` (window start/end, µs) for tumbling and sliding windows;
    a record is repeated once per sliding window that holds it."""
    if spec["type"] == "tumbling":
        size = F.lit(spec["size_us"])
        start = ts - F.pmod(ts, size)
        return df.withColumns({WS: start, WE: start + size})  # one analysis, not two
    if spec["type"] == "sliding":
        size, slide = spec["size_us"], spec["slide_us"]
        n = -(-size // slide)
        last = ts - F.pmod(ts, F.lit(slide))
        starts = F.sequence(last - F.lit((n - 1) * slide), last, F.lit(slide))
        out = df.withColumn(WS, F.explode(starts)).withColumn(WE, F.col(WS) + F.lit(size))
        return out.filter(F.col(WE) > ts)
    raise ValueError(f"assign() does not handle {spec['type']} windows")


def to_timestamp(col: str | Column) -> Column:
    """Microseconds since the epoch (a column name or a Column) as a timestamp."""
    return F.timestamp_micros(F.col(col) if isinstance(col, str) else col)
