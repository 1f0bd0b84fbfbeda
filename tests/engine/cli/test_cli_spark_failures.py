"""A Spark failure caused by the data, as the `lockgate` command shows it: one line and status 2 (not
the "unforeseen" status 1 with Py4J's first line), Spark's full text behind `-v` and in the failed
cycle's record, nothing committed, and the run after the fix completes the window. Embedded, and
through a controller (the worker's error crosses gRPC)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lockgate.errors import DETAIL_MARKER

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W0 = int(T0.timestamp()) // 60

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("cli_sf", cycle_window=timedelta(minutes=1))
links = pipeline.source(lg.FileSource(EDGES, schema="src BIGINT, dst BIGINT, ts TIMESTAMP",
                                      event_time="ts"), name="links")
links.key_by("src").aggregate(n=lg.count(), name="out_degree").sink(lg.CollectSink("deg"), name="deg_out")
'''


def _edges(path: Path, src: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = pa.string() if isinstance(src[0], str) else pa.int64()
    ts = [T0 + timedelta(seconds=i + 1) for i in range(len(src))]
    pq.write_table(pa.table({"src": pa.array(src, kind), "dst": pa.array([9] * len(src), pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), path)


def _setup(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    ref = tmp_path / "pipe.py"
    path = tmp_path / "edges" / "e0.parquet"
    ref.write_text(PIPELINE.replace("EDGES", repr(str(path.parent))))
    _edges(path, ["a", "b"])
    env = {**os.environ, "LOCKGATE_HOME": str(tmp_path / "home")}
    return path, f"{ref}:pipeline", env


def _lockgate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lockgate.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def _one_line(proc: subprocess.CompletedProcess[str], path: Path) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("lockgate: error: ") and "Py4J" not in line and "Traceback" not in line
    assert f"source 'links': file {path} has column 'src' of Parquet type BINARY" in line
    assert "schema says BIGINT" in line and "Fix:" in line
    return line


def test_a_parquet_type_mismatch_is_one_line_and_status_2_and_the_fixed_run_completes(tmp_path) -> None:
    path, ref, env = _setup(tmp_path)
    window = ("--from-window", str(W0), "--to-window", str(W0))
    line = _one_line(_lockgate(env, "run", ref, *window), path)
    assert line == f"lockgate: error: job 'cli_sf', window {W0}, " + line.split(f"window {W0}, ", 1)[1]

    # -v: Spark's full text (its error class, the JVM's stack trace) before the same line
    verbose = _lockgate(env, "-v", "run", ref, *window)
    assert verbose.returncode == 2
    assert "FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH" in verbose.stderr
    assert "\tat org.apache.spark" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1] == line

    # nothing committed; the failed cycles keep the line and Spark's text
    assert json.loads(_lockgate(env, "--json", "checkpoints", "cli_sf").stdout) == []
    cycles = json.loads(_lockgate(env, "--json", "cycles", "cli_sf").stdout)
    assert [c["state"] for c in cycles] == ["FAILED", "FAILED"]
    assert all(DETAIL_MARKER in c["error"] and "SchemaColumnConvertNotSupportedException" in c["error"]
               for c in cycles)

    _edges(path, [1, 2])
    done = _lockgate(env, "--json", "run", ref, *window)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["windows_run"] == 1
    assert [c["window"] for c in json.loads(_lockgate(env, "--json", "checkpoints", "cli_sf").stdout)] == [W0]


def test_through_a_controller_the_workers_error_is_the_same_line(tmp_path, make_controller) -> None:
    path, ref, env = _setup(tmp_path)
    ctl = make_controller("ctl", args=("--standby-workers", "0")).start()
    proc = _lockgate(env, "--controller", ctl.url, "run", ref, "--from-window", str(W0), "--to-window", str(W0))
    line = _one_line(proc, path)
    assert f"window {W0}" in line
    assert json.loads(_lockgate(env, "--controller", ctl.url, "--json", "checkpoints", "cli_sf").stdout) == []
    cycles = json.loads(_lockgate(env, "--controller", ctl.url, "--json", "cycles", "cli_sf").stdout)
    assert [c["state"] for c in cycles] == ["FAILED"]  # refused at once: a retry fails the same way
    assert DETAIL_MARKER in cycles[0]["error"] and "FAILED_READ_FILE" in cycles[0]["error"]
    assert cycles[0]["error"].split(DETAIL_MARKER)[0].count("\n") <= 2  # the line, then Spark's text
