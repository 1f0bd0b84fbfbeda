"""`lockgate --controller grpc://... run` when the controller dies mid-run (kill -9): the CLI
says in one line that the job goes on, waits for a controller started again over the same
home, follows the job to its end and prints the usual summary. A wait that expires ends with
one line saying the job is not lost and how to follow it (`lockgate follow JOB`), which then
works. A controller unreachable from the start is one line and status 2, at once."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
EVENTS = 24_000  # 400 events/s: 60 s of data, 12 cycle windows
LAST = FIRST + 11
BIDS = EVENTS * 46 // 50  # the Nexmark mix: 46 of every 50 events are bids

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("reattach", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=400, seed=5, start="2026-01-01T00:00:00",
                                        max_events={events}), name="bids")
(bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))
     .aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
     .sink(lg.CollectSink("per_auction"), name="out"))
'''


def _ref(tmp_path: Path) -> str:
    path = tmp_path / "reattach_pipe.py"
    path.write_text(PIPELINE.format(events=EVENTS))
    return f"{path}:pipeline"


class Cli:
    """A `lockgate` command running in the background, its output in files."""

    def __init__(self, cli, root: Path, name: str, *args: str):
        self.out, self.err = root / f"{name}.out", root / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cli.cmd(*args), stdout=out, stderr=err)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait(self, timeout: float) -> tuple[int, str, str]:
        rc = self.proc.wait(timeout)
        return rc, self.out.read_text(), self.stderr()


def _lockgate(cli, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli.cmd(*args), capture_output=True, text=True, timeout=timeout)


def test_unreachable_controller_is_one_line_at_once(cli, tmp_path):
    url = f"grpc://127.0.0.1:{cli.free_port()}"  # nothing listens there
    for args in (("run", _ref(tmp_path), "--until-caught-up"), ("follow", "reattach"), ("jobs",)):
        t0 = time.monotonic()
        proc = _lockgate(cli, "--controller", url, *args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"lockgate: error: cannot reach the Lockgate controller "
                                                       f"at {url}"), (args, proc.stderr)
        assert time.monotonic() - t0 < 20  # no waiting for a controller that never answered


def test_run_follows_the_job_again_after_the_controller_is_killed_and_restarted(cli, make_controller, tmp_path):
    ref = _ref(tmp_path)
    ctl = make_controller("ctl", args=("--standby-workers", "0", "--keep-checkpoints", "100")).start()
    url = ctl.url

    # 1. kill -9 of the controller after two committed windows of a followed run; started
    #    again a few seconds later over the same home: the CLI follows the job to its end
    run = Cli(cli, tmp_path, "run", "--controller", url, "run", ref, "--from-window", str(FIRST),
              "--to-window", str(LAST), "--reattach-timeout", "120")
    cli.wait_for(lambda: run.proc.poll() is not None or "windows 2/12" in run.stderr(), 300, "two windows")
    assert run.proc.poll() is None, run.stderr()
    ctl.kill9()
    cli.wait_for(lambda: run.proc.poll() is not None or "unreachable" in run.stderr(), 30, "the waiting line")
    time.sleep(3)  # the CLI polls a controller that does not answer
    assert run.proc.poll() is None, run.stderr()
    ctl.start()
    rc, out, err = run.wait(300)
    assert rc == 0, err
    waiting = [line for line in err.splitlines() if "unreachable" in line]
    assert len(waiting) == 1 and re.fullmatch(
        rf"lockgate: controller at {re.escape(url)} unreachable \(.+\); job 'reattach' continues when a "
        r"controller is back over the same catalog; waiting up to 120 s \(--reattach-timeout\) \.\.\.",
        waiting[0]), err
    assert sum("is back: following job 'reattach'" in line for line in err.splitlines()) == 1, err
    assert "Traceback" not in err
    summary = re.fullmatch(
        r"job reattach: FINISHED; windows (\d+)\.\.(\d+): (\d+) run, (\d+) already complete; "
        r"([\d,]+) rows in, ([\d,]+) rows out, (\d+) late; [\d.]+s \([\d,]+ rows/s\)\n", out)
    assert summary, out
    first, last, ran, skipped, rows_in = (int(summary.group(i).replace(",", "")) for i in range(1, 6))
    assert (first, last, ran, skipped) == (FIRST, LAST, 12, 0)
    assert rows_in == BIDS
    cps = json.loads(_lockgate(cli, "--controller", url, "--json", "checkpoints", "reattach").stdout)
    assert [c["window"] for c in cps] == list(range(FIRST, LAST + 1))  # each window once
    assert sum(c["rows_in"] for c in cps) == BIDS
    assert int(summary.group(6).replace(",", "")) == sum(c["rows_out"] for c in cps)

    # 2. nothing left to run: one sensible line, not an inverted range
    again = _lockgate(cli, "--controller", url, "run", ref, "--until-caught-up", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"job 'reattach' is caught up: nothing to run (last committed window {LAST})\n"

    # 3. a wait that expires: one line, status 2, the job is not lost and how to follow it
    run = Cli(cli, tmp_path, "run2", "--controller", url, "run", ref, "--job", "other", "--from-window",
              str(FIRST), "--to-window", str(LAST), "--reattach-timeout", "3")
    cli.wait_for(lambda: run.proc.poll() is not None or "windows 1/12" in run.stderr(), 300, "a window")
    ctl.kill9()
    t_kill = time.monotonic()
    rc, out, err = run.wait(60)
    assert rc == 2, err
    assert time.monotonic() - t_kill < 20
    notes = [line for line in err.splitlines() if line.startswith("lockgate:")]
    assert len(notes) == 2, err  # the waiting line, then the error
    assert notes[1] == (
        f"lockgate: error: no controller answered at {url} for 3 s. Job 'other' is not lost: it goes on from "
        "its last complete window once a controller runs again over the same catalog. Follow it then with: "
        f"lockgate --controller {url} follow other"
    ), err
    assert "Traceback" not in err and out == ""

    # 4. ... which works: the controller is back, `lockgate follow` follows the job to its end
    ctl.start()
    follow = _lockgate(cli, "--controller", url, "follow", "other")
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == f"job other: FINISHED; last complete window {LAST}\n"
    cps = json.loads(_lockgate(cli, "--controller", url, "--json", "checkpoints", "other").stdout)
    assert [c["window"] for c in cps] == list(range(FIRST, LAST + 1))
    assert sum(c["rows_in"] for c in cps) == BIDS
