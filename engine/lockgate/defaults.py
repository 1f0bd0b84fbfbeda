"""Defaults shared by the CLI, the clients, the controller and the example DAGs."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SPARK_MASTER = "local[2]"
"""The Spark master when none is given: local Spark with two threads."""


def default_home() -> str:
    """Lockgate's folder (catalog, snapshots, staging): ``$LOCKGATE_HOME``, else ``~/.lockgate``."""
    return os.environ.get("LOCKGATE_HOME") or str(Path.home() / ".lockgate")


def default_spark_master() -> str:
    """The Spark master: ``$LOCKGATE_SPARK_MASTER``, else :data:`DEFAULT_SPARK_MASTER`."""
    return os.environ.get("LOCKGATE_SPARK_MASTER") or DEFAULT_SPARK_MASTER


__all__ = ["DEFAULT_SPARK_MASTER", "default_home", "default_spark_master"]
