"""Correctness first: every contender's output, reduced to the workload's columns and
sorted, must equal the batch job's, or the run fails before any speed is reported.

Outputs are read without Spark:

- Lockgate's FileSink: ``<out>/lg_window=W/`` folders (the ``lg_window`` partition column
  is dropped; ``_staging`` and ``_retracted`` are skipped like every ``_`` name);
- Structured Streaming's file sink: only the files its ``_spark_metadata`` log lists, so
  files of a batch that was killed before it committed are not read (what Spark does);
- the batch job: every Parquet file of its output folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .workloads import WORKLOADS


class Mismatch(AssertionError):
    """A contender's output differs from the reference."""


def _sss_files(out: Path) -> list[str]:
    """The data files Structured Streaming's file sink committed (its metadata log)."""
    log = out / "_spark_metadata"
    if not log.is_dir():
        raise Mismatch(f"{out} has no _spark_metadata: not a Structured Streaming file sink output")
    entries = sorted(
        (p for p in log.iterdir() if not p.name.startswith(".") and p.name.split(".")[0].isdigit()),
        key=lambda p: int(p.name.split(".")[0]),
    )
    # the newest .compact holds every earlier entry; later batches follow it
    compacts = [p for p in entries if p.name.endswith(".compact")]
    if compacts:
        base = int(compacts[-1].name.split(".")[0])
        entries = [compacts[-1]] + [p for p in entries if int(p.name.split(".")[0]) > base]
    files: dict[str, bool] = {}
    for p in entries:
        for line in p.read_text().splitlines()[1:]:  # first line: the log version
            if not line.strip():
                continue
            e = json.loads(line)
            path = e["path"]
            path = path[len("file:") :] if path.startswith("file:") else path
            files[path] = e.get("action", "add") == "add"
    return sorted(p for p, keep in files.items() if keep)


def read_output(kind: str, out: str | Path) -> pa.Table:
    """The rows a contender wrote to ``out`` (``kind``: lockgate, sss, sss_rocksdb, batch)."""
    out = Path(out)
    if kind in ("sss", "sss_rocksdb"):
        files = _sss_files(out)
        if not files:
            return pa.table({})
        return pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
    if not out.exists():
        return pa.table({})
    partitioning = "hive" if kind == "lockgate" else None
    return ds.dataset(str(out), format="parquet", partitioning=partitioning).to_table()


def canonical(table: pa.Table, workload: str, end_us: int | None) -> pa.Table:
    """The workload's columns, in order, timestamps as UTC microseconds, rows sorted;
    windowed aggregates limited to the windows closed before the end of the data."""
    wl = WORKLOADS[workload]
    if table.num_columns == 0:
        raise Mismatch(f"{workload}: the output is empty")
    missing = [c for c in wl.columns if c not in table.column_names]
    if missing:
        raise Mismatch(f"{workload}: output lacks columns {missing} (has {table.column_names})")
    cols = []
    for c in wl.columns:
        col = table.column(c)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz="UTC"))
        cols.append(col)
    t = pa.table(cols, names=list(wl.columns))
    if wl.closed_windows_only and end_us is not None:
        end = pa.scalar(end_us, pa.timestamp("us", tz="UTC"))
        t = t.filter(pc.less(t.column("window_end"), end))
    return t.sort_by([(c, "ascending") for c in wl.columns]).combine_chunks()


def compare(ref: pa.Table, got: pa.Table, what: str) -> None:
    """Raise Mismatch with a short, useful diff unless ``got`` equals ``ref``."""
    if ref.schema != got.schema:
        raise Mismatch(f"{what}: schema differs:\n  reference {ref.schema}\n  got       {got.schema}")
    if ref.equals(got):
        return
    detail = [f"{what}: {got.num_rows} rows, reference {ref.num_rows}"]
    n = min(ref.num_rows, got.num_rows)
    step = 100_000
    for lo in range(0, n, step):
        a, b = ref.slice(lo, step), got.slice(lo, step)
        if not a.equals(b):
            for i in range(a.num_rows):
                ra, rb = a.slice(i, 1).to_pylist()[0], b.slice(i, 1).to_pylist()[0]
                if ra != rb:
                    detail.append(f"first difference at sorted row {lo + i}:\n  reference {ra}\n  got       {rb}")
                    break
            break
    raise Mismatch("\n".join(detail))


def summary(table: pa.Table) -> dict[str, Any]:
    return {"rows": table.num_rows}
