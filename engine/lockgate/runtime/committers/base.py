"""The sink committer protocol and the checks every committer shares.

Phase two of the sink protocol: the worker stages each sink's output of window ``W``
(:mod:`lockgate.runtime.sinks`, which needs Spark); the controller, which has no
SparkSession, commits it with a :class:`SinkCommitter`. Every commit is idempotent per
``(job, sink, window)`` and may be replayed any number of times after a crash (kill -9 at
any instant, mid-commit included): the window's rows end up in the target exactly once.

A deliberate restore to an earlier window retracts later windows
(:meth:`SinkCommitter.retract_after`); staged output of an attempt that never got
recorded is thrown away with :meth:`SinkCommitter.discard`. No Spark import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from lockgate.errors import SinkCommitError

from ...filesystems import delete_path, join, list_dirs, location_uri, resolve
from ..staging import staged_window, staging_root


class SinkCommitter(ABC):
    """Commits staged output of one sink; idempotent per ``(job, sink, window)``.

    ``sink`` is the sink's ``to_config()`` dict, ``home`` is LOCKGATE_HOME.
    """

    kind = ""

    def __init__(self, sink: dict[str, Any], home: str):
        self.sink = sink
        self.home = location_uri(home)

    @abstractmethod
    def commit(self, job: str, sink_name: str, window: int, staged: dict[str, Any]) -> dict[str, Any]:
        """Make window ``window``'s staged output visible in the target, exactly once.

        Returns ``{"target", "rows", "replayed"}``; ``replayed`` is true when the window
        was committed before (nothing is written again).
        """

    @abstractmethod
    def is_committed(self, job: str, sink_name: str, window: int) -> bool:
        """True when window ``window`` is in the target."""

    @abstractmethod
    def retract_after(self, job: str, sink_name: str, window: int) -> list[int]:
        """Remove committed output of windows ``> window``; return their ids, ascending."""

    def _staging_root(self, job: str, sink_name: str) -> str:
        """Folder holding every staged attempt of this job and sink."""
        return staging_root(self.sink, job=job, sink_name=sink_name, home=self.home)

    def discard(self, staged: dict[str, Any]) -> None:
        """Delete staged output (an attempt that will never be committed); missing is fine."""
        if not staged or not staged.get("uri"):
            return
        fs, path = resolve(staged["uri"])
        delete_path(fs, path)

    def discard_all_staged(self, job: str, sink_name: str) -> None:
        """Delete every staged attempt of ``job`` for this sink (after recovery replayed
        the commits still owed, none of them is needed)."""
        fs, path = resolve(self._staging_root(job, sink_name))
        delete_path(fs, path)


def check_staged(staged: dict[str, Any], kind: str, job: str, sink_name: str, window: int) -> None:
    """Refuse a staged descriptor that is malformed or belongs to another sink kind, job,
    sink or window."""
    if not isinstance(staged, dict) or "uri" not in staged:
        raise SinkCommitError(
            f"job '{job}', sink '{sink_name}', window {window}: not a staged descriptor: {staged!r}"
        )
    if staged.get("kind") not in (None, kind):
        raise SinkCommitError(
            f"job '{job}', sink '{sink_name}', window {window}: staged output is of a "
            f"{staged.get('kind')!r} sink, the sink is {kind!r}"
        )
    for key, want in (("job", job), ("sink", sink_name), ("window", window)):
        if key in staged and staged[key] != want:
            raise SinkCommitError(
                f"job '{job}', sink '{sink_name}', window {window}: staged output belongs to "
                f"{key} {staged[key]!r}, not {want!r}; refusing to commit it"
            )


def staged_gone(job: str, sink_name: str, window: int, staged: dict[str, Any], target: str) -> SinkCommitError:
    """The error of a commit whose staged output vanished before the window was committed."""
    return SinkCommitError(
        f"job '{job}', sink '{sink_name}', window {window}: cannot commit: the staged output "
        f"({staged.get('uri')}) is gone and the window was never committed to {target}. "
        f"The window must be re-run (restore from the checkpoint before window {window})."
    )


def drop_staged_after(root: str, window: int) -> list[str]:
    """Delete staged attempts of windows ``> window`` under the staging root ``root``; return
    their names."""
    fs, path = resolve(root)
    dropped = []
    for d in list_dirs(fs, path):
        w = staged_window(d)
        if w is not None and w > window:
            delete_path(fs, join(path, d))
            dropped.append(d)
    return dropped
