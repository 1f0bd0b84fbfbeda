"""Spark Connect as a first-class target: the same pipeline on ``sc://`` and on local Spark,
row for row, and nothing printed that a user must ignore.

One pipeline of Nexmark bids (6 cycle windows of 5 s, 6,000 bids) feeds a keyed 10 s
tumbling aggregate (its windows span two cycles, so partial state rides in the
checkpoints) into a Parquet FileSink and a PostgresSink, and a ``map_batches`` function
(pyarrow) into a second FileSink. It runs once in this process on local Spark (the test
session's SparkSession) and once through ``lockgate.connect("embedded",
spark_master="sc://...")`` against the module's Spark Connect server (conftest.py), then a
third time on ``sc://`` through ``lockgate run`` subprocesses killed with SIGKILL at two
crash points (:mod:`lockgate.faults`) before a last run finishes the job.

The Connect runs are subprocesses: a Spark Connect session switches the whole Python
process to Connect mode (PySpark sets ``SPARK_CONNECT_MODE_ENABLED``, after which
``pyspark.sql.functions`` build Connect columns), which would break the local session the
other tests of the session share. A Connect client starts no JVM, so such a run costs
a few seconds of interpreter start-up only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.dataset as ds
import pytest

import lockgate
from lockgate import faults
from lockgate.checkpoint.catalog import Catalog, CheckpointStatus

pytestmark = pytest.mark.slow

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
LAST = FIRST + 5
WINDOWS = list(range(FIRST, LAST + 1))
FILE_SINKS = {"auction_files": "auction_windows", "cents_files": "cents"}
SINKS = ("auction_files", "auction_pg", "cents_files")  # the commit order (by name)
RUN_TIMEOUT_S = 300
LOCKGATE = str(Path(sys.executable).with_name("lockgate"))

PIPELINE = '''
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc

import lockgate as lg

OUT = {out!r}
PG = {pg!r}
TABLE = {table!r}


def cents(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Bids over 1000 only, the price in cents (runs in the Spark workers' Python)."""
    batch = batch.filter(pc.greater(batch.column("price"), 1000))
    return pa.RecordBatch.from_arrays(
        [batch.column("auction"), batch.column("bidder"), pc.multiply(batch.column("price"), 100),
         batch.column("date_time")],
        names=["auction", "bidder", "cents", "date_time"],
    )


pipeline = lg.Pipeline("connect", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=200, seed=23, start="2026-01-01T00:00:00", max_events=6_000),
    name="bids",
)
auctions = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds=10)))
    .aggregate(bids=lg.count(), top=lg.max("price"), spent=lg.sum("price"), name="auction_windows")
)
auctions.sink(lg.FileSink(OUT + "/auction_windows"), name="auction_files")
auctions.sink(lg.PostgresSink(PG, TABLE), name="auction_pg")
bids.map_batches(cents, schema="auction BIGINT, bidder BIGINT, cents BIGINT, date_time TIMESTAMP", name="cents").sink(
    lg.FileSink(OUT + "/cents"), name="cents_files"
)
'''

#: one embedded run on Spark Connect; any UserWarning is an error, the result goes to stdout as JSON
EMBEDDED_RUN = """
import json, sys
import lockgate

home, ref, job, first, last, master = sys.argv[1:]
client = lockgate.connect("embedded", home=home, spark_master=master)
try:
    res = client.run(ref, job=job, first=int(first), last=int(last))
finally:
    client.close()
print(json.dumps({"state": res.state, "windows_run": res.windows_run, "rows_in": res.rows_in,
                  "rows_out": res.rows_out, "elapsed_s": res.elapsed_s}))
"""


class Scenario:
    """One job: its home, pipeline file, output folder and PostgreSQL table (fresh names)."""

    def __init__(self, root: Path, name: str, pg_url: str):
        self.root = root / name
        self.home = self.root / "home"
        self.out = self.root / "out"
        self.pg_url = pg_url
        tag = uuid.uuid4().hex[:8]
        self.table = f"connect_{name}_{tag}"
        self.job = f"connect_{name}_{tag}"  # PostgreSQL commit markers are keyed by (job, sink, window)
        self.root.mkdir(parents=True)
        self.pipeline = self.root / "pipe.py"
        self.pipeline.write_text(PIPELINE.format(out=str(self.out), pg=pg_url, table=self.table))
        self.ref = f"{self.pipeline}:pipeline"

    def output(self) -> dict[str, Counter]:
        """Every sink's committed rows as a multiset of ``(lg_window, row)``."""
        result: dict[str, Counter] = {}
        for sink, folder in FILE_SINKS.items():
            path = self.out / folder
            data = ds.dataset(str(path), format="parquet", partitioning="hive").to_table() if path.exists() else None
            result[sink] = _by_window(data.to_pylist()) if data is not None and data.num_columns else Counter()
        with psycopg.connect(self.pg_url) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            if conn.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()[0] is None:
                result["auction_pg"] = Counter()
            else:
                cur = conn.execute(f"SELECT * FROM {self.table}")
                names = [d.name for d in cur.description]
                result["auction_pg"] = _by_window([dict(zip(names, r, strict=True)) for r in cur.fetchall()])
        return result

    def checkpoints(self) -> list[tuple[int, CheckpointStatus]]:
        cat = Catalog(f"sqlite:///{self.home / 'catalog.db'}")
        try:
            return [(cp.window, cp.status) for cp in cat.list_checkpoints(self.job, include_inactive=True)]
        finally:
            cat.close()


def _by_window(rows: list[dict[str, Any]]) -> Counter:
    return Counter((int(r.pop("lg_window")), tuple(sorted(r.items()))) for r in rows)


def assert_same_output(got: dict[str, Counter], want: dict[str, Counter], where: str) -> None:
    """Each sink holds exactly the reference's rows: nothing lost, nothing duplicated."""
    for sink in SINKS:
        assert max(got[sink].values(), default=0) == 1, f"{where}: {sink} holds duplicated rows"
        missing, extra = want[sink] - got[sink], got[sink] - want[sink]
        assert not missing and not extra, (
            f"{where}: sink {sink} has {sum(got[sink].values())} rows, the local run "
            f"{sum(want[sink].values())}; missing {sum(missing.values())}, extra {sum(extra.values())}"
        )


def assert_whole_windows(got: dict[str, Counter], want: dict[str, Counter], where: str) -> None:
    """At any instant, a crash included, each window a sink holds is the reference's, whole and once."""
    for sink in SINKS:
        for w in {w for w, _ in got[sink]}:
            mine = Counter({k: n for k, n in got[sink].items() if k[0] == w})
            theirs = Counter({k: n for k, n in want[sink].items() if k[0] == w})
            assert mine == theirs, f"{where}: sink {sink} window {w} differs from the local run"


def assert_quiet(stderr: str, what: str) -> None:
    """A Connect run printed nothing a user would have to ignore (no warning, no log line)."""
    assert "Warning" not in stderr and "WARN" not in stderr, f"{what} printed a warning:\n{stderr}"
    assert stderr.strip() == "", f"{what} printed to stderr:\n{stderr}"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_FAULT", "SPARK_REMOTE", "PYTHONWARNINGS")}


# -- the two reference runs ----------------------------------------------------------------
@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, pg_url: str, spark: Any) -> dict[str, Any]:
    """The pipeline on local Spark, in this process (the test session's SparkSession)."""
    sc = Scenario(tmp_path_factory.mktemp("connect"), "local", pg_url)
    client = lockgate.connect("embedded", home=str(sc.home))
    t0 = time.monotonic()
    try:
        res = client.run(sc.ref, job=sc.job, first=FIRST, last=LAST)
    finally:
        client.close()
    elapsed = time.monotonic() - t0
    assert res.state == "FINISHED" and res.windows_run == len(WINDOWS)
    out = sc.output()
    for sink in SINKS:
        assert sum(out[sink].values()) > 0, sink
    # the 10 s windows close every other cycle: keyed state crossed cycles
    assert {w for w, _ in out["auction_files"]} == set(WINDOWS[1::2])
    assert {w for w, _ in out["cents_files"]} == set(WINDOWS)
    print(f"\nlocal Spark: {len(WINDOWS)} windows, {res.rows_in} rows in {elapsed:.1f}s (session already started)")
    return {"out": out, "result": res}


@pytest.fixture(scope="module")
def connect_run(tmp_path_factory: pytest.TempPathFactory, pg_url: str, connect_server: str) -> dict[str, Any]:
    """The same pipeline through the embedded client on the module's Spark Connect server."""
    sc = Scenario(tmp_path_factory.mktemp("connect"), "remote", pg_url)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", EMBEDDED_RUN,
         str(sc.home), sc.ref, sc.job, str(FIRST), str(LAST), connect_server],
        env=_env(), cwd=sc.root, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, f"the Connect run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nSpark Connect: {res['windows_run']} windows in {res['elapsed_s']:.1f}s "
          f"({elapsed:.1f}s with interpreter start-up)")
    return {"scenario": sc, "out": sc.output(), "result": res, "stderr": proc.stderr}


# -- same output on both -------------------------------------------------------------------
def test_connect_run_finishes_like_local(local_run: dict[str, Any], connect_run: dict[str, Any]) -> None:
    local, remote = local_run["result"], connect_run["result"]
    assert remote["state"] == "FINISHED" and remote["windows_run"] == len(WINDOWS)
    assert (remote["rows_in"], remote["rows_out"]) == (local.rows_in, local.rows_out)


def test_file_sink_keyed_window_aggregate(local_run: dict[str, Any], connect_run: dict[str, Any]) -> None:
    want, got = local_run["out"]["auction_files"], connect_run["out"]["auction_files"]
    assert sum(want.values()) > 0
    assert got == want


def test_postgres_sink(local_run: dict[str, Any], connect_run: dict[str, Any]) -> None:
    want, got = local_run["out"]["auction_pg"], connect_run["out"]["auction_pg"]
    assert sum(want.values()) > 0
    assert got == want
    # the aggregate is the same whichever sink took it
    assert got == connect_run["out"]["auction_files"]


def test_map_batches_python_function(local_run: dict[str, Any], connect_run: dict[str, Any]) -> None:
    want, got = local_run["out"]["cents_files"], connect_run["out"]["cents_files"]
    assert sum(want.values()) > 0
    assert got == want
    assert all(dict(row)["cents"] > 100_000 for _, row in got)  # bids over 1000, times 100


def test_connect_run_prints_nothing(connect_run: dict[str, Any]) -> None:
    """Run with ``-W error::UserWarning`` (the static-setting warning would have failed it),
    and its stderr is empty."""
    assert_quiet(connect_run["stderr"], "the embedded Connect run")


def test_connect_session_settings(connect_server: str, tmp_path: Path) -> None:
    """The session gets Lockgate's session settings; a static one from the caller is refused
    with the server flag to use, not ignored with a warning."""
    code = f"""
import json
from lockgate.errors import InvalidArgumentError
from lockgate.runtime.session import get_spark, stop_spark

s = get_spark({connect_server!r}, conf={{"spark.sql.shuffle.partitions": "3"}})
keys = ["spark.sql.session.timeZone", "spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled",
        "spark.sql.execution.arrow.pyspark.enabled", "spark.python.sql.dataFrameDebugging.enabled"]
print(json.dumps({{k: s.conf.get(k) for k in keys}}))
stop_spark()
try:
    get_spark({connect_server!r}, conf={{"spark.sql.extensions": "com.example.Ext"}})
except InvalidArgumentError as err:
    print(err)
print(get_spark({connect_server!r}).range(3).count())  # a fresh session, not the refused one
"""
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], env=_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_quiet(proc.stderr, "get_spark on sc://")
    settings, refusal, count = proc.stdout.strip().splitlines()[-3:]
    assert count == "3"
    assert json.loads(settings) == {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "3",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.sql.dataFrameDebugging.enabled": "false",  # the server's own setting
    }
    assert "--conf spark.sql.extensions=com.example.Ext" in refusal, refusal


# -- kill -9 of a run on sc://, then restore -----------------------------------------------
#: the run that recovers from crash k goes on and dies at crash k+1 of a later window
CHAIN = (f"mid_commit:{FIRST + 1}", f"before_stage:{FIRST + 3}")


def _lockgate_run(sc: Scenario, master: str, fault: str | None, log: Path) -> subprocess.Popen:
    env = _env()
    if fault:
        env[faults.ENV] = fault
    cmd = [LOCKGATE, "--home", str(sc.home), "--spark-master", master, "run", sc.ref, "--job", sc.job,
           "--from-window", str(FIRST), "--to-window", str(LAST), "--no-progress"]
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fh, env=env, cwd=sc.root,
                                start_new_session=True)  # its own group: the crash kills the group


@pytest.mark.long  # Spark Connect's restore is the local one's (tests/engine/control/test_restore.py)
def test_restore_after_kill_9(
    tmp_path: Path, pg_url: str, connect_server: str, local_run: dict[str, Any],
    group_gone: Callable[[int], None],
) -> None:  # fmt: skip
    """``lockgate run`` on sc:// killed with SIGKILL in the middle of a commit (one of three
    sinks committed), rerun and killed again after the server's Spark staged a window, then
    rerun to the end: every sink equals the local run exactly, each window checkpointed once,
    and the Spark Connect server outlived its clients."""
    assert {f.split(":")[0] for f in CHAIN} <= set(faults.POINTS)
    sc = Scenario(tmp_path, "killed", pg_url)
    port = int(connect_server.rsplit(":", 1)[1])
    timings = []
    for k, fault in enumerate([*CHAIN, None]):
        log = sc.root / f"run{k}.log"
        t0 = time.monotonic()
        proc = _lockgate_run(sc, connect_server, fault, log)
        try:
            rc = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"lockgate run ({fault}) did not end in {RUN_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
        timings.append((fault or "finish", time.monotonic() - t0))
        group_gone(proc.pid)
        stderr = log.read_text()
        if fault:
            assert rc == -signal.SIGKILL, f"{fault}: exit {rc}, not SIGKILL:\n{stderr[-3000:]}"
            done = [w for w, _ in sc.checkpoints()]
            assert done == WINDOWS[: len(done)] and WINDOWS[int(fault.split(":")[1]) - FIRST] not in done
        else:
            assert rc == 0, f"the recovery run failed (exit {rc}):\n{stderr[-3000:]}"
        assert_quiet(stderr, f"lockgate run on sc:// ({fault or 'no fault'})")
        if fault:
            assert_whole_windows(sc.output(), local_run["out"], f"after the crash at {fault}")
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the server outlived its client

    assert_same_output(sc.output(), local_run["out"], "after two kills and a restore")
    assert sc.checkpoints() == [(w, CheckpointStatus.COMPLETE) for w in WINDOWS]
    print("\n" + "\n".join(f"  {what:<28} {t:6.1f}s" for what, t in timings))



def test_a_graph_pipeline_runs_its_iteration_cycles_on_spark_connect(connect_server: str, tmp_path: Path) -> None:
    """Components and a traversal (supersteps, localCheckpoint, observations) on ``sc://``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
    from graphref import GRAPH_WINDOW, check_graph_outputs, write_graph_pipeline

    ref, edges, starts = write_graph_pipeline(tmp_path)
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-c", EMBEDDED_RUN, str(home), ref, "graph_connect", str(GRAPH_WINDOW), str(GRAPH_WINDOW),
         connect_server],
        env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"the Connect run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1])["state"] == "FINISHED"
    with lockgate.connect("embedded", home=str(home)) as client:
        check_graph_outputs(client.read_sink, "graph_connect", edges, starts)
        steps = client.list_supersteps("graph_connect", GRAPH_WINDOW)
    assert {s.operator for s in steps} == {"components", "hops"} and steps[-1].halted_by is not None
