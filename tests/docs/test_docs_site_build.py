"""The documentation site builds with ``mkdocs build --strict``: a missing page, a broken link or an
unknown anchor, a page left out of the navigation, or an API reference entry whose object is gone
fails the build (mkdocs.yml's ``validation`` turns each into a warning, ``--strict`` into a failure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    for page in ("index.html", "benchmarks/index.html", "getting-started/your-own-dag/index.html",
                 "reference/api/index.html", "operations/index.html"):
        assert (site / page).exists(), page
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "FileSource" in api and "Pipeline" in api  # mkdocstrings rendered the docstrings
    assert (site / "images" / "bench-chart.png").exists()
