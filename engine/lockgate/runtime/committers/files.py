"""File sinks: a window is committed by renaming its staged folder into the target.

The staged folder ``<path>/_staging/<job>/w=<W>-a<A>/`` becomes ``<path>/lg_window=<W>/``
(one atomic rename on a local or HDFS file system); the target folder's existence is the
commit record. :class:`FolderCommitter` is that protocol for any folder target (the
collect sink uses it too). No Spark import.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from typing import Any

import pyarrow.fs as pafs

from lockgate.errors import SinkCommitError, StorageAccessError

from ...filesystems import delete_path, is_dir, join, list_dirs, location_uri, resolve
from ...storage_errors import storage_problem, write_error
from ..changelog import DELETE, OP
from ..staging import RETRACTED_DIR, committed_window, window_dir_name
from .base import SinkCommitter, check_staged, drop_staged_after, staged_gone


class FolderCommitter(SinkCommitter):
    """Commit = rename ``staged`` to ``<root>/lg_window=<W>``; the folder is the record."""

    #: the other fix, when the target's disk is full or refuses the write
    elsewhere = "point --home (LOCKGATE_HOME) at another disk"

    @abstractmethod
    def _root(self, job: str, sink_name: str) -> str:
        """The folder holding the committed windows of this job and sink."""

    def target(self, job: str, sink_name: str, window: int) -> str:
        """The committed folder of window ``window``."""
        return join(self._root(job, sink_name), window_dir_name(window))

    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        check_staged(staged, self.kind, job, sink_name, window)
        root = self._root(job, sink_name)
        target = self.target(job, sink_name, window)
        fs, target_path = resolve(target)
        sfs, staged_path = resolve(staged["uri"])
        info = {"target": target, "rows": staged.get("rows"), "replayed": True}
        if is_dir(fs, target_path):
            if staged_path != target_path:
                delete_path(sfs, staged_path)  # a later attempt of a committed window: garbage
            return info
        if not is_dir(sfs, staged_path):
            if is_dir(fs, target_path):  # committed meanwhile by a concurrent replay
                return info
            raise staged_gone(job, sink_name, window, staged, target)
        _, root_path = resolve(root)
        try:
            fs.create_dir(root_path, recursive=True)
            fs.move(staged_path, target_path)
        except OSError as exc:
            if is_dir(fs, target_path):  # a concurrent commit won the rename
                delete_path(sfs, staged_path)
                return info
            err = write_error(
                exc, root, context=f"job '{job}', sink '{sink_name}', window {window}",
                what=f"the window's folder ({window_dir_name(window)})", window=window,
                elsewhere=self.elsewhere, direct=True,
            )
            raise err or SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: could not rename the staged "
                f"output {staged['uri']} to {target}: {exc}"
            ) from exc
        return {**info, "replayed": False}

    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        fs, path = resolve(self.target(job, sink_name, window))
        return is_dir(fs, path)

    def committed_windows(self, job: str, sink_name: str) -> list[int]:
        """The committed windows of this job and sink, ascending."""
        fs, root_path = resolve(self._root(job, sink_name))
        return committed_windows_in(fs, root_path)

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        root = self._root(job, sink_name)
        fs, root_path = resolve(root)
        later = [w for w in self.committed_windows(job, sink_name) if w > window]
        trash = join(root_path, RETRACTED_DIR)
        try:
            for w in sorted(later, reverse=True):
                fs.create_dir(trash, recursive=True)
                # one atomic rename takes the window out of the target, then delete at leisure
                fs.move(join(root_path, window_dir_name(w)), join(trash, f"{window_dir_name(w)}-{uuid.uuid4().hex}"))
            delete_path(fs, trash)
        except OSError as exc:
            problem = storage_problem(exc)
            head = (f"job '{job}', sink '{sink_name}': cannot retract the committed output of windows after "
                    f"{window} from {root}")
            again = f"then run `lockgate restore {job} --window {window}` again"
            if problem is not None and problem[0] == "refused":
                raise StorageAccessError(
                    f"{head}: {problem[1]}. Make it writable for the user running Lockgate, {again}", root
                ) from exc
            raise SinkCommitError(f"{head}: {problem[1] if problem else exc}; {again}") from exc
        drop_staged_after(self._staging_root(job, sink_name), window)
        return later


def committed_windows_in(fs: pafs.FileSystem, root_path: str) -> list[int]:
    """The windows committed as ``lg_window=<W>`` folders directly under ``root_path``, ascending."""
    return sorted(w for d in list_dirs(fs, root_path) if (w := committed_window(d)) is not None)


class FileCommitter(FolderCommitter):
    """File sink: ``<path>/lg_window=<W>/`` appears by one rename of the staged folder."""

    kind = "file"
    elsewhere = "give the FileSink a path on another disk"

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.path = location_uri(sink["path"])

    def _root(self, job: str, sink_name: str) -> str:
        return self.path


#: the compacted current view of a keyed file sink, under its path
CURRENT_DIR = "_current"
CURRENT_FILE = "current.parquet"
#: the Parquet metadata key saying which window the current view reflects
CURRENT_WINDOW = b"lockgate.window"


class KeyedFileCommitter(FileCommitter):
    """File sink with a key: the window folders are a changelog, and ``_current/current.parquet``
    the table it describes (each key's last row, deleted keys left out).

    The view is derived from committed windows only, so it is rebuilt whenever it is behind:
    a run killed between a window's rename and the view's replacement finds the window
    committed when it replays the commit, and refreshes the view then.
    """

    def __init__(self, sink: dict[str, Any], home: str):
        super().__init__(sink, home)
        self.key: list[str] = list(sink["key"])

    def current_uri(self) -> str:
        return join(self.path, CURRENT_DIR, CURRENT_FILE)

    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        info = super().commit(job, sink_name, window, staged)
        self._refresh(job, sink_name, window)
        return info

    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        later = super().retract_after(job, sink_name, window)
        self._refresh(job, sink_name, window, rebuild=True)
        return later

    def _view_window(self, fs: pafs.FileSystem, path: str) -> int | None:
        import pyarrow.parquet as pq

        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        meta = pq.read_schema(path, filesystem=fs).metadata or {}
        return int(meta[CURRENT_WINDOW]) if CURRENT_WINDOW in meta else None

    def _refresh(self, job: str, sink_name: str, window: int, rebuild: bool = False) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        fs, root_path = resolve(self.path)
        _, view_path = resolve(self.current_uri())
        have = None if rebuild else self._view_window(fs, view_path)
        if have is not None and have >= window:
            return  # a replayed commit: the view already holds this window
        windows = [w for w in committed_windows_in(fs, root_path) if w <= window]
        if have is not None and have == (windows[-2] if len(windows) > 1 else None):
            base, todo = pq.read_table(view_path, filesystem=fs), [window]
        else:
            base, todo = None, windows
        for w in todo:
            rows = ds.dataset(join(root_path, window_dir_name(w)), format="parquet", filesystem=fs).to_table()
            gone = pc.equal(rows[OP], DELETE) if OP in rows.column_names else None
            kept = rows if gone is None else rows.filter(pc.invert(pc.fill_null(gone, False)))
            if OP in kept.column_names:
                kept = kept.drop_columns([OP])
            if base is not None:
                base = base.join(rows.select(self.key), self.key, join_type="left anti")
                base = pa.concat_tables([base.select(kept.column_names), kept], promote_options="permissive")
            else:
                base = kept
        try:
            fs.create_dir(join(root_path, CURRENT_DIR), recursive=True)
            if base is None:
                delete_path(fs, view_path)
                return
            base = base.replace_schema_metadata({**(base.schema.metadata or {}), CURRENT_WINDOW: str(window).encode()})
            tmp = f"{view_path}.{uuid.uuid4().hex}.tmp"
            pq.write_table(base, tmp, filesystem=fs)
            fs.move(tmp, view_path)  # one rename replaces the view
        except OSError as exc:
            raise write_error(exc, self.path, context=f"job '{job}', sink '{sink_name}', window {window}",
                              what="the current view (_current/current.parquet)", window=window,
                              elsewhere=self.elsewhere, direct=True) or SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: could not write the current view "
                f"{self.current_uri()}: {exc}") from exc
