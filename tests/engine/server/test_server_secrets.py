"""The controller's token never reaches user code (issue 17).

The token goes to a worker through a pipe it reads and closes before anything else (never
its environment). A pipeline looks for it everywhere it can, both when the worker imports
it and from a ``map_batches`` function that runs in a Python worker of Spark: the
environment (``os.environ``, ``/proc/self/environ``), the command lines and environments
of its ancestors (up to the test's process) and of its children (the Spark JVM), and every
open file descriptor (read where it can be). It writes what it looked at and what it found; nothing is found.
"""

from __future__ import annotations

import json
import os
import secrets

import pytest

pytestmark = pytest.mark.slow

SPY = '''
import json
import os
import stat
from datetime import timedelta

import lockgate as lg

TOKEN = bytes.fromhex({hexed!r})[::-1]  # the token, not spelled out in this file
FOUND = {found!r}
TEST_PID = {test_pid!r}  # the test's process: the search of ancestors stops there


def _read(path, limit=50_000_000):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            return b""
        chunks, size = [], 0
        while size < limit:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _ppid(pid):
    with open(f"/proc/{{pid}}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def search(where):
    """Look for the token; write what was looked at and what was found to FOUND."""
    checked, found = [], []

    def look(name, data):
        checked.append(name)
        if isinstance(data, str):
            data = data.encode(errors="replace")
        if TOKEN in data:
            found.append(name)

    look("os.environ", "\\n".join(f"{{k}}={{v}}" for k, v in os.environ.items()))
    for name in ("environ", "cmdline"):
        look(f"/proc/self/{{name}}", _read(f"/proc/self/{{name}}"))
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        path = f"/proc/self/fd/{{fd}}"
        try:
            target = os.readlink(path)
        except OSError:
            continue
        look(f"fd {{fd}} -> {{target}} (name)", target)
        try:
            look(f"fd {{fd}} -> {{target}}", _read(path))
        except OSError:
            pass  # sockets, and what this process may not open again
    me = os.getpid()
    related = []
    pid = me
    while pid > 1 and pid != TEST_PID:  # ancestors: Spark's daemon, the JVM, the worker, the controller, the test
        pid = _ppid(pid)
        related.append(("ancestor", pid))
    for entry in os.listdir("/proc"):  # children: the worker's Spark JVM, the daemon's workers
        if entry.isdigit():
            try:
                if _ppid(int(entry)) == me:
                    related.append(("child", int(entry)))
            except (OSError, ValueError, IndexError):
                continue
    for kind, pid in related:
        for name in ("environ", "cmdline"):
            try:
                look(f"{{kind}} {{pid}} {{name}}", _read(f"/proc/{{pid}}/{{name}}"))
            except OSError:
                pass
    os.makedirs(FOUND, exist_ok=True)
    with open(os.path.join(FOUND, f"{{where}}-{{me}}.json"), "w") as f:
        json.dump({{"checked": checked, "found": found}}, f)


search("import")  # in the worker, as it imports the pipeline


def spy(batch):
    search("spark-python")  # in a Python worker of Spark
    return batch


pipeline = lg.Pipeline("spy", cycle_window=timedelta(seconds=5), parallelism=1)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=3, start="2026-01-01T00:00:00", max_events=400),
    name="bids",
)
bids.map_batches(spy, name="spy").key_by("auction").aggregate(n=lg.count(), name="per_auction").sink(
    lg.CollectSink("out"), name="out"
)
'''


def test_a_pipeline_finds_the_token_nowhere(srv, make_controller, tmp_path):
    token = secrets.token_hex(24)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    found_dir = tmp_path / "found"
    pipe = tmp_path / "spy_pipe.py"
    pipe.write_text(SPY.format(hexed=token.encode()[::-1].hex(), found=str(found_dir), test_pid=os.getpid()))
    assert token not in pipe.read_text()
    ctl = make_controller("secrets", args=("--standby-workers", "0", "--token-file", str(token_file))).start()
    client = ctl.client(token=token)
    result = client.run(f"{pipe}:pipeline", job="spy", first=srv.FIRST, last=srv.FIRST)
    assert result.state == "FINISHED", result
    assert client.read_sink("spy", "out").num_rows > 0
    client.close()

    reports = {p.name: json.loads(p.read_text()) for p in found_dir.glob("*.json")}
    where = {name.split("-")[0] for name in reports}
    assert {"import", "spark"} <= where, sorted(reports)
    for name, report in reports.items():
        assert report["found"] == [], (name, report["found"])
        checked = report["checked"]
        # it did look: its environment, its open files, the worker (a Spark Python worker's ancestor)
        assert "/proc/self/environ" in checked and any(c.startswith("fd ") for c in checked), (name, checked)
        assert f"ancestor {os.getpid()} environ" in checked, (name, checked)  # up to the test's process
    imports = [r for n, r in reports.items() if n.startswith("import")]
    # the worker that imported it has a child: its Spark JVM, whose environment was searched too
    assert any(any(c.startswith("child") and c.endswith("environ") for c in r["checked"]) for r in imports)
