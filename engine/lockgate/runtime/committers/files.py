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
