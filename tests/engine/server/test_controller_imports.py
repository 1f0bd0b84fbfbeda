"""The controller runs no Spark, so it must not import pyspark (only workers do)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import lockgate
import lockgate.server.service, lockgate.server.controller, lockgate.server.runner, lockgate.server.cli
import lockgate.control.jobs, lockgate.client.base
loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
print(",".join(loaded) or "none")
"""


def test_the_controller_process_imports_no_pyspark():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "none", out.stdout[:500]
