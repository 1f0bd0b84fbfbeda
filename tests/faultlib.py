"""Fault injection: kill -9, outages, a full disk and concurrent starts against real runs,
each followed by a row-for-row check of the sinks against an independent reference.

The workload is one generated data set (orders: id, customer, amount, event time) read by a
``FileSource``; the pipeline keeps the positive orders (a stateless sink) and sums them per
customer in 20 s tumbling windows over 10 s cycle windows (keyed state crosses every other
cycle); ``running=True`` adds a running total per customer (keyed state every round reads and
changes, never emptied, so compaction folds real state). The reference computes the same
outputs with pandas from the generated rows, independently of Spark and Lockgate, window of
emission included.

Runs are real processes: ``lockgate run`` on the embedded default (its own process group, so
a SIGKILL takes its Spark JVM too) and ``lockgate server`` with its worker processes. The
faults (one line of progress each; a :class:`Tally` keeps the figures):

- ``random``: SIGKILL of a whole run at a random instant after it took the job over;
- ``aimed``: ``LOCKGATE_FAULT=<point>:<window>`` (:mod:`lockgate.faults`), mostly at
  the commit phase: a round STAGED and not committed, a commit half done, a replay of a
  staged round killed again;
- ``sink_outage``: the sink's PostgreSQL (a private server) stopped mid-run or down at start;
- ``disk_full``: the sinks' disk filled mid-run;
- ``concurrent``: several runs of one job started at once or close together;
- ``worker`` and ``controller``: SIGKILL of a worker of ``lockgate server``, and of the
  controller itself (restarted at once over the same home); the recovery time is from the
  kill to the job's next committed window.

After every fault the sinks hold only whole windows, each the reference's, and none beyond
the window being committed; when a job finishes, every sink equals the reference: rows lost
(in the reference, not in the sink), rows duplicated (a reference row more than once) and
wrong rows (in no reference) are counted, and all must be 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

LOCKGATE = str(Path(sys.executable).with_name("lockgate"))
#: short-lived driver JVMs on a small machine: the C1 compiler and the serial collector start faster
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
CYCLE_S, TUMBLE_S = 10, 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)
FIRST = int(T0.timestamp()) // CYCLE_S
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RUN_TIMEOUT_S = 300
CUSTOMERS = 30

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(seconds={cycle}), parallelism=2)
orders = pipeline.source(lg.FileSource({src!r}, event_time="ts"), name="orders")
kept = orders.filter("amount > 0")
kept.sink(lg.FileSink({out!r} + "/kept"), name="kept_files")
totals = (
    kept.key_by("customer")
    .window(lg.Tumbling(timedelta(seconds={tumble})))
    .aggregate(n=lg.count(), total=lg.sum("amount"), name="per_customer")
)
totals.sink(lg.FileSink({out!r} + "/totals"), name="totals_files")
'''
PG_SINK = 'totals.sink(lg.PostgresSink({url!r}, {table!r}), name="totals_pg")\n'
#: a running total per customer: keyed state that every round reads and changes, never emptied
RUNNING = (
    'kept.key_by("customer").aggregate(n=lg.count(), total=lg.sum("amount"), name="running")'
    '.sink(lg.FileSink({out!r} + "/running"), name="running_files")\n'
)


class FaultCheckError(AssertionError):
    """A sink or the catalog is not what the reference and the fault allow."""


def progress(line: str) -> None:
    """One line of progress, on the terminal even under pytest's capture (``-s`` shows it)."""
    print(f"[faults {time.strftime('%H:%M:%S')}] {line}", flush=True)


# -- data and the independent reference ---------------------------------------------------
def make_orders(windows: int, per_window: int, seed: int) -> pd.DataFrame:
    """``per_window`` orders in each of ``windows`` cycle windows from :data:`T0`."""
    rng = np.random.default_rng(seed)
    n = windows * per_window
    offsets = np.repeat(np.arange(windows) * CYCLE_S * 1_000_000, per_window)
    offsets += rng.integers(0, CYCLE_S * 1_000_000, n)
    return pd.DataFrame({
        "id": np.arange(n, dtype="int64"),
        "customer": [f"c{i}" for i in rng.integers(0, CUSTOMERS, n)],
        "amount": rng.integers(-3, 40, n).astype("int64"),
        "ts": pd.to_datetime(int(T0.timestamp() * 1_000_000) + offsets, unit="us", utc=True)
        .astype("datetime64[us, UTC]"),
    })


def reference(orders: pd.DataFrame) -> dict[str, Counter]:
    """Each sink's rows as a multiset of tuples (times as epoch microseconds), with the
    window that emits them: a kept order in its own cycle window, a tumbling window's sum in
    the cycle window holding its last instant."""
    kept = orders.assign(us=orders["ts"].astype("datetime64[us, UTC]").astype("int64"))[orders["amount"] > 0]
    tumble, cycle = TUMBLE_S * 1_000_000, CYCLE_S * 1_000_000
    kept_rows = Counter(
        ("kept", int(r.us // cycle), int(r.id), r.customer, int(r.amount), int(r.us)) for r in kept.itertuples()
    )
    kept = kept.assign(start=kept["us"] // tumble * tumble)
    sums = kept.groupby(["start", "customer"]).agg(n=("amount", "size"), total=("amount", "sum")).reset_index()
    totals = Counter(
        ("totals", int((r.start + tumble) // cycle - 1), int(r.start), int(r.start + tumble), r.customer, int(r.n),
         int(r.total))
        for r in sums.itertuples()
    )
    # running totals: each cycle window emits, for every customer it saw, the totals so far
    kept = kept.assign(cycle=kept["us"] // cycle)
    per_cycle = kept.groupby(["customer", "cycle"]).agg(n=("amount", "size"), total=("amount", "sum")).reset_index()
    per_cycle = per_cycle.sort_values(["customer", "cycle"])
    per_cycle[["n", "total"]] = per_cycle.groupby("customer")[["n", "total"]].cumsum()
    running = Counter(
        ("running", int(r.cycle), r.customer, int(r.n), int(r.total), int((r.cycle + 1) * cycle))
        for r in per_cycle.itertuples()
    )
    return {"kept_files": kept_rows, "totals_files": totals, "totals_pg": Counter(
        ("totals", *row[1:]) for row in totals.elements()), "running_files": running}


def _micros(value: Any) -> Any:
    """A timestamp as epoch microseconds (naive ones are UTC); anything else as it is."""
    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return (value - EPOCH) // timedelta(microseconds=1)
    return value


def _file_rows(folder: Path, kind: str, columns: list[str]) -> Counter:
    if not folder.exists():
        return Counter()
    table = ds.dataset(str(folder), format="parquet", partitioning="hive").to_table()
    if table.num_rows == 0 or "lg_window" not in table.column_names:
        return Counter()
    cols = [table["lg_window"].to_pylist()] + [
        (table[c].cast(pa.int64()) if pa.types.is_timestamp(table[c].type) else table[c]).to_pylist() for c in columns
    ]
    return Counter((kind, *row) for row in zip(*cols, strict=True))


def compare(want: Counter, got: Counter) -> dict[str, int]:
    """Rows lost (wanted, missing), duplicated (a wanted row more often than wanted) and wrong
    (wanted nowhere)."""
    extra = got - want
    return {
        "rows": sum(want.values()),
        "lost": sum((want - got).values()),
        "duplicated": sum(n for row, n in extra.items() if row in want),
        "wrong": sum(n for row, n in extra.items() if row not in want),
    }


# -- one job --------------------------------------------------------------------------------
class Workload:
    """One job: generated input, pipeline file, output folder (and PostgreSQL table), home."""

    def __init__(self, root: Path, job: str, *, windows: int = 12, per_window: int = 150, seed: int = 0,
                 out: Path | None = None, pg_url: str | None = None, home: Path | None = None,
                 running: bool = False):
        self.root = root / job
        self.root.mkdir(parents=True, exist_ok=True)
        self.job = job
        self.home = home or self.root / "home"
        self.out = out or self.root / "out"
        self.pg_url = pg_url
        self.table = f"totals_{job}"
        self.first, self.last = FIRST, FIRST + windows - 1
        orders = make_orders(windows, per_window, seed)
        src = self.root / "src"
        src.mkdir(exist_ok=True)
        for w in range(windows):
            part = orders.iloc[w * per_window:(w + 1) * per_window]
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False), src / f"part-{w:04d}.parquet")
        self.expected = reference(orders)
        if pg_url is None:
            del self.expected["totals_pg"]
        if not running:
            del self.expected["running_files"]
        text = PIPELINE.format(job=job, cycle=CYCLE_S, tumble=TUMBLE_S, src=str(src), out=str(self.out))
        if pg_url:
            text += PG_SINK.format(url=pg_url, table=self.table)
        if running:
            text += RUNNING.format(out=str(self.out))
        self.pipeline = self.root / "pipe.py"
        self.pipeline.write_text(text)
        self.ref = f"{self.pipeline}:pipeline"
        self.runs = 0

    @property
    def sinks(self) -> list[str]:
        return sorted(self.expected)

    # -- the catalog, read without writing -------------------------------------------------
    def _query(self, sql: str, *args: Any) -> list[tuple]:
        db = self.home / "catalog.db"
        if not db.exists():
            return []
        try:
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
                return conn.execute(sql, args).fetchall()
        except sqlite3.Error:
            return []

    def generation(self) -> int:
        rows = self._query("SELECT generation FROM lg_jobs WHERE name = ?", self.job)
        return rows[0][0] if rows else 0

    def state(self) -> str | None:
        rows = self._query("SELECT state FROM lg_jobs WHERE name = ?", self.job)
        return rows[0][0] if rows else None

    def complete(self) -> list[int]:
        """The windows with a COMPLETE or EXPIRED (retention) checkpoint, in order."""
        rows = self._query('SELECT "window" FROM lg_checkpoints WHERE job = ? AND status IN '
                           "('COMPLETE', 'EXPIRED') ORDER BY \"window\"", self.job)
        return [r[0] for r in rows]

    def last_complete(self) -> int | None:
        rows = self._query("SELECT max(\"window\") FROM lg_checkpoints WHERE job = ? AND status = 'COMPLETE'",
                           self.job)
        return rows[0][0] if rows else None

    def next_window(self) -> int:
        """The next window a run computes: after the last complete one and after every window
        left STAGED (a catch-up group stages all its windows before it commits the first; a
        run replays those commits, it does not compute them again)."""
        last = self.last_complete()
        rows = self._query("SELECT max(\"window\") FROM lg_cycles WHERE job = ? AND state = 'STAGED'", self.job)
        staged = rows[0][0] if rows else None
        ahead = max((w for w in (last, staged) if w is not None), default=None)
        return self.first if ahead is None else ahead + 1

    def staged(self) -> int | None:
        """The window of a round left STAGED (recorded, not committed), if any."""
        rows = self._query("SELECT \"window\" FROM lg_cycles WHERE job = ? AND state = 'STAGED' ORDER BY id DESC",
                           self.job)
        return rows[0][0] if rows else None

    def first_commit_after(self, t: float) -> float | None:
        """Seconds from ``t`` (time.time()) to the first checkpoint written after it."""
        since = datetime.fromtimestamp(t, UTC).replace(tzinfo=None).isoformat(sep=" ")
        rows = self._query("SELECT min(created) FROM lg_checkpoints WHERE job = ? AND created >= ?", self.job, since)
        if not rows or rows[0][0] is None:
            return None
        return datetime.fromisoformat(rows[0][0]).replace(tzinfo=UTC).timestamp() - t

    # -- the sinks -------------------------------------------------------------------------
    def output(self) -> dict[str, Counter]:
        got = {
            "kept_files": _file_rows(self.out / "kept", "kept", ["id", "customer", "amount", "ts"]),
            "totals_files": _file_rows(self.out / "totals", "totals",
                                       ["window_start", "window_end", "customer", "n", "total"]),
        }
        if "running_files" in self.expected:
            got["running_files"] = _file_rows(self.out / "running", "running", ["customer", "n", "total", "as_of"])
        if self.pg_url:
            got["totals_pg"] = Counter()
            with psycopg.connect(self.pg_url, connect_timeout=10) as conn:
                if conn.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()[0] is not None:
                    for row in conn.execute(f"SELECT lg_window, window_start, window_end, customer, n, total "
                                            f"FROM {self.table}"):
                        got["totals_pg"][("totals", *(_micros(v) for v in row))] += 1
        return got

    def check_partial(self, where: str) -> None:
        """What holds at any instant, right after a fault included: complete windows run from
        the first on; each window a sink holds is the reference's, whole and once; no sink
        holds a window beyond the one after the last complete one."""
        done = self.complete()
        if done != list(range(self.first, self.first + len(done))):
            raise FaultCheckError(f"{where}: job {self.job}: complete windows {done} are not a prefix")
        got = self.output()
        # a controller may go on committing between the two reads (a catch-up group commits its
        # windows back to back): what the sinks hold is bounded by the catalog read after them
        after = self.complete()
        limit = (after[-1] if after else self.first - 1) + 1
        for sink in self.sinks:
            by_window_got = _by_window(got[sink])
            by_window_want = _by_window(self.expected[sink])
            for w, rows in sorted(by_window_got.items()):
                if w > limit:
                    raise FaultCheckError(f"{where}: {self.job}/{sink} holds window {w}; last complete {limit - 1}")
                if rows != by_window_want.get(w, Counter()):
                    raise FaultCheckError(f"{where}: {self.job}/{sink} window {w} differs from the reference: "
                                          f"{compare(by_window_want.get(w, Counter()), rows)}")
            for w in done:
                if by_window_got.get(w, Counter()) != by_window_want.get(w, Counter()):
                    raise FaultCheckError(f"{where}: {self.job}/{sink} lacks complete window {w}")

    def check_final(self) -> dict[str, int]:
        """The finished job's sinks against the reference: rows, lost, duplicated, wrong."""
        got = self.output()
        totals = Counter()
        for sink in self.sinks:
            if not self.expected[sink]:
                raise FaultCheckError(f"{self.job}/{sink}: the reference is empty")
            totals.update(compare(self.expected[sink], got[sink]))
        leftovers = [p for p in (self.out / "kept" / "_staging").glob("*/*")]
        leftovers += [p for p in (self.out / "totals" / "_staging").glob("*/*")]
        leftovers += [p for p in (self.out / "running" / "_staging").glob("*/*")]
        leftovers += [p for p in (self.home / "staging" / self.job).glob("*/*")]
        totals["staged_left"] = len(leftovers)
        return dict(totals)


def _by_window(rows: Counter) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for row, n in rows.items():
        out.setdefault(row[1], Counter())[row] += n
    return out


# -- embedded runs (the CLI) ----------------------------------------------------------------
class Run:
    """``lockgate run`` of a workload in its own process group."""

    def __init__(self, wl: Workload, env: dict[str, str] | None = None, tag: str = ""):
        self.wl = wl
        wl.runs += 1
        base = wl.root / f"run{wl.runs:03d}{tag}"
        self.stdout, self.stderr = base.with_suffix(".out"), base.with_suffix(".err")
        full = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_FAULT")}
        full.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
        full.update(env or {})
        cmd = [LOCKGATE, "--home", str(wl.home), "run", wl.ref, "--job", wl.job,
               "--from-window", str(wl.first), "--to-window", str(wl.last), "--no-progress"]
        self.generation_before = wl.generation()
        self.started = time.time()
        with open(self.stdout, "wb") as out, open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=full, start_new_session=True)
        LIVE.append(self.proc)
        self.rc: int | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def committed_a_window(self) -> bool:
        """Wait until this run took the job over and committed a window (False: it ended first)."""
        before = self.wl.last_complete()
        return bool(wait_for(lambda: self.took_over() and self.wl.last_complete() != before, RUN_TIMEOUT_S,
                             "a committed window", unless=self.ended))

    def took_over(self) -> bool:
        return self.wl.generation() > self.generation_before

    def kill9(self) -> bool:
        """SIGKILL the run's process group; False when it had already ended."""
        if not self.alive():
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return True

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            self.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            self.proc.wait()
            raise FaultCheckError(
                f"{self.wl.job}: a run did not end in {timeout:.0f}s: {self.error_text()[-2000:]}"
            ) from None
        wait_group_gone(self.proc.pid)
        return self.rc

    def error_text(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    def error_lines(self) -> list[str]:
        return [ln for ln in self.error_text().splitlines() if ln.strip() and not ln.startswith("Picked up JAVA")]

    def one_line_error(self) -> str:
        """The run's error: exit status 2 and one line, or FaultCheckError."""
        lines = self.error_lines()
        if self.rc != 2 or len(lines) != 1 or not lines[0].startswith("lockgate: error: "):
            raise FaultCheckError(f"{self.wl.job}: expected one error line and status 2, got status {self.rc}:\n"
                                  + "\n".join(lines[-40:]))
        return lines[0]


LIVE: list[subprocess.Popen] = []


def kill_leftovers() -> None:
    """SIGKILL the process group of every run this module started that is still alive."""
    while LIVE:
        proc = LIVE.pop()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Every process of the group (a Spark JVM included) has ended."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(p.pid)
            except (ProcessLookupError, psutil.Error):
                continue
        if not alive:
            return
        if time.monotonic() > deadline:
            raise FaultCheckError(f"processes of the killed group {pgid} still alive: {alive}")
        time.sleep(0.2)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.1,
             unless: Callable[[], bool] | None = None) -> Any:
    """Poll ``pred`` until it is true (returned); None when ``unless`` becomes true first."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if unless is not None and unless():
            return pred() or None  # what happened just before the end counts
        if time.monotonic() > deadline:
            raise FaultCheckError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


# -- the figures ----------------------------------------------------------------------------
@dataclass
class Tally:
    """Faults done, rows checked and recovery times, for the summary."""

    faults: Counter = field(default_factory=Counter)
    aimed: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    jobs_checked: int = 0
    partial_checks: int = 0
    failures: list[str] = field(default_factory=list)
    messages: dict[str, list[str]] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def fault(self, kind: str, detail: str) -> None:
        self.faults[kind] += 1
        progress(f"fault {sum(self.faults.values()):3d} {kind:<11} {detail}")

    def recovered(self, kind: str, seconds: float | None) -> None:
        if seconds is not None:
            self.recovery.setdefault(kind, []).append(round(seconds, 2))

    def message(self, kind: str, text: str) -> None:
        seen = self.messages.setdefault(kind, [])
        if text not in seen and len(seen) < 5:
            seen.append(text)

    def job_done(self, wl: Workload) -> dict[str, int]:
        """Check a finished job row for row; counts go to the tally; raises on any loss."""
        if wl.state() != "FINISHED":
            raise FaultCheckError(f"{wl.job}: state {wl.state()}, not FINISHED")
        res = wl.check_final()
        self.rows.update(res)
        self.jobs_checked += 1
        progress(f"checked  {wl.job}: {res['rows']} rows, lost {res['lost']}, duplicated {res['duplicated']}, "
                 f"wrong {res['wrong']}, staged files left {res['staged_left']}")
        if res["lost"] or res["duplicated"] or res["wrong"] or res["staged_left"]:
            raise FaultCheckError(f"{wl.job}: {res}")
        return res

    def summary(self) -> dict[str, Any]:
        def spread(xs: list[float]) -> dict[str, Any]:
            return {"n": len(xs), "median_s": round(statistics.median(xs), 2), "min_s": min(xs), "max_s": max(xs)}

        kills = {k: self.faults[k] for k in ("random", "aimed", "worker", "controller") if self.faults[k]}
        return {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()} cores, {round(psutil.virtual_memory().total / 2**30)} GiB",
            "duration_s": round(time.monotonic() - self.t0, 1),
            "kills": {**kills, "total": sum(kills.values())},
            "aimed_points": dict(sorted(self.aimed.items())),
            "other_faults": {k: n for k, n in self.faults.items() if k not in kills},
            "jobs_checked": self.jobs_checked,
            "partial_checks": self.partial_checks,
            "rows_checked": self.rows["rows"],
            "rows_lost": self.rows["lost"],
            "rows_duplicated": self.rows["duplicated"],
            "rows_wrong": self.rows["wrong"],
            "staged_files_left": self.rows["staged_left"],
            "recovery": {k: spread(v) for k, v in sorted(self.recovery.items()) if v},
            "error_lines": self.messages,
            "failures": self.failures,
        }


# -- the embedded chain -------------------------------------------------------------------------
class Chain:
    """Faults one after another over a rolling job: each run recovers from the fault before
    it; a job that finishes is checked row for row and the next fault starts a new one."""

    def __init__(self, root: Path, tally: Tally, rng: random.Random, *, pg: Any = None, disk: Any = None,
                 windows: int = 12):
        self.root, self.tally, self.rng = root, tally, rng
        self.pg, self.disk, self.windows = pg, disk, windows
        self.window_s = 3.0  # a round's seconds on a cold JVM
        self.recovery_s = 6.0  # from the take-over to the first round (abort, replay, state load)
        self.n = 0
        self.wl = self._new()

    def _new(self) -> Workload:
        self.n += 1
        job = f"chain{self.n:02d}"
        out = (self.disk.path / job) if self.disk is not None else None
        return Workload(self.root, job, windows=self.windows, seed=self.n, out=out,
                        pg_url=self.pg.url if self.pg is not None else None)

    def _pg_is_up(self) -> None:
        """The sink's PostgreSQL answers (outside an outage of ours), or FaultCheckError with its log."""
        if self.pg is None:
            return
        try:
            psycopg.connect(self.pg.url, connect_timeout=5).close()
        except psycopg.OperationalError as err:
            log = self.pg.base / "server.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no server log)"
            raise FaultCheckError(f"the private PostgreSQL went down by itself: {err}\n{tail}") from None

    def _left(self) -> int:
        return self.wl.last - self.wl.next_window() + 1

    def _fresh_if_short(self, need: int) -> None:
        """Finish the job when fewer than ``need`` windows are left, and start a new one."""
        self._pg_is_up()
        if self._left() < need:
            self.finish()
            self.wl = self._new()

    def _after(self, run: Run, where: str) -> None:
        got = self.wl.first_commit_after(run.started)
        self.tally.recovered("rerun_first_commit", got)
        self.wl.check_partial(where)
        self.tally.partial_checks += 1

    def _ended_by_itself(self, run: Run) -> None:
        if run.rc != 0:
            raise FaultCheckError(f"{self.wl.job}: run ended with {run.rc}: {run.error_text()[-2000:]}")
        self.tally.job_done(self.wl)
        self.wl = self._new()

    def random_kill(self) -> None:
        """SIGKILL at a random instant of the run's rounds or of its recovery."""
        while True:
            self._fresh_if_short(2)
            run = Run(self.wl)
            took = wait_for(run.took_over, RUN_TIMEOUT_S, "the run to take the job over", unless=run.ended)
            delay = self.rng.uniform(0.0, self.recovery_s + min(self._left(), 4) * self.window_s)
            done_before = self.wl.last_complete()  # at the take-over
            if took:
                time.sleep(delay)
            if run.kill9():
                run.wait()
                self.tally.fault("random", f"{self.wl.job}: +{delay:.1f}s after take-over, "
                                 f"last complete window {_rel(self.wl.last_complete())} (at the take-over {_rel(done_before)})")
                self._after(run, "after a random kill")
                return
            run.wait()
            self._ended_by_itself(run)
            # the run outran the kill (catch-up groups run many windows at once): aim earlier
            self.window_s = max(0.2, self.window_s * 0.7)
            self.recovery_s = max(1.0, self.recovery_s * 0.8)

    def aimed_kill(self, point: str, at: str) -> None:
        """``LOCKGATE_FAULT=point:W``: ``at`` is ``next`` (the next window to run), ``later``
        (the one after it) or ``replay`` (the staged window the recovery replays)."""
        self._pg_is_up()
        if at == "replay" and self.wl.staged() is None:
            self.aimed_kill("after_stage", "later")  # the round the recovery will replay
        elif at != "replay":
            self._fresh_if_short(3)
        staged = self.wl.staged()
        window = {"next": self.wl.next_window(), "later": self.wl.next_window() + 1, "replay": staged}[at]
        if window is None:
            raise FaultCheckError(f"{self.wl.job}: no staged window to aim {point} at")
        run = Run(self.wl, {"LOCKGATE_FAULT": f"{point}:{window}"})
        rc = run.wait()
        if rc != -signal.SIGKILL:
            raise FaultCheckError(f"{self.wl.job}: {point}:{window} did not kill the run (exit {rc}): "
                                  f"{run.error_text()[-2000:]}")
        self.tally.aimed[f"{point}@{at}"] += 1
        self._check_point(point, window)
        self.tally.fault("aimed", f"{self.wl.job}: {point} at window {_rel(window)} ({at}); cycle "
                         f"{self._cycle_state(window)}, last complete {_rel(self.wl.last_complete())}")
        self._after(run, f"after {point}:{window}")

    def _cycle_state(self, window: int) -> str | None:
        rows = self.wl._query('SELECT state FROM lg_cycles WHERE job = ? AND "window" = ? ORDER BY id DESC LIMIT 1',
                              self.wl.job, window)
        return rows[0][0] if rows else None

    def _check_point(self, point: str, window: int) -> None:
        state, done = self._cycle_state(window), self.wl.last_complete()
        want = {"before_run": "RUNNING", "before_stage": "RUNNING", "after_stage": "STAGED", "mid_commit": "STAGED",
                "after_commit": "STAGED", "after_checkpoint": "COMMITTED"}[point]
        checkpointed = done is not None and done >= window
        if state != want or checkpointed != (point == "after_checkpoint"):
            raise FaultCheckError(f"{self.wl.job}: killed at {point}:{window}, the round is {state} "
                                  f"and the last complete window {done}")

    def sink_outage(self, when: str = "mid-run") -> None:
        """Stop the sink's PostgreSQL mid-run (after the run committed a window) or before it
        starts: the run ends with one error line; the database comes back."""
        assert self.pg is not None, "a sink outage needs the PostgreSQL sink"
        while True:
            self._fresh_if_short(3)
            if when == "at-start":
                self.pg.stop()
            run = Run(self.wl)
            stopped = when == "at-start"
            if when == "mid-run" and run.committed_a_window() and run.alive():
                self.pg.stop()
                stopped = True
            rc = run.wait()
            if stopped:
                self.pg.start()
            if rc == 0 and when == "mid-run":
                self._ended_by_itself(run)
                continue
            line = run.one_line_error()
            if "PostgreSQL" not in line:
                raise FaultCheckError(f"{self.wl.job}: the outage's error does not name PostgreSQL: {line}")
            self.tally.message("sink_outage", _generic(line, self.wl))
            self.tally.fault("sink_outage", f"{self.wl.job}: PostgreSQL down {when}, exit 2, last complete "
                             f"{_rel(self.wl.last_complete())}")
            self._after(run, f"after a sink outage {when}")
            return

    def disk_full(self) -> None:
        """Fill the sinks' disk once the run committed a window: one error line; then free it."""
        assert self.disk is not None, "a full disk needs the sinks on a small disk"
        while True:
            self._fresh_if_short(3)
            run = Run(self.wl)
            if run.committed_a_window() and run.alive():
                self.disk.fill()
            rc = run.wait()
            self.disk.free()
            if rc == 0:
                self._ended_by_itself(run)
                continue
            line = run.one_line_error()
            if "full" not in line:
                raise FaultCheckError(f"{self.wl.job}: the full disk's error does not say so: {line}")
            self.tally.message("disk_full", _generic(line, self.wl))
            self.tally.fault("disk_full", f"{self.wl.job}: disk filled mid-run, exit 2, last complete "
                             f"{_rel(self.wl.last_complete())}")
            self._after(run, "after a full disk")
            return

    def concurrent(self, n: int) -> None:
        """``n`` runs of the job, started within a few seconds of one another: each ends
        finished (status 0) or with one error line (status 2, fenced)."""
        self._fresh_if_short(4)
        runs = [Run(self.wl, tag="-c0")]
        for i in range(1, n):
            time.sleep(self.rng.uniform(0.0, 3.0 * self.window_s / (n - 1)))
            runs.append(Run(self.wl, tag=f"-c{i}"))
        codes = [r.wait() for r in runs]
        for r in runs:
            if r.rc == 2:
                self.tally.message("concurrent", _generic(r.one_line_error(), self.wl))
            elif r.rc != 0:
                raise FaultCheckError(f"{self.wl.job}: a concurrent run ended with {r.rc}: "
                                      + "\n".join(r.error_lines()[-40:]))
        self.tally.fault("concurrent", f"{self.wl.job}: {n} runs at once, exit codes {codes}")
        self.wl.check_partial("after concurrent starts")
        self.tally.partial_checks += 1
        if self.wl.state() == "FINISHED":
            self.tally.job_done(self.wl)
            self.wl = self._new()

    def finish(self) -> None:
        """A run with no fault: the job finishes; its output is checked row for row."""
        if self.wl.state() is None:
            return
        if self.wl.state() != "FINISHED":
            run = Run(self.wl)
            if run.wait() != 0:
                raise FaultCheckError(f"{self.wl.job}: the clean run failed ({run.rc}): {run.error_text()[-3000:]}")
            self.tally.recovered("rerun_first_commit", self.wl.first_commit_after(run.started))
        self.tally.job_done(self.wl)


def _rel(window: int | None) -> str:
    return "none" if window is None else str(window - FIRST)


def _generic(line: str, wl: Workload) -> str:
    """An error line with the run's own paths and job name made generic, for the summary."""
    return line.replace(str(wl.out), "<out>").replace(str(wl.root), "<job>").replace(wl.job, "<job>")


# -- the controller --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Controller:
    """A ``lockgate server`` process (its own process group; its workers have theirs)."""

    def __init__(self, root: Path, standby: int = 1):
        self.root = root
        self.home = root / "home"
        self.port = free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.args = ["--heartbeat-interval", "1", "--heartbeat-timeout", "6", "--restart-backoff", "0.5",
                     "--restart-backoff-max", "4", "--standby-workers", str(standby)]
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 120) -> Controller:
        self.starts += 1
        log = self.root / f"controller-{self.starts}.log"
        self.root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN",) and not k.startswith("LOCKGATE_FAULT")}
        env.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
        # catch-up groups of two windows: the grouped commit path runs on the controller, and a
        # job still has rounds under way for a kill to land in (adaptive groups finish the
        # suite's 12 windows in two rounds)
        env.setdefault("LOCKGATE_CATCHUP", "2")
        # loopback, and the suite's own pipelines: any reference accepted (development mode)
        cmd = [LOCKGATE, "server", "--home", str(self.home), "--port", str(self.port), *self.args,
               "--allow-any-pipeline"]
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         cwd=self.root)
        LIVE.append(self.proc)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise FaultCheckError(f"lockgate server exited with {proc.returncode}: {log.read_text()[-3000:]}")
            return "listening on" in log.read_text(errors="replace")

        wait_for(ready, timeout, "the controller to listen")
        return self

    def client(self) -> Any:
        import lockgate

        return lockgate.connect(self.url)

    def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def worker_processes(self) -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                cmd = p.info["cmdline"] or []
                if "lockgate.server.worker" in cmd and str(self.home) in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def cleanup(self) -> None:
        """Stop the controller (SIGTERM), then SIGKILL any worker of it left, by process group."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill9()
        with contextlib.suppress(FaultCheckError):
            wait_for(lambda: not self.worker_processes(), 30, "the workers to leave", every=0.5)
        for p in self.worker_processes():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)


class ControllerFaults:
    """Kill -9 of workers and of the controller under jobs run by ``lockgate server``."""

    def __init__(self, root: Path, tally: Tally, rng: random.Random, windows: int = 12):
        self.root, self.tally, self.rng, self.windows = root, tally, rng, windows
        self.ctl = Controller(root / "controller").start()
        self.n = 0
        self.wl: Workload | None = None

    def _new(self) -> None:
        self.n += 1
        self.wl = Workload(self.root, f"served{self.n:02d}", windows=self.windows, seed=100 + self.n,
                           home=self.ctl.home)
        client = self.ctl.client()
        try:
            client.start_run(self.wl.ref, job=self.wl.job, first=self.wl.first, last=self.wl.last)
        finally:
            client.close()

    def _ready(self) -> bool:
        """The job has a window committed since the last recovery and a round running; a
        new job is started when the current one is nearly done."""
        assert self.wl is not None
        if self.wl.state() == "FINISHED":
            self.tally.job_done(self.wl)
            self._new()
            return False
        return self.wl.last_complete() is not None and self.wl.last_complete() <= self.wl.last - 2

    def _busy_worker(self) -> int | None:
        client = self.ctl.client()
        try:
            busy = [w["pid"] for w in client.list_workers() if w["state"] == "BUSY"]
        finally:
            client.close()
        return busy[0] if busy else None

    def kill(self, kind: str) -> None:
        """kill -9 of the job's worker (``worker``) or of the controller, restarted at once
        (``controller``), at a random instant of a round; time to the next committed window."""
        if self.wl is None:
            self._new()
        pid = None
        while True:  # a round under way, after a window committed since the last fault
            wait_for(self._ready, RUN_TIMEOUT_S, "a committed window far enough from the end", every=0.2)
            wl = self.wl
            assert wl is not None
            since = wl.last_complete()
            wait_for(lambda wl=wl, since=since: wl.last_complete() != since or wl.state() == "FINISHED", RUN_TIMEOUT_S,
                     "a window committed since the last fault")
            if wl.state() == "FINISHED":
                continue
            time.sleep(self.rng.uniform(0.0, 1.5))
            done = wl.last_complete()
            if kind != "worker":
                break
            # a catch-up group may take the job's last windows at once: then the next job's worker
            pid = wait_for(self._busy_worker, 60, "the job's worker", every=0.2,
                           unless=lambda wl=wl: wl.state() == "FINISHED")
            if pid is not None:
                break
        if pid is not None:
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
        else:
            t_kill = time.time()
            self.ctl.kill9()
            self.ctl.start()
        wait_for(lambda: (wl.last_complete() or 0) > (done or 0) or wl.state() == "FINISHED", RUN_TIMEOUT_S,
                 "the next committed window", every=0.05)
        seconds = time.time() - t_kill
        self.tally.recovered(f"{kind}_kill_to_next_commit", seconds)
        wl.check_partial(f"after kill -9 of the {kind}")
        self.tally.partial_checks += 1
        self.tally.fault(kind, f"{wl.job}: kill -9 of the {kind} after window {_rel(done)}; next window committed "
                         f"{seconds:.1f}s after the kill")

    def finish(self) -> None:
        if self.wl is not None:
            wl = self.wl
            state = wait_for(lambda: wl.state() in ("FINISHED", "FAILED") and wl.state(), RUN_TIMEOUT_S,
                             "the job to finish", every=0.5)
            if state != "FINISHED":
                raise FaultCheckError(f"{wl.job}: FAILED: {wl._query('SELECT last_error FROM lg_jobs WHERE name = ?', wl.job)}")
            self.tally.job_done(wl)

    def close(self) -> None:
        self.ctl.cleanup()


# -- the plan ----------------------------------------------------------------------------
#: aimed kills, in order: each ``(point, at)`` (see :meth:`Chain.aimed_kill`); a replay kills
#: the recovery of the kill before it (only the commit points fire while a staged round is replayed)
AIMED = [
    ("mid_commit", "later"), ("after_stage", "later"), ("mid_commit", "replay"), ("after_commit", "replay"),
    ("after_checkpoint", "replay"), ("before_run", "next"), ("before_stage", "later"), ("after_stage", "next"),
    ("after_commit", "replay"), ("after_commit", "later"), ("after_stage", "later"), ("mid_commit", "replay"),
    ("after_checkpoint", "replay"), ("before_stage", "next"), ("after_checkpoint", "later"), ("mid_commit", "later"),
]


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def write_summary(tally: Tally, path: str | Path) -> dict[str, Any]:
    summary = tally.summary()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def interleave(*groups: Iterable[str]) -> list[str]:
    """Round-robin over ``groups`` (kinds of fault spread over a run instead of in blocks)."""
    lists = [list(g) for g in groups]
    out = []
    while any(lists):
        for g in lists:
            if g:
                out.append(g.pop(0))
    return out


def full_loop() -> bool:
    """True under ``scripts/faults.sh`` (``LOCKGATE_FAULTS_FULL=1``): the long form."""
    return os.environ.get("LOCKGATE_FAULTS_FULL") == "1"


def seed() -> int:
    return env_int("LOCKGATE_FAULTS_SEED", 20261124)
