"""Collect sinks: committed windows as Parquet folders under LOCKGATE_HOME, read back whole.

A window's staged folder ``<home>/staging/<job>/<sink>/w=<W>-a<A>/`` is renamed to
``<home>/collect/<job>/<name>/lg_window=<W>/``; :func:`read_collected` reads every
committed window. No Spark import.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from lockgate.errors import SinkNotFoundError

from ...filesystems import join, list_dirs, location_uri, resolve
from ..staging import WINDOW_DIR, committed_window, window_dir_name
from .files import FolderCommitter, committed_windows_in


class CollectCommitter(FolderCommitter):
    """Collect sink: ``<home>/collect/<job>/<name>/lg_window=<W>/`` (Parquet)."""

    kind = "collect"

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.name = sink.get("name")

    def _root(self, job: str, sink_name: str) -> str:
        return collect_root(self.home, job, self.name or sink_name)


def collect_root(home: str, job: str, name: str) -> str:
    """Where the committed windows of collect sink ``name`` of ``job`` live."""
    return join(location_uri(home), "collect", job, name)


def read_collected(home: str, job: str, name: str) -> pa.Table:
    """All committed windows of collect sink ``name`` of ``job``, with an ``lg_window``
    (int64) column, in window order."""
    fs, root_path = resolve(collect_root(home, job, name))
    windows = committed_windows_in(fs, root_path)
    if not windows:
        _, job_path = resolve(join(location_uri(home), "collect", job))
        known = sorted(
            d
            for d in list_dirs(fs, job_path)
            if any(committed_window(w) is not None for w in list_dirs(fs, join(job_path, d)))
        )
        listing = ", ".join(repr(k) for k in known) if known else "none"
        raise SinkNotFoundError(
            f"job '{job}': collect sink {name!r} has no committed window under {home}. "
            f"Collect sinks of job '{job}' with committed windows: {listing}."
        )
    tables = []
    for w in windows:
        t = ds.dataset(join(root_path, window_dir_name(w)), format="parquet", filesystem=fs).to_table()
        if t.num_columns == 0:
            continue
        if WINDOW_DIR in t.column_names:
            t = t.drop_columns([WINDOW_DIR])
        tables.append(t.append_column(WINDOW_DIR, pa.repeat(pa.scalar(w, pa.int64()), t.num_rows)))
    if not tables:
        return pa.table({WINDOW_DIR: pa.array([], pa.int64())})
    return pa.concat_tables(tables, promote_options="permissive")
