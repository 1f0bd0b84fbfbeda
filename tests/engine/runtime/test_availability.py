"""Source bounds without Spark: what the controller imports to decide which windows can run."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lockgate.clock import to_micros
from lockgate.runtime.availability import (
    available_from,
    available_until,
    nexmark_config,
    slice_column,
    slices_by_arrival,
)

NO_SPARK = """
import sys
import lockgate.filesystems, lockgate.runtime.availability, lockgate.runtime.committers
import lockgate.runtime.staging, lockgate.checkpoint.snapshots
loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
print(",".join(loaded) or "none")
"""

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_bounds_committers_and_file_systems_import_no_pyspark():
    out = subprocess.run([sys.executable, "-c", NO_SPARK], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "none", out.stdout[:500]
    assert "pyspark" not in out.stdout


def _nexmark(**kw) -> dict:
    cfg = {
        "kind": "nexmark",
        "stream": "bid",
        "events_per_second": 10,
        "seed": 7,
        "start": T0.replace(tzinfo=None).isoformat(),
        "event_time": "date_time",
    }
    return {**cfg, **kw}


def test_nexmark_bounds():
    bounded = _nexmark(max_events=100)
    assert available_from(bounded) == to_micros(T0)
    conf = nexmark_config(bounded)
    assert conf.start == T0  # a naive start is UTC
    assert available_until(bounded) == int(conf.event_time_us(np.array([99]))[0]) + 1
    assert available_until(_nexmark()) is None  # unbounded: the wall clock bounds it
    assert not slices_by_arrival(bounded)
    assert slices_by_arrival(_nexmark(out_of_order=2.0))


def test_file_bounds_from_parquet_footers(tmp_path):
    for i in range(3):
        ts = pa.array([T0 + timedelta(seconds=10 * i + s) for s in (0, 7)], pa.timestamp("us", tz="UTC"))
        arrival = pa.array([T0 + timedelta(seconds=10 * i + s + 60) for s in (0, 7)], pa.timestamp("us", tz="UTC"))
        pq.write_table(pa.table({"ts": ts, "arrived": arrival}), tmp_path / f"part-{i}.parquet")
    cfg = {"kind": "file", "path": str(tmp_path), "format": "parquet", "event_time": "ts"}
    assert slice_column(cfg) == "ts"
    assert available_from(cfg) == to_micros(T0)
    assert available_until(cfg) == to_micros(T0 + timedelta(seconds=27)) + 1
    by_arrival = {**cfg, "arrival": "arrived"}
    assert slice_column(by_arrival) == "arrived" and slices_by_arrival(by_arrival)
    assert available_from(by_arrival) == to_micros(T0 + timedelta(seconds=60))
    # no footer statistics to read (CSV), or no files at all: the source cannot tell
    assert available_until({**cfg, "format": "csv"}) is None
    assert available_from({**cfg, "format": "csv"}) is None
    empty = {**cfg, "path": str(tmp_path / "none")}
    assert available_until(empty) is None and available_from(empty) is None


def test_nanosecond_footers_are_floored_to_microseconds(tmp_path):
    ts = pa.array([to_micros(T0) * 1000 + 1999], pa.timestamp("ns"))
    pq.write_table(pa.table({"ts": ts}), tmp_path / "ns.parquet", coerce_timestamps=None, version="2.6")
    cfg = {"kind": "file", "path": f"file://{tmp_path}", "format": "parquet", "event_time": "ts"}
    assert available_from(cfg) == to_micros(T0) + 1
