"""The benchmark's input: Nexmark events written by the engine's own generator
(:func:`lockgate.nexmark.write_parquet_windows`), one Parquet file per 10 s event-time
window per stream, before anything is timed.

Modification times are set to increase with the window id, so Structured Streaming's
file source (which orders new files by modification time, in milliseconds) takes them
in event-time order, as Lockgate's cycles do.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from lockgate.nexmark import STREAMS, NexmarkConfig, write_parquet_windows

from .config import FILE_WINDOW_S, SEED, START, Size

_MANIFEST = "bench-data.json"


def nexmark_config(size: Size) -> NexmarkConfig:
    return NexmarkConfig(events_per_second=size.events_per_second, seed=SEED, start=START, max_events=size.events)


def _spec(size: Size) -> dict[str, Any]:
    return {
        "events": size.events,
        "windows": size.windows,
        "events_per_second": size.events_per_second,
        "seed": SEED,
        "start": START.isoformat(),
        "window_s": FILE_WINDOW_S,
        "generator": "lockgate.nexmark.write_parquet_windows",
    }


def _set_mtimes(root: Path, windows: int) -> None:
    base = 1_700_000_000  # any fixed instant in the past; one second per window
    for w in range(windows):
        for stream in STREAMS:
            path = root / stream / f"part-{w:06d}.parquet"
            os.utime(path, (base + w, base + w))


def ensure_data(size: Size, work: Path) -> dict[str, Any]:
    """Generate the data set of ``size`` under ``work/data/<size>`` unless it is there
    already (same generator parameters); return its description."""
    root = work / "data" / size.name
    manifest = root / _MANIFEST
    spec = _spec(size)
    if manifest.exists():
        known = json.loads(manifest.read_text())
        if known.get("spec") == spec:
            return known
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    paths = write_parquet_windows(nexmark_config(size), root, size.events, window_s=FILE_WINDOW_S)
    if any(len(p) != size.windows for p in paths.values()):
        raise RuntimeError(f"generator wrote {[len(p) for p in paths.values()]} files, expected {size.windows}")
    _set_mtimes(root, size.windows)
    rows = {s: sum(pq.read_metadata(p).num_rows for p in ps) for s, ps in paths.items()}
    desc = {
        "spec": spec,
        "root": str(root),
        "rows": rows,
        "bytes": sum(f.stat().st_size for f in root.rglob("*.parquet")),
        "start_us": int(START.timestamp() * 1_000_000),
        "end_us": int(START.timestamp() * 1_000_000) + size.windows * FILE_WINDOW_S * 1_000_000,
    }
    manifest.write_text(json.dumps(desc, indent=1))
    return desc


def subset(desc: dict[str, Any], windows: int, dest: Path) -> dict[str, Any]:
    """The first ``windows`` file windows of a data set, as hard links under ``dest``
    (same bytes and modification times, no copy)."""
    src = Path(desc["root"])
    if dest.exists():
        shutil.rmtree(dest)
    rows = {}
    for stream in STREAMS:
        (dest / stream).mkdir(parents=True)
        n = 0
        for w in range(windows):
            name = f"part-{w:06d}.parquet"
            os.link(src / stream / name, dest / stream / name)
            n += pq.read_metadata(dest / stream / name).num_rows
        rows[stream] = n
    out = dict(desc)
    out.update(
        root=str(dest),
        rows=rows,
        end_us=desc["start_us"] + windows * FILE_WINDOW_S * 1_000_000,
        spec={**desc["spec"], "windows": windows},
    )
    return out
