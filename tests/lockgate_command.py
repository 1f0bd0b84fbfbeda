"""The ``lockgate`` command as a user runs it: a real process over a home of the test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: what the CLI must never print on stderr (Spark's and the JVM's noise)
NOISE = ("WARN", "log4j", "Setting default log level", "NativeCodeLoader", "FutureWarning")


def lockgate(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``lockgate ARGS`` with ``LOCKGATE_HOME=home``; with ``check``, fail on a non-zero exit."""
    env = {**os.environ, "LOCKGATE_HOME": str(home)}
    cmd = [sys.executable, "-m", "lockgate.cli.main", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc
