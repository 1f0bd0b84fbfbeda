"""The state folder of a graph computation: where each superstep's vertex state lives in Parquet.

Layout (``folder`` is a local path or a file system URI, see :mod:`lockgate.filesystems`)::

    folder/
      _graph.json              the program (name, parameters), vertex count, value/message types
      edges/                   the edges (Parquet), written once at the start; absent when the run
                               was given ``stored_edges`` (the manifest's ``edge_sources`` says where
                               they are: those locations and new_edges/)
      new_edges/               a dynamic run's new edges (Parquet), the routes of its evolve step
      superstep-00000/         the vertex state after init (Parquet) and _superstep.json
      superstep-00001/         after superstep 1 ...

A superstep is *complete* when its ``_superstep.json`` (its stats, the program's aggregates and
whether the computation halted there) exists: it is written, atomically where the file system
renames atomically, after Spark committed the Parquet files. A folder left by a killed run may hold
a half-written superstep with no record: a resume ignores and overwrites it.

The state Parquet has one row per vertex: ``id``, the vertex attributes, ``__value``, ``__inbox``
(the combined messages to deliver in the next superstep, null where none), ``__n`` (how many),
``__out_degree`` and ``__in_degree``.

>>> folder = StateFolder("/tmp/pagerank-state")
>>> folder.superstep_uri(3)
'/tmp/pagerank-state/superstep-00003'
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lockgate import filesystems as lfs

MANIFEST = "_graph.json"
RECORD = "_superstep.json"
_PREFIX = "superstep-"


def superstep_dir(superstep: int) -> str:
    """The folder name of a superstep's state: ``superstep-00042``.

    >>> superstep_dir(42)
    'superstep-00042'
    """
    return f"{_PREFIX}{superstep:05d}"


@dataclass
class StateFolder:
    """A graph computation's state folder (see the module's docstring for its layout).

    >>> StateFolder("file:///data/cc").edges_uri
    'file:///data/cc/edges'
    """

    location: str
    uri: str = field(init=False)
    fs: pafs.FileSystem = field(init=False, repr=False)
    path: str = field(init=False)

    def __post_init__(self) -> None:
        self.uri = lfs.location_uri(self.location)
        self.fs, self.path = lfs.resolve(self.location)

    @property
    def edges_uri(self) -> str:
        """Where the edges are (Parquet), as Spark reads it."""
        return lfs.join(self.uri, "edges")

    @property
    def new_edges_uri(self) -> str:
        """Where a dynamic run's new edges are (Parquet)."""
        return lfs.join(self.uri, "new_edges")

    def superstep_uri(self, superstep: int) -> str:
        """Where superstep ``superstep``'s vertex state is (Parquet), as Spark reads it."""
        return lfs.join(self.uri, superstep_dir(superstep))

    def _file(self, *parts: str) -> str:
        return lfs.join(self.path, *parts)

    def is_empty(self) -> bool:
        """True when nothing is in the folder (or it does not exist)."""
        if not lfs.is_dir(self.fs, self.path):
            return not lfs.exists(self.fs, self.path)
        return not self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))

    def _write_json(self, path: str, data: dict[str, Any]) -> None:
        tmp = path + ".tmp"
        self.fs.create_dir(os.path.dirname(path) or "/", recursive=True)
        with self.fs.open_output_stream(tmp) as out:
            out.write(json.dumps(data, indent=1, sort_keys=True).encode())
        self.fs.move(tmp, path)

    def _read_json(self, path: str) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return json.loads(f.read().decode())
        except FileNotFoundError:
            return None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write ``_graph.json``."""
        self._write_json(self._file(MANIFEST), manifest)

    def read_manifest(self) -> dict[str, Any] | None:
        """``_graph.json``, or ``None`` when the folder holds no computation."""
        return self._read_json(self._file(MANIFEST))

    def write_record(self, superstep: int, record: dict[str, Any]) -> None:
        """Mark superstep ``superstep`` complete, with its stats (after its Parquet is committed)."""
        self._write_json(self._file(superstep_dir(superstep), RECORD), record)

    def read_record(self, superstep: int) -> dict[str, Any] | None:
        """The record of a complete superstep, or ``None``."""
        return self._read_json(self._file(superstep_dir(superstep), RECORD))

    def completed(self) -> list[int]:
        """The complete supersteps, in order."""
        done = []
        for name in lfs.list_dirs(self.fs, self.path):
            if name.startswith(_PREFIX) and name[len(_PREFIX) :].isdigit():
                s = int(name[len(_PREFIX) :])
                if lfs.exists(self.fs, self._file(name, RECORD)):
                    done.append(s)
        return sorted(done)

    def last_completed(self) -> int | None:
        """The last complete superstep, or ``None`` when none is."""
        done = self.completed()
        return done[-1] if done else None

    def write_state(self, superstep: int, table: pa.Table) -> None:
        """Write a superstep's state collected on the driver as one Parquet file (replacing any
        files a killed attempt left in its folder)."""
        self._write_table(self._file(superstep_dir(superstep)), table)

    def write_edges(self, table: pa.Table, *, new: bool = False) -> None:
        """Write the edges (``new``: a dynamic run's new edges) collected on the driver as one
        Parquet file, where Spark's write of them would go."""
        self._write_table(self._file("new_edges" if new else "edges"), table)

    def _write_table(self, folder: str, table: pa.Table) -> None:
        """``table`` as the one Parquet file of ``folder`` (replacing what a killed attempt left)."""
        lfs.delete_path(self.fs, folder)
        self.fs.create_dir(folder, recursive=True)
        with self.fs.open_output_stream(f"{folder}/part-00000-driver.parquet") as out:
            pq.write_table(table, out)

    def delete_superstep(self, superstep: int) -> None:
        """Delete a superstep's state (its record first, so it is never seen half deleted)."""
        record = self._file(superstep_dir(superstep), RECORD)
        lfs.delete_path(self.fs, record)
        lfs.delete_path(self.fs, self._file(superstep_dir(superstep)))


def last_completed_superstep(folder: str) -> int | None:
    """The last complete superstep in state folder ``folder`` (``None``: nothing to resume).

    >>> last_completed_superstep("/nonexistent/graph-state") is None
    True
    """
    return StateFolder(folder).last_completed()


__all__ = ["MANIFEST", "RECORD", "StateFolder", "last_completed_superstep", "superstep_dir"]
