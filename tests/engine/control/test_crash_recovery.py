"""kill -9 at any instant of a cycle round: the job restores with nothing lost or duplicated.

Real processes, real Spark, real PostgreSQL. A pipeline of Nexmark bids (8 cycle windows
of 5 s at 400 events/s) feeds a 10 s tumbling aggregate (its windows span two cycles,
so partial state rides in the checkpoints) and a running aggregate per bidder (state
across every cycle); each is written to a Parquet FileSink and to a PostgresSink.

Each scenario runs ``lockgate --home H run PIPE --from-window A --to-window B`` in its own
process group (``start_new_session``), so a SIGKILL of the group takes the Spark JVM too,
then reruns until the job finishes, and compares the output with an uninterrupted run,
row for row.

- deterministic crash points: every point of :data:`lockgate.faults.POINTS`,
  one of them in the middle of the recovery of another. To stay within the time budget
  (every run starts a JVM), the crashes are chained over one job: the run that
  recovers from crash ``k`` goes on and dies at crash ``k+1`` of a later window (its
  fault does not match the window it recovers, so the recovery is exactly that of a
  rerun without the fault), except where crash ``k+1`` is aimed at the recovery itself.
  After every crash the catalog and the sinks are checked at that instant (the round
  stopped exactly at the point; each window a sink holds is the reference's, whole);
- random kills: SIGKILL of the process group at seeded random instants, three times
  over the same run, then reruns until the job finishes.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pyarrow.dataset as ds
import pytest

from lockgate import faults
from lockgate.checkpoint.catalog import Catalog, CheckpointStatus, CycleState
from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.runtime.committers import committer_for

pytestmark = pytest.mark.slow

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
LAST = FIRST + 7
WINDOWS = list(range(FIRST, LAST + 1))
SINKS = ("auction_files", "auction_pg", "bidder_files", "bidder_pg")  # the commit order (sorted)
RUN_TIMEOUT_S = 300
LOCKGATE = str(Path(sys.executable).with_name("lockgate"))
#: short-lived driver JVMs on 2 cores: the C1 compiler only and the serial collector halve a
#: run's wall time (crash semantics do not depend on the JIT); set JAVA_TOOL_OPTIONS to override
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

OUT = {out!r}
PG = {pg!r}
TABLE = {table!r}

pipeline = lg.Pipeline("crashy", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=11, start="2026-01-01T00:00:00", max_events=16_000),
    name="bids",
)
auctions = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds=10)))
    .aggregate(bids=lg.count(), top=lg.max("price"), spent=lg.sum("price"), name="auction_windows")
)
auctions.sink(lg.FileSink(OUT + "/auction_windows"), name="auction_files")
auctions.sink(lg.PostgresSink(PG, TABLE + "_auction"), name="auction_pg")
bidders = bids.key_by("bidder").aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
bidders.sink(lg.FileSink(OUT + "/bidder_totals"), name="bidder_files")
bidders.sink(lg.PostgresSink(PG, TABLE + "_bidder"), name="bidder_pg")
'''


_LIVE: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    """A failing test must not leave a lockgate run (and its JVM) behind."""
    yield
    while _LIVE:
        proc = _LIVE.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Scenario:
    """One job: its home, pipeline file, output folder and PostgreSQL tables."""

    def __init__(self, root: Path, name: str, pg_url: str):
        self.root = root / name
        self.home = self.root / "home"
        self.out = self.root / "out"
        self.pg_url = pg_url
        self.table = f"crash_{name}"
        # one job name per scenario: PostgreSQL commit markers are keyed by (job, sink, window)
        self.job = f"crashy_{name}"
        self.root.mkdir(parents=True)
        self.pipeline = self.root / "pipe.py"
        self.pipeline.write_text(PIPELINE.format(out=str(self.out), pg=pg_url, table=self.table))
        self.ref = f"{self.pipeline}:pipeline"
        self.runs: list[dict[str, Any]] = []

    # -- running -------------------------------------------------------------------
    def start(self, fault: str | None = None) -> tuple[subprocess.Popen, Path]:
        env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_FAULT"}
        env.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
        if fault:
            env["LOCKGATE_FAULT"] = fault
        log = self.root / f"run{len(self.runs)}.log"
        cmd = [LOCKGATE, "--home", str(self.home), "run", self.ref, "--job", self.job,
               "--from-window", str(FIRST), "--to-window", str(LAST), "--no-progress"]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _LIVE.append(proc)
        self.runs.append({"fault": fault, "log": log, "t0": time.monotonic(), "started": time.time()})
        return proc, log

    def wait(self, proc: subprocess.Popen, log: Path) -> int:
        try:
            rc = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"lockgate run did not end in {RUN_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
        self.runs[-1]["elapsed"] = time.monotonic() - self.runs[-1]["t0"]
        self.runs[-1]["rc"] = rc
        assert_group_gone(proc.pid)
        return rc

    def finish(self) -> None:
        """Rerun without any fault: the job must recover and finish."""
        proc, log = self.start()
        rc = self.wait(proc, log)
        if rc != 0:
            pytest.fail(f"the recovery run failed (exit {rc}):\n{log.read_text()[-3000:]}")

    # -- looking ---------------------------------------------------------------------
    def catalog(self) -> Catalog:
        return Catalog(f"sqlite:///{self.home / 'catalog.db'}")

    def generation(self) -> int | None:
        """The job's runner generation, read without writing (None before the job exists)."""
        db = self.home / "catalog.db"
        if not db.exists():
            return None
        try:
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
                row = conn.execute("SELECT generation FROM lg_jobs WHERE name = ?", (self.job,)).fetchone()
                return row[0] if row else None
        except sqlite3.Error:
            return None

    def latest_window_of_generation(self, generation: int) -> int | None:
        """The highest window a round of runner ``generation`` has begun (None: none yet)."""
        db = self.home / "catalog.db"
        try:
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
                return conn.execute(
                    'SELECT max("window") FROM lg_cycles WHERE job = ? AND generation = ?', (self.job, generation)
                ).fetchone()[0]
        except sqlite3.Error:
            return None

    def phases(self, since: float) -> tuple[float, float] | None:
        """For the run started at ``since`` (time.time()): seconds from its start until it
        took the job over (interpreter, JVM, compile), and from then until its first round
        (recovery: abort, replay, garbage collection, retraction, state check)."""
        cat = self.catalog()
        try:
            ts = [t for t in cat.transitions(self.job) if t.at.timestamp() >= since - 0.01]
        finally:
            cat.close()
        took = next((t for t in ts if t.to_state.value in ("COMPILING", "RECOVERING")), None)
        ran = next((t for t in ts if t.to_state.value == "RUNNING"), None)
        if took is None or ran is None:
            return None
        return took.at.timestamp() - since, ran.at.timestamp() - took.at.timestamp()

    def output(self) -> dict[str, Counter]:
        return read_outputs(self.out, self.pg_url, self.table)


def assert_group_gone(pgid: int, timeout: float = 20.0) -> None:
    """Every process of the run's group (the Spark JVM included) has ended."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in psutil.process_iter(["pid", "status", "name"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(f"{p.pid} {p.info['name']}")
            except (ProcessLookupError, psutil.Error):
                continue
        if not alive:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"processes of the killed run's group {pgid} still alive: {alive}")
        time.sleep(0.2)


def _rows_by_window(rows: list[dict[str, Any]]) -> Counter:
    return Counter((int(r.pop("lg_window")), tuple(sorted(r.items()))) for r in rows)


def read_outputs(out: Path, pg_url: str, table: str) -> dict[str, Counter]:
    """Every sink's committed rows as a multiset of ``(lg_window, row)``."""
    result: dict[str, Counter] = {}
    for sink, folder in (("auction_files", "auction_windows"), ("bidder_files", "bidder_totals")):
        path = out / folder
        if not path.exists():
            result[sink] = Counter()
            continue
        data = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
        if data.num_columns == 0:  # only empty windows (a folder with no Parquet file) so far
            result[sink] = Counter()
            continue
        assert "lg_window" in data.column_names
        result[sink] = _rows_by_window(data.to_pylist())
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        for sink, suffix in (("auction_pg", "auction"), ("bidder_pg", "bidder")):
            exists = conn.execute("SELECT to_regclass(%s)", (f"{table}_{suffix}",)).fetchone()[0]
            if exists is None:
                result[sink] = Counter()
                continue
            cur = conn.execute(f"SELECT * FROM {table}_{suffix}")
            names = [d.name for d in cur.description]
            result[sink] = _rows_by_window([dict(zip(names, r, strict=True)) for r in cur.fetchall()])
    return result


def windows_in(rows: Counter) -> set[int]:
    return {w for w, _ in rows}


def of_window(rows: Counter, window: int) -> Counter:
    return Counter({k: n for k, n in rows.items() if k[0] == window})


def assert_consistent(sc: Scenario, reference: dict[str, Counter], where: str) -> int | None:
    """The invariants that hold at ANY instant, a crash included: checkpoints are complete
    windows from the first on, each once; every window a sink holds is the reference's
    window, whole and once; no sink holds a window beyond the one being committed.
    Returns the last complete window."""
    cat = sc.catalog()
    try:
        cps = cat.list_checkpoints(sc.job)
        every = cat.list_checkpoints(sc.job, include_inactive=True)
    finally:
        cat.close()
    done = [cp.window for cp in cps]
    assert done == WINDOWS[: len(done)], f"{where}: complete checkpoints {done}"
    assert all(cp.status == CheckpointStatus.COMPLETE for cp in every), f"{where}: {every}"
    last = done[-1] if done else None
    out = sc.output()
    for sink in SINKS:
        for w in sorted(windows_in(out[sink])):
            assert of_window(out[sink], w) == of_window(reference[sink], w), (
                f"{where}: sink {sink} window {w} differs from the uninterrupted run"
            )
            limit = FIRST if last is None else last + 1  # at most the window being committed
            assert w <= limit, f"{where}: {sink} holds window {w}, the last complete one is {last}"
        for w in done:
            assert of_window(out[sink], w) == of_window(reference[sink], w), (
                f"{where}: sink {sink} lacks complete window {w}"
            )
    return last


def assert_final(sc: Scenario, reference: dict[str, Counter]) -> None:
    """The finished job's output is the uninterrupted run's, row for row; every window has
    exactly one COMPLETE checkpoint; no cycle is left open; no staged file or snapshot
    survives that no checkpoint refers to."""
    out = sc.output()
    for sink in SINKS:
        assert sum(reference[sink].values()) > 0
        assert max(out[sink].values()) == 1, f"{sink}: duplicated rows"
        assert out[sink] == reference[sink], (
            f"sink {sink}: {sum(out[sink].values())} rows, reference {sum(reference[sink].values())}; "
            f"missing {sum((reference[sink] - out[sink]).values())}, extra {sum((out[sink] - reference[sink]).values())}"
        )
    cat = sc.catalog()
    try:
        every = cat.list_checkpoints(sc.job, include_inactive=True)
        cycles = cat.list_cycles(sc.job, limit=1000)
        job = cat.get_job(sc.job)
    finally:
        cat.close()
    assert [cp.window for cp in every] == WINDOWS
    assert {cp.status for cp in every} == {CheckpointStatus.COMPLETE}
    assert job.state.value == "FINISHED"
    assert not [c for c in cycles if c.state in (CycleState.RUNNING, CycleState.STAGED)]
    committed = Counter(c.window for c in cycles if c.state == CycleState.COMMITTED)
    assert committed == Counter(WINDOWS), committed
    snaps = SnapshotStore(sc.home / "snapshots").list_snapshots(sc.job)
    assert sorted(snaps) == sorted(cp.snapshot_uri for cp in every)
    leftovers = [p for p in (sc.out / "auction_windows" / "_staging" / sc.job).glob("*")]
    leftovers += [p for p in (sc.out / "bidder_totals" / "_staging" / sc.job).glob("*")]
    leftovers += [p for p in (sc.home / "staging" / sc.job).glob("*/*")]
    assert not leftovers, f"staged output left behind: {leftovers}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, pg_url: str, spark: Any) -> dict[str, Any]:
    """The uninterrupted run, in this process (its SparkSession is the test session's)."""
    import lockgate

    sc = Scenario(tmp_path_factory.mktemp("crash"), "reference", pg_url)
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
        assert max(out[sink].values()) == 1, f"{sink}: the reference itself has duplicated rows"
    # the 10 s windows close every other cycle: state must have crossed cycles
    assert windows_in(out["auction_files"]) == set(WINDOWS[1::2])
    assert windows_in(out["bidder_pg"]) == set(WINDOWS)
    print(f"\nreference run: {len(WINDOWS)} windows in {elapsed:.1f}s (in process, warm JVM)")
    return {"out": out, "window_s": elapsed / len(WINDOWS)}


def _cycle_states(sc: Scenario, window: int) -> list[CycleState]:
    cat = sc.catalog()
    try:
        return [c.state for c in sorted(cat.list_cycles(sc.job, limit=1000), key=lambda c: c.id) if c.window == window]
    finally:
        cat.close()


def _committed(sc: Scenario, window: int) -> list[str]:
    """The sinks whose commit record of ``window`` exists (folder, or marker row)."""
    configs = {
        "auction_files": {"kind": "file", "path": str(sc.out / "auction_windows")},
        "auction_pg": {"kind": "postgres", "url": sc.pg_url, "table": f"{sc.table}_auction"},
        "bidder_files": {"kind": "file", "path": str(sc.out / "bidder_totals")},
        "bidder_pg": {"kind": "postgres", "url": sc.pg_url, "table": f"{sc.table}_bidder"},
    }
    return [s for s in SINKS if committer_for(configs[s], str(sc.home)).is_committed(sc.job, s, window)]


def _staged_attempts(sc: Scenario, window: int) -> list[Path]:
    found = list((sc.out / "auction_windows" / "_staging" / sc.job).glob(f"w={window:010d}-a*"))
    found += list((sc.home / "staging" / sc.job).glob(f"*/w={window:010d}-a*"))
    return found


def _check_crash_point(sc: Scenario, point: str, window: int) -> None:
    """The round of ``window`` stopped exactly at ``point``."""
    states = _cycle_states(sc, window)
    cat = sc.catalog()
    try:
        done = [cp.window for cp in cat.list_checkpoints(sc.job)]
    finally:
        cat.close()
    committed = _committed(sc, window)
    if point in ("before_run", "before_stage"):
        assert states[-1] == CycleState.RUNNING and window not in done and committed == []
        if point == "before_stage":  # the worker staged its files, nobody recorded them
            assert _staged_attempts(sc, window)
            snaps = SnapshotStore(sc.home / "snapshots").list_snapshots(sc.job)
            assert [u for u in snaps if f"w={window:010d}" in u]
    elif point == "after_stage":
        assert states[-1] == CycleState.STAGED and window not in done and committed == []
    elif point == "mid_commit":  # the first sink (by name) committed, the others not
        assert states[-1] == CycleState.STAGED and window not in done and committed == [SINKS[0]]
    elif point == "after_commit":
        assert states[-1] == CycleState.STAGED and window not in done and committed == list(SINKS)
    elif point == "after_checkpoint":
        assert states[-1] == CycleState.COMMITTED and done[-1] == window and committed == list(SINKS)
    else:  # pragma: no cover
        raise AssertionError(point)


# (fault, what it exercises); each later run also recovers from the crash before it
CHAIN = [
    (f"after_stage:{FIRST}", "first window (no checkpoint yet): manifest recorded, no sink committed"),
    (f"mid_commit:{FIRST}", "crash while recovery replays that commit: one sink committed"),
    (f"before_run:{FIRST + 1}", "round begun, nothing run"),
    (f"before_stage:{FIRST + 2}", "worker staged output and snapshot, nothing recorded"),
    (f"after_commit:{FIRST + 3}", "every sink committed, no checkpoint row"),
    (f"after_checkpoint:{FIRST + 4}", "checkpoint written, nothing after it"),
]


def test_chain_covers_every_crash_point():
    assert {f.split(":")[0] for f, _ in CHAIN} == set(faults.POINTS)


def test_deterministic_crash_points(tmp_path: Path, pg_url: str, reference: dict[str, Any]) -> None:
    ref = reference["out"]
    sc = Scenario(tmp_path, "points", pg_url)
    timings = []
    for fault, what in CHAIN:
        point, _, w = fault.partition(":")
        proc, log = sc.start(fault)
        rc = sc.wait(proc, log)
        assert rc == -signal.SIGKILL, f"{fault} ({what}): exit {rc}, not SIGKILL:\n{log.read_text()[-3000:]}"
        timings.append((fault, sc.runs[-1]["elapsed"], sc.phases(sc.runs[-1]["started"])))
        _check_crash_point(sc, point, int(w))
        assert_consistent(sc, ref, f"after crash {fault}")
    sc.finish()
    timings.append(("finish", sc.runs[-1]["elapsed"], sc.phases(sc.runs[-1]["started"])))
    assert_final(sc, ref)
    # every crash was recovered from: a run that found a STAGED round replayed its commit
    cat = sc.catalog()
    try:
        reasons = [t.reason for t in cat.transitions(sc.job)]
        cycles = cat.list_cycles(sc.job, limit=1000)
    finally:
        cat.close()
    assert sum(r.startswith("the previous runner") for r in reasons) == len(CHAIN), reasons
    aborted = sorted(c.window for c in cycles if c.state == CycleState.ABORTED)
    assert aborted == [FIRST + 1, FIRST + 2]
    print(
        "\n"
        + "\n".join(
            f"  {f:<28} {t:6.1f}s"
            + ("" if p is None else f"  (took over after {p[0]:5.1f}s, recovery {p[1]:5.2f}s)")
            for f, t, p in timings
        )
    )


@pytest.mark.long  # the fault suites' short forms kill at random in the test command
def test_random_kills(tmp_path: Path, pg_url: str, reference: dict[str, Any]) -> None:
    """SIGKILL the run's process group at random instants (seeded), three times over the
    same run, then rerun until it finishes. Kill 1 strikes a random instant of a random
    early window's round; kill 2 strikes just after the rerun took the job over, while it
    recovers from kill 1; kill 3 a random instant of a random later window's round."""
    ref = reference["out"]
    sc = Scenario(tmp_path, "random", pg_url)
    rng = random.Random(20260103)  # kills in window 1, in recovery, in window 4
    window_s = reference["window_s"]
    plan = [("round", FIRST + rng.randint(0, 2)), ("takeover", None), ("round", FIRST + rng.randint(3, 5))]
    kills = []
    for k, (anchor, target) in enumerate(plan):
        before = sc.generation() or 0
        proc, log = sc.start()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            g = sc.generation()
            if g is not None and g > before:
                if anchor == "takeover":
                    break
                begun = sc.latest_window_of_generation(g)
                if begun is not None and begun >= target:
                    break
            time.sleep(0.05)
        delay = rng.uniform(0.0, 0.5) if anchor == "takeover" else rng.uniform(0.0, 1.2 * window_s)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        rc = sc.wait(proc, log)
        assert rc == -signal.SIGKILL, f"kill {k}: the run ended by itself (exit {rc}):\n{log.read_text()[-3000:]}"
        done = assert_consistent(sc, ref, f"after kill {k}")
        phases = sc.phases(sc.runs[-1]["started"])
        kills.append((k, anchor, target, delay, done, phases))
    assert kills[-1][4] is not None and kills[-1][4] >= FIRST + 2, f"the kills did not spread over the run: {kills}"
    sc.finish()
    assert_final(sc, ref)
    startup, recovery = sc.phases(sc.runs[-1]["started"])
    lines = [
        f"  kill {k + 1} ({a}{'' if t is None else f' of window {t - FIRST}'}, +{d:.2f}s): "
        f"last complete window {None if w is None else w - FIRST}"
        + ("" if p is None else f"; took over {p[0]:.1f}s after start, recovered in {p[1]:.2f}s")
        for k, a, t, d, w, p in kills
    ]
    lines.append(
        f"  final run: {sc.runs[-1]['elapsed']:.1f}s; took over {startup:.1f}s after start, "
        f"recovered in {recovery:.2f}s"
    )
    print("\n" + "\n".join(lines))
