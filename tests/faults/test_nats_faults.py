"""kill -9 of ``lockgate run`` reading a NATS JetStream source (``nats_url``, a stream of its own):
killed with ``LOCKGATE_FAULT`` right after the window's messages were read (``before_stage``:
nothing staged), and, in ``make faults`` (``LOCKGATE_FAULTS_FULL=1``), with the round staged
(``after_stage``) and with every sink committed but no checkpoint row (``after_commit``).

More messages are published after each kill. The next run must read each killed window's
messages again, exactly: the checkpoints' sequence ranges are contiguous and hold every message
published before the windows ended once, and the file sink holds every such message once, in
the window its arrival falls in (never the ones published later).
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from faultlib import FaultCheckError, Run, Tally, full_loop
from nats_log import Log, next_window

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline({job!r}, cycle_window=timedelta(seconds=1))
bids = pipeline.source(lg.NatsSource({url!r}, {stream!r}, schema="id BIGINT, ts TIMESTAMP", arrival="arrived"),
                       name="bids")
bids.sink(lg.FileSink({out!r}), name="raw")
'''

SHORT = ["before_stage"]
FULL = ["before_stage", "after_stage", "after_commit"]


class NatsWorkload:
    """What :class:`faultlib.Run` needs of a workload: a job of the NatsSource pipeline above."""

    def __init__(self, root: Path, url: str, stream: str, first: int, last: int):
        self.root, self.job, self.first, self.last = root, "nats_faults", first, last
        self.home, self.out = root / "home", root / "out"
        self.runs = 0
        path = root / "nats_faults.py"
        path.write_text(PIPELINE.format(job=self.job, url=url, stream=stream, out=str(self.out)))
        self.ref = f"{path}:pipeline"

    def _query(self, sql: str, *args: object) -> list[tuple]:
        db = self.home / "catalog.db"
        if not db.exists():
            return []
        with sqlite3.connect(db) as conn:
            return conn.execute(sql, args).fetchall()

    def generation(self) -> int:
        rows = self._query("SELECT generation FROM lg_jobs WHERE name = ?", self.job)
        return rows[0][0] if rows else 0

    def ranges(self) -> dict[int, list[int]]:
        import json

        rows = self._query("SELECT \"window\", positions FROM lg_checkpoints WHERE job = ? AND status = 'COMPLETE'",
                           self.job)
        return {w: json.loads(p)["bids"]["offset_ranges"]["0"] for w, p in rows}

    def output(self) -> list[tuple[int, int]]:
        """(id, window) of every row the file sink holds."""
        if not self.out.exists():
            return []
        t = ds.dataset(str(self.out), format="parquet", partitioning="hive").to_table()
        return sorted(zip(t["id"].to_pylist(), t["lg_window"].to_pylist(), strict=True))


def _one_batch_per_window(nats_url: str, windows: int, attempts: int = 3) -> tuple[Log, int]:
    """A new stream holding 5 messages in each of ``windows`` consecutive 1 s windows; returns it
    and the first window. A publish that overruns its window (a loaded machine: connecting and
    publishing took over 0.9 s) spreads a batch over two windows, so the stream is dropped and
    the batches published again, at most ``attempts`` times."""
    for _ in range(attempts):
        log = Log(nats_url)
        a = next_window()
        for w in range(windows):
            log.publish(5)
            if int(time.time()) != a + w:
                log.admin("delete")
                break
            if w + 1 < windows:
                next_window()
        else:
            return log, a
    raise AssertionError(f"each of {attempts} tries to publish one batch per 1 s window overran a window")


def test_kill_after_reading_rereads_the_same_messages(tmp_path: Path, nats_url: str, tally: Tally):
    steps = FULL if full_loop() else SHORT
    log, a = _one_batch_per_window(nats_url, len(steps) + 1)  # one window of messages per kill, and one more
    try:
        last = a + len(steps)
        time.sleep(max(0.0, last + 1.05 - time.time()))
        wl = NatsWorkload(tmp_path, log.url, log.stream, a, last)
        env = {"LOCKGATE_CATCHUP": "off"}
        for i, point in enumerate(steps):
            window = a + i + 1
            run = Run(wl, {**env, "LOCKGATE_FAULT": f"{point}:{window}"})
            rc = run.wait()
            if rc != -signal.SIGKILL:
                raise FaultCheckError(f"{point}:{window} did not kill the run (exit {rc}): {run.error_text()[-2000:]}")
            tally.fault("aimed", f"nats: {point} at window {window - a}")
            tally.aimed[f"nats:{point}"] += 1
            done = wl.ranges()
            assert sorted(done) == list(range(a, window)), (point, done)  # the killed window has no checkpoint
            held = {w for _id, w in wl.output()}
            assert held <= set(range(a, window + (point == "after_commit"))), (point, held)  # whole windows only
            log.publish(3)  # after the windows ended: no window of this job may take them
        finish = Run(wl, env)
        assert finish.wait() == 0, finish.error_text()[-2000:]
        got = wl.ranges()
        assert got == {a + w: [1 + 5 * w, 5 + 5 * w] for w in range(len(steps) + 1)}
        assert wl.output() == [(i, a + i // 5) for i in range(5 * (len(steps) + 1))]
        tally.rows.update(rows=len(wl.output()))
    finally:
        log.admin("delete")
