"""What a bench result was measured on: the engine's commit and its uncommitted files."""

from __future__ import annotations

import subprocess
from typing import Any

from .config import REPO


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def engine_version() -> dict[str, Any]:
    """The commit the engine was at, and the engine's files with local changes (read-only git).

    >>> sorted(engine_version())
    ['commit', 'engine_changes']
    """
    # `--porcelain` lines are "XY path": split, never strip (a stripped " M path" loses a letter)
    changes = [ln.split(None, 1)[1] for ln in _git("status", "--porcelain", "engine").splitlines() if ln.strip()]
    return {"commit": _git("rev-parse", "--short", "HEAD"), "engine_changes": changes}
