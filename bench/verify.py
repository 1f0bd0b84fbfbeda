"""Correctness first: every contender's output, reduced to the workload's columns and
sorted, must equal the batch job's, or the run fails before any speed is reported.

Outputs are read without Spark:

- Lockgate's FileSink: ``<out>/lg_window=W/`` folders (the ``lg_window`` partition column
  is dropped; ``_staging`` and ``_retracted`` are skipped like every ``_`` name);
- Structured Streaming's file sink: only the files its ``_spark_metadata`` log lists, so
  files of a batch that was killed before it committed are not read (what Spark does);
- the batch job: every Parquet file of its output folder.

An updating result (a workload with a key) is read as its final current table, one row per
key. Lockgate and Structured Streaming both write its changelog, the rows each cycle or
micro-batch updated (Lockgate: ``lg_window=<W>/``; Structured Streaming's update-mode
``foreachBatch``: ``batch=<id>/``); a key's row is the one of its highest window or batch (a
Lockgate row whose ``op`` is a delete drops its key). The batch job writes the table itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from lockgate.runtime.changelog import DELETE, OP

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


def latest_per_key(table: pa.Table, key: tuple[str, ...], order: str) -> pa.Table:
    """Each key's row with the highest ``order`` (one row per key and ``order`` value assumed)."""
    last = table.group_by(list(key)).aggregate([(order, "max")])
    last = last.rename_columns([order if c == f"{order}_max" else c for c in last.column_names])
    return table.join(last, keys=[*key, order], join_type="inner")


def read_current(kind: str, out: Path, key: tuple[str, ...]) -> pa.Table:
    """An updating result's final current table (see the module doc)."""
    if kind == "batch":
        return read_output(kind, out)
    if not out.exists():
        return pa.table({})
    # Lockgate: the changelog's lg_window=<W> folders; Structured Streaming: batch=<id>
    order = "lg_window" if kind == "lockgate" else "batch"
    changes = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    if not changes.num_rows:
        return pa.table({})
    current = latest_per_key(changes, key, order)
    if OP in current.column_names:  # a key whose latest row deletes it is not in the table
        current = current.filter(pc.invert(pc.fill_null(pc.equal(current[OP], DELETE), False)))
    return current


def read_output(kind: str, out: str | Path, workload: str | None = None) -> pa.Table:
    """The rows a contender wrote to ``out`` (``kind``: lockgate, sss, sss_rocksdb, batch);
    for an updating ``workload``, its final current table."""
    out = Path(out)
    if workload is not None and WORKLOADS[workload].updating:
        return read_current(kind, out, WORKLOADS[workload].upsert_key)
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
