"""The snapshot store: keyed state snapshots as Parquet folders, one per checkpoint.

The state of each stateful operator goes under
``<root>/<job>/w=<window:010d>-a<attempt>/<operator>/``: written by Spark's executors when
it is large, or as one Parquet file from the driver (:meth:`SnapshotStore.write_table`)
when it is small, which saves a distributed write and its commit protocol per cycle; an
empty state is recorded in the manifest with no file at all. The store names those folders,
records a manifest of their files when the checkpoint is taken, and verifies a snapshot
against its manifest before it is restored, so a deleted or damaged file is a clear
error rather than silently lost state. ``root`` is any location :mod:`lockgate.filesystems`
resolves: a local path, ``file://``, ``s3a://`` or ``s3://``, ``gs://``, ``hdfs://``...
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import InvalidArgumentError, LockgateError, SnapshotError
from ..filesystems import delete_path, is_hidden, list_data_files, location_uri, resolve
from ..names import hidden_character
from ..storage_errors import write_error
from .layers import state_entries, table_layers

_SNAPSHOT_DIR = re.compile(r"^w=(\d+)-a(\d+)$")


def _check_name(kind: str, name: str) -> str:
    if not name or "/" in name or "\\" in name or is_hidden(name) or hidden_character(name):
        raise InvalidArgumentError(
            f"{kind} name {name!r} cannot name a snapshot folder: it must be non-empty, contain no "
            "slash or control character and not start with '_' or '.'"
        )
    return name


def _footer_rows(fs: pafs.FileSystem, path: str) -> int:
    """The row count in a Parquet file's footer (raises if the footer cannot be read)."""
    with fs.open_input_file(path) as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def parse_snapshot_uri(snapshot_uri: str) -> tuple[str, int, int] | None:
    """``(job, window, attempt)`` of a URI made by :meth:`SnapshotStore.snapshot_uri`, else None."""
    parts = snapshot_uri.rstrip("/").split("/")
    match = _SNAPSHOT_DIR.match(parts[-1]) if len(parts) >= 2 else None
    if match is None:
        return None
    return parts[-2], int(match.group(1)), int(match.group(2))


class SnapshotStore:
    """Keyed state snapshots under ``root`` (a local path or a file system URI)."""

    def __init__(self, root: str | Path):
        # absolute, so that Spark (which resolves relative paths elsewhere) writes here too
        self.root = location_uri(root)

    def _job_uri(self, job: str) -> str:
        separator = "" if self.root.endswith("/") else "/"
        return f"{self.root}{separator}{_check_name('job', job)}"

    def snapshot_uri(self, job: str, window: int, attempt: int) -> str:
        """The folder of the snapshot of ``window`` taken by cycle attempt ``attempt``."""
        if window < 0 or attempt < 1:
            raise InvalidArgumentError(
                f"snapshot of job '{job}': window must be >= 0 and attempt >= 1, not {window} and {attempt}"
            )
        return f"{self._job_uri(job)}/w={window:010d}-a{attempt}"

    def iteration_uri(self, job: str, operator: str, window: int) -> str:
        """The work folder of ``operator``'s iteration cycle (its supersteps) in ``window``:
        one per window, so that a window run again from the same state resumes it."""
        return f"{self._job_uri(job)}/iterations/{_check_name('operator', operator)}/w={window:010d}"

    def operator_uri(self, snapshot_uri: str, operator: str) -> str:
        """The folder Spark writes ``operator``'s state to, inside a snapshot."""
        return f"{snapshot_uri.rstrip('/')}/{_check_name('operator', operator)}"

    def manifest(self, snapshot_uri: str) -> dict[str, Any]:
        """Describe a written snapshot: ``{operator: {"files": [{"path", "size"}], "rows": n}}``.

        Paths are relative to the operator folder; files and folders whose names start with
        '_' or '.' are skipped. Raises SnapshotError when the snapshot folder is missing or
        a file has no readable Parquet footer.
        """
        fs, base = resolve(snapshot_uri)
        if fs.get_file_info(base).type != pafs.FileType.Directory:
            raise SnapshotError(f"state snapshot {snapshot_uri} does not exist or is not a folder")
        result: dict[str, Any] = {}
        operators = sorted(fs.get_file_info(pafs.FileSelector(base)), key=lambda i: i.path)
        for op in operators:
            if op.type != pafs.FileType.Directory or is_hidden(op.base_name):
                continue
            result[op.base_name] = self._operator_entry(fs, op.path, snapshot_uri, op.base_name)
        return result

    def operator_manifest(self, snapshot_uri: str, operator: str) -> dict[str, Any]:
        """The manifest entry (``{"files", "rows"}``) of one operator folder written by Spark."""
        fs, path = resolve(self.operator_uri(snapshot_uri, operator))
        if fs.get_file_info(path).type != pafs.FileType.Directory:
            raise SnapshotError(f"state snapshot {snapshot_uri}: operator folder '{operator}' was not written")
        return self._operator_entry(fs, path, snapshot_uri, operator)

    @staticmethod
    def _operator_entry(fs: pafs.FileSystem, path: str, snapshot_uri: str, operator: str) -> dict[str, Any]:
        files, rows = [], 0
        for info in list_data_files(fs, path):
            relative = info.path[len(path) :].lstrip("/")
            try:
                rows += _footer_rows(fs, info.path)
            except Exception as exc:
                raise SnapshotError(
                    f"state snapshot {snapshot_uri}: file '{operator}/{relative}' is not a readable "
                    f"Parquet file ({exc})"
                ) from exc
            files.append({"path": relative, "size": info.size})
        return {"files": files, "rows": rows}

    def write_table(
        self, snapshot_uri: str, operator: str, table: pa.Table, sort_by: Sequence[str] = (),
        row_group_rows: int | None = None,
    ) -> dict[str, Any]:
        """Write one operator's state, collected on the driver, as a single Parquet file and
        return its manifest entry. An empty state writes nothing: ``{"files": [], "rows": 0}``
        (restored as no state, which every stateful operator treats as empty). ``sort_by``: the
        columns its rows are sorted by, so that each of its row groups (``row_group_rows`` rows;
        None: pyarrow's default) holds a narrow range of them in its statistics."""
        if table.num_rows == 0:
            return {"files": [], "rows": 0}
        if sort_by:
            table = table.sort_by([(c, "ascending") for c in sort_by])
        fs, path = resolve(self.operator_uri(snapshot_uri, operator))
        name = "part-00000-driver.parquet"
        try:
            fs.create_dir(path, recursive=True)
            with fs.open_output_stream(f"{path}/{name}") as out:
                pq.write_table(table, out, row_group_size=row_group_rows)
        except OSError as exc:
            err = self.write_error(exc, snapshot_uri, operator, direct=True)
            if err is None:
                raise
            with contextlib.suppress(Exception):  # the partial file is garbage, and it takes room
                delete_path(fs, path)
            raise err from exc
        return {"files": [{"path": name, "size": fs.get_file_info(f"{path}/{name}").size}], "rows": table.num_rows}

    def write_error(
        self, exc: BaseException, snapshot_uri: str, operator: str, direct: bool = False
    ) -> LockgateError | None:
        """The Lockgate error of a failed write of ``operator``'s state into ``snapshot_uri``
        when the disk is full or refuses the write (see :func:`~lockgate.storage_errors.write_error`);
        ``None`` for any other error. ``direct``: the failed write was to that folder itself."""
        parsed = parse_snapshot_uri(snapshot_uri)
        job, window = (parsed[0], parsed[1]) if parsed else ("?", -1)
        return write_error(
            exc, self.operator_uri(snapshot_uri, operator),
            context=f"job '{job}', window {window}", what=f"the state snapshot of '{operator}'",
            window=window, elsewhere="point --snapshots at another disk", direct=direct,
        )

    def verify(self, snapshot_uri: str | None, manifest: dict[str, Any]) -> None:
        """Check that every file of ``manifest`` is still there, the same size and readable,
        in every layer (base and deltas, see :mod:`lockgate.checkpoint.layers`) it names.

        Raises SnapshotError naming the job, window, operator and each missing or changed
        file, and the fix. Files not in the manifest are ignored.
        """
        problems: list[str] = []
        earliest: int | None = None  # the earliest round whose layer is damaged
        for operator, entry in state_entries(manifest).items():
            for layer in table_layers(snapshot_uri, entry):
                found = self._verify_layer(snapshot_uri, operator, layer)
                parsed = parse_snapshot_uri(layer["snapshot"])
                if found and parsed is not None:
                    earliest = parsed[1] if earliest is None else min(earliest, parsed[1])
                problems += found
        if problems:
            if snapshot_uri is None:  # a derived checkpoint: name the newest folder it reads
                snapshot_uri = max(
                    (layer["snapshot"] for entry in state_entries(manifest).values()
                     for layer in table_layers(None, entry)), default="",
                )
            raise SnapshotError(self._damage_message(snapshot_uri, problems, earliest))

    def _verify_layer(self, snapshot_uri: str, operator: str, layer: dict[str, Any]) -> list[str]:
        fs, base = resolve(layer["snapshot"])
        # files of the checkpoint's own folder are named as they always were; a layer
        # written by an earlier round is named with that round's folder
        prefix = "" if layer["snapshot"].rstrip("/") == (snapshot_uri or "").rstrip("/") else \
            f"{layer['snapshot'].rstrip('/').rsplit('/', 1)[-1]}/"
        problems: list[str] = []
        rows, damaged = 0, False
        for item in layer.get("files", []):
            name = f"{operator}/{item['path']}"
            shown = f"{prefix}{name}"
            info = fs.get_file_info(f"{base}/{name}")
            if info.type != pafs.FileType.File:
                problems.append(f"operator '{operator}': file '{shown}' is missing")
                damaged = True
                continue
            if info.size != item["size"]:
                problems.append(f"operator '{operator}': file '{shown}' changed ({info.size} bytes, "
                                f"expected {item['size']})")
                damaged = True
                continue
            try:
                rows += _footer_rows(fs, info.path)
            except Exception as exc:
                problems.append(f"operator '{operator}': file '{shown}' has an unreadable Parquet footer ({exc})")
                damaged = True
        if not damaged and rows != layer.get("rows", rows):
            where = f" in layer {prefix.rstrip('/')}" if prefix else ""
            problems.append(f"operator '{operator}': {rows} rows{where}, expected {layer['rows']}")
        return problems

    @staticmethod
    def _damage_message(snapshot_uri: str, problems: list[str], earliest: int | None = None) -> str:
        parsed = parse_snapshot_uri(snapshot_uri)
        if parsed is None:
            what, job, earlier = f"state snapshot {snapshot_uri}", "JOB", "an earlier window"
        else:
            job, window, _attempt = parsed
            what = f"state snapshot of job '{job}' window {window} ({snapshot_uri})"
            # a layer written by an earlier round is needed by every checkpoint since it
            earlier = f"W < {window if earliest is None else min(earliest, window)}"
        return (
            f"{what} is damaged: {'; '.join(problems)}. Fix: restore an earlier checkpoint with "
            f"`lockgate restore {job} --window W` ({earlier}), or rerun with --reset-state"
        )

    def delete(self, snapshot_uri: str) -> None:
        """Delete a snapshot folder; a missing one is fine."""
        fs, path = resolve(snapshot_uri)
        delete_path(fs, path)

    def list_snapshots(self, job: str) -> list[str]:
        """The job's snapshot URIs, by window then attempt."""
        fs, path = resolve(self._job_uri(job))
        if fs.get_file_info(path).type != pafs.FileType.Directory:
            return []
        found: list[tuple[int, int]] = []
        for info in fs.get_file_info(pafs.FileSelector(path)):
            match = _SNAPSHOT_DIR.match(info.base_name)
            if info.type == pafs.FileType.Directory and match:
                found.append((int(match.group(1)), int(match.group(2))))
        return [self.snapshot_uri(job, window, attempt) for window, attempt in sorted(found)]
