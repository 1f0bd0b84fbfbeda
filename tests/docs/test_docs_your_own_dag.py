"""The "Your own DAG" page (docs/getting-started/your-own-dag.md), done as a reader would do it.

The page is read in order: a code block with ``title="PATH"`` is written to PATH (relative to the
folder the commands are in at that point), and the ``$ `` lines of each ``console`` block are run in
bash, one block after another in one shell state (working folder and exported variables carry over),
with the virtual environment's ``bin`` first on the PATH and no Airflow or Lockgate variables of this
process. Each command must exit 0 and print the lines the page shows under it, in order: ``...``
stands for anything, and durations, timestamps and plan versions may differ (a plan version hashes the
pipeline's absolute paths). One ``airflow dags test`` run: Airflow, the embedded engine and Spark for
real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "getting-started" / "your-own-dag.md"
BLOCK = re.compile(r"```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<body>.*?)\n```", re.DOTALL)
TITLE = re.compile(r'title="(?P<path>[^"]+)"')


def steps() -> list[tuple[str, str, str]]:
    """The page's steps in order: ("file", path, content) or ("console", "", the block)."""
    out = []
    for m in BLOCK.finditer(PAGE.read_text()):
        title = TITLE.search(m.group("info"))
        if title:
            out.append(("file", title.group("path"), m.group("body") + "\n"))
        elif m.group("lang") == "console":
            out.append(("console", "", m.group("body")))
    return out


def commands(block: str) -> list[tuple[str, list[str]]]:
    """A console block's commands, each with the lines shown under it."""
    out: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
    return out


def normal(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?", "<ts>", text)
    text = re.sub(r"\b\d+(\.\d+)?s\b", "<t>", text)
    text = re.sub(r"\b[0-9a-f]{16}\b", "<plan>", text)
    return re.sub(r"\s+", " ", text).strip()


def shown(expected: list[str], actual: str, command: str) -> None:
    """Every line shown (``...`` lines left out) is in ``actual``, in order."""
    lines = [normal(x) for x in actual.splitlines()]
    at = 0
    for want in expected:
        if want.strip() in ("", "..."):
            continue
        pattern = re.compile(".*".join(re.escape(part.strip()) for part in normal(want).split("...")))
        for i in range(at, len(lines)):
            if pattern.search(lines[i]):
                at = i + 1
                break
        else:
            tail = "\n".join(actual.splitlines()[-40:])
            pytest.fail(f"`{command}` did not print {want!r} (after its line {at});\nits last lines:\n{tail}")


@pytest.mark.slow
def test_your_own_dag_page_as_a_reader_runs_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LOCKGATE", "PYTHONPATH"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    state, cwd = tmp_path / "state.sh", tmp_path / "cwd"
    state.write_text("")
    cwd.write_text(str(tmp_path))
    ran = []
    for kind, path, body in steps():
        here = Path(cwd.read_text().strip())
        if kind == "file":
            (here / path).parent.mkdir(parents=True, exist_ok=True)
            (here / path).write_text(body)
            continue
        for command, expected in commands(body):
            here = Path(cwd.read_text().strip())
            script = (f"set -o pipefail\ncd {here}\n. {state}\n{command}\nrc=$?\n"
                      f"export -p > {state}\npwd > {cwd}\nexit $rc\n")
            done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=600)
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{output[-4000:]}"
            shown(expected, output, command)
            ran.append(command)
    assert any(c.startswith("airflow dags test") for c in ran), ran
    assert any(c.startswith("lockgate checkpoints") for c in ran), ran
