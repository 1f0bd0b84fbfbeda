"""Failed writes to storage as one clear Lockgate error: a full disk, a folder that refuses us.

Staged sink output, file sink commits and state snapshots are written by pyarrow (an
``OSError`` with an ``errno``) or by Spark (a Py4J error whose text carries the Java cause,
``java.io.IOException: No space left on device``). :func:`write_error` turns either into

- :class:`~lockgate.errors.StorageFullError` (code ``UNAVAILABLE``: retrying helps once
  there is room) for ``ENOSPC`` and ``EDQUOT``;
- :class:`~lockgate.errors.StorageAccessError` (code ``FAILED_PRECONDITION``: retrying
  cannot help) for permission denied and read-only file systems;

naming the folder and the fix, or returns ``None`` for any other error (the caller
re-raises it unchanged). A refusal is blamed on the folder only when the error names it (a
task that writes the folder may also fail to read a source); a full disk that has room
again once the failed write was removed may have been Spark's scratch space, and the
message says so. No Spark import.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator

from .errors import LockgateError, StorageAccessError, StorageFullError
from .filesystems import is_uri, location_uri

_FULL_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
_REFUSED_ERRNOS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
}
#: (text in an error's message, kind, reason); the JVM's messages carry no errno
_MARKERS = (
    ("No space left on device", "full", "no space left on device"),
    ("Disk quota exceeded", "full", "disk quota exceeded"),
    ("Read-only file system", "refused", "read-only file system"),
    ("Permission denied", "refused", "permission denied"),
    ("AccessDeniedException", "refused", "permission denied"),
    ("Operation not permitted", "refused", "operation not permitted"),
)
#: Hadoop's local file system reports a failed mkdir without its reason
_UNEXPLAINED = ("Mkdirs failed to create",)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 16:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def storage_problem(exc: BaseException) -> tuple[str, str] | None:
    """``("full" | "refused", reason)`` when ``exc`` (or an error it was raised from) says the
    disk is full or the write was refused; ``None`` for any other error."""
    texts = []
    for e in _chain(exc):
        code = getattr(e, "errno", None) if isinstance(e, OSError) else None
        if code in _FULL_ERRNOS:
            return "full", _FULL_ERRNOS[code]
        if code in _REFUSED_ERRNOS:
            return "refused", _REFUSED_ERRNOS[code]
        texts.append(str(e))
    text = "\n".join(texts)
    for kind in ("full", "refused"):  # a full disk first: it is the one retrying can fix
        for marker, k, reason in _MARKERS:
            if k == kind and marker in text:
                return kind, reason
    return None


def _local_path(location: str) -> str | None:
    """The local path of ``location``; ``None`` for another file system."""
    if not is_uri(location) and not location.startswith("file:"):
        return location_uri(location)
    if location.startswith("file:"):
        return "/" + location[len("file:") :].lstrip("/")
    return None


def _existing(path: str) -> str:
    """``path`` or its nearest ancestor that exists."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def free_bytes(location: str) -> int | None:
    """Bytes free on the local disk holding ``location``; ``None`` when not local or unknown."""
    path = _local_path(location)
    if path is None:
        return None
    try:
        return shutil.disk_usage(_existing(path)).free
    except OSError:
        return None


def _probe(location: str) -> tuple[str, str] | None:
    """What the local folder itself says: a full disk, or a folder this process cannot write."""
    path = _local_path(location)
    if path is None:
        return None
    if (free_bytes(location) or 0) == 0 and os.path.exists(_existing(path)):
        return "full", "no space left on device"
    existing = _existing(path)
    if not os.access(existing, os.W_OK):
        try:
            read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        return "refused", "read-only file system" if read_only else "permission denied"
    return None


def _names_folder(exc: BaseException, location: str, markers: tuple[str, ...]) -> bool:
    """Whether a line of the error's text that carries one of ``markers`` names ``location``:
    the JVM names the file it was refused (``/x/f (Permission denied)``, ``Mkdirs failed to
    create file:/x/...``), so a refused read of a source is not blamed on the folder written."""
    wanted = [location.rstrip("/")]
    local = _local_path(location)
    if local:
        wanted.append(local.rstrip("/"))
    for e in _chain(exc):
        for line in str(e).splitlines():
            if any(m in line for m in markers) and any(w and w in line for w in wanted):
                return True
    return False


def _room(folder: str, free: int | None) -> str:
    """``; 0 bytes free there`` (or that no file can be created there) for a local folder."""
    if free is None:
        return ""
    if free > 0:
        path = _local_path(folder)
        try:
            if path is not None and os.statvfs(_existing(path)).f_favail == 0:
                return f"; {_size(free)} free there, but no free inodes: no file can be created"
        except OSError:
            pass
    return f"; {_size(free)} free there"


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"


def write_error(
    exc: BaseException,
    folder: str,
    *,
    context: str,
    what: str,
    window: int,
    elsewhere: str,
    direct: bool = False,
) -> LockgateError | None:
    """The Lockgate error for ``exc``, raised while writing ``what`` to ``folder``; ``None``
    when ``exc`` is no full disk or refused write (re-raise it as it is).

    ``context`` starts the message (``job 'j', sink 's', window 3``); ``elsewhere`` is the
    other fix (``point --snapshots at a disk with room``); ``direct`` says that the write
    that failed was to ``folder`` itself (pyarrow's errors do not name the file).
    """
    if isinstance(exc, LockgateError):
        return None
    refusals = tuple(m for m, k, _ in _MARKERS if k == "refused") + _UNEXPLAINED
    problem = storage_problem(exc)
    if problem is None:
        if not (direct or _names_folder(exc, folder, _UNEXPLAINED)):
            return None
        problem = _probe(folder)  # Hadoop's "Mkdirs failed" gives no reason: ask the folder
        if problem is None:
            return None
    kind, reason = problem
    if kind == "full":
        resume = (
            f"window {window} is not checkpointed: once there is room, run the job again (a controller "
            f"retries by itself) and it resumes at window {window}, nothing lost or written twice"
        )
        free = free_bytes(folder)
        if direct or not free:
            return StorageFullError(
                f"{context}: cannot write {what} to {folder}: its disk is full ({reason}{_room(folder, free)}). "
                f"Free space there, or {elsewhere}; {resume}",
                folder,
            )
        # the JVM does not say which disk: the folder's (room again once the failed write was
        # removed) or Spark's scratch space, where a write task may spill
        return StorageFullError(
            f"{context}: cannot write {what} to {folder}: a disk filled up ({reason}; {_size(free)} free "
            "there now that the failed write is removed). Free space there and in Spark's scratch space "
            f"(spark.local.dir, /tmp by default), or {elsewhere}; {resume}",
            folder,
        )
    if not (direct or _names_folder(exc, folder, refusals)):
        return None  # refused something else (a source file, say): not this folder's problem
    return StorageAccessError(
        f"{context}: cannot write {what} to {folder}: {reason}. Make it writable for the user running "
        f"Lockgate, or {elsewhere}; retrying cannot help until then. Window {window} is not checkpointed: "
        f"once fixed, run the job again and it resumes at window {window}, nothing lost or written twice",
        folder,
    )
