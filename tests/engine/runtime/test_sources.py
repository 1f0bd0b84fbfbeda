"""Reading one window's slice of a file source: which files, which filter, which rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lockgate.clock import to_micros
from lockgate.runtime.invalid import FLAG
from lockgate.runtime.sources import read_slice, source_schema

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=10)


def _write(path: Path, seconds: list[float | None]) -> None:
    """A Parquet file of one record per entry of ``seconds`` (after T0; None: no event time)."""
    times = [None if s is None else T0 + timedelta(seconds=s) for s in seconds]
    pq.write_table(pa.table({"k": pa.array(range(len(times)), pa.int64()),
                             "ts": pa.array(times, pa.timestamp("us", tz="UTC"))}), path)


def _cfg(folder: Path) -> dict:
    return {"kind": "file", "path": str(folder), "format": "parquet", "event_time": "ts",
            "schema": "k BIGINT, ts TIMESTAMP", "arrival": None, "options": {}}


def _slice(spark, folder: Path, window: int):
    cfg = _cfg(folder)
    start = to_micros(T0 + window * WINDOW)
    return read_slice(spark, cfg, source_schema(cfg), start, start + to_micros(T0 + WINDOW) - to_micros(T0))


def _filtered(df) -> bool:
    """Whether the executed plan filters the rows it reads (a Filter operator or a pushed filter)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "+- Filter" in plan or "* Filter" in plan or "PushedFilters: []" not in plan


@pytest.fixture
def one_file_per_window(tmp_path: Path) -> Path:
    folder = tmp_path / "events"
    folder.mkdir()
    for w in range(3):
        _write(folder / f"part-{w}.parquet", [w * 10 + s for s in (0.0, 4.5, 9.999)])
    return folder


def test_files_inside_the_window_are_read_whole_without_a_filter(spark, one_file_per_window):
    piece = _slice(spark, one_file_per_window, 1)
    assert piece.position == {"until_us": to_micros(T0 + 2 * WINDOW), "files": 1}
    rows = sorted(r["ts"] for r in piece.df.collect())  # naive, in the session's UTC
    assert rows == [(T0 + timedelta(seconds=s)).replace(tzinfo=None) for s in (10.0, 14.5, 19.999)]
    # the footers prove every record is in the window and none lacks a time: no bounds in the plan
    assert FLAG not in piece.df.columns
    assert not _filtered(piece.df)


def test_a_file_straddling_the_window_is_filtered(spark, tmp_path):
    folder = tmp_path / "events"
    folder.mkdir()
    _write(folder / "a.parquet", [8.0, 12.0, 25.0])
    piece = _slice(spark, folder, 1)
    assert [r["ts"] for r in piece.df.collect()] == [(T0 + timedelta(seconds=12)).replace(tzinfo=None)]
    assert _filtered(piece.df)


def test_a_file_with_timeless_records_keeps_its_flag(spark, tmp_path):
    folder = tmp_path / "events"
    folder.mkdir()
    _write(folder / "a.parquet", [11.0, None, 13.0])
    piece = _slice(spark, folder, 1)
    # the record with no event time is kept and flagged, to be counted and named as invalid
    flags = sorted((r["ts"] is None, r[FLAG]) for r in piece.df.collect())
    assert flags == [(False, False), (False, False), (True, True)]
