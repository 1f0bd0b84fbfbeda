"""Former home of the sink committers, kept so existing imports keep working.

The committers live in :mod:`lockgate.runtime.committers` (one module per sink kind), the
file system helpers in :mod:`lockgate.filesystems` and the staging folder names in
:mod:`lockgate.runtime.staging`; import from there.
"""

from __future__ import annotations

from .committers import (
    CollectCommitter,
    FileCommitter,
    PostgresCommitter,
    SinkCommitter,
    collect_root,
    committer_for,
    read_collected,
)
from .staging import staging_dir_name

__all__ = [
    "CollectCommitter",
    "FileCommitter",
    "PostgresCommitter",
    "SinkCommitter",
    "collect_root",
    "committer_for",
    "read_collected",
    "staging_dir_name",
]
