"""The `lockgate` command, run as a user runs it: a real process, real Spark, quiet output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from lockgate_command import NOISE, lockgate

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("cli_demo", cycle_window=timedelta(seconds=10))
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=200, seed=3,
                                        start="2026-01-01T00:00:00", max_events=8000), name="bids")
(bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))
     .aggregate(n=lg.count(), top=lg.max("price"), name="per_auction")
     .sink(lg.CollectSink("per_auction"), name="out"))
'''

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    ref = root / "pipe.py"
    ref.write_text(PIPELINE)
    return root / "home", f"{ref}:pipeline"


def test_explain_json_is_quiet(setup):
    home, ref = setup
    proc = lockgate(home, "--json", "explain", ref)
    data = json.loads(proc.stdout)
    assert data["logical"]["name"] == "cli_demo"
    assert not any(n in proc.stderr for n in NOISE), proc.stderr


def test_run_jobs_checkpoints_restore_and_gap(setup):
    home, ref = setup
    # event 0 is at 2026-01-01T00:00:00; windows of 10 s: 40 s of data = 4 windows
    proc = lockgate(home, "--json", "run", ref, "--from", "2026-01-01T00:00:00", "--to", "2026-01-01T00:00:30")
    res = json.loads(proc.stdout)
    assert res["windows_run"] == 3 and res["state"] == "FINISHED" and res["rows_in"] == 5520  # 46 of every 50 events are bids
    assert not any(n in proc.stderr for n in NOISE), proc.stderr
    first = res["first_window"]

    jobs = json.loads(lockgate(home, "--json", "jobs").stdout)
    assert [(j["name"], j["state"], j["last_window"]) for j in jobs] == [("cli_demo", "FINISHED", first + 2)]

    cps = json.loads(lockgate(home, "--json", "checkpoints", "cli_demo").stdout)
    assert [c["window"] for c in cps] == [first, first + 1, first + 2]
    assert sum(c["rows_in"] for c in cps) == 5520

    text = lockgate(home, "checkpoints", "cli_demo").stdout
    assert "WINDOW" in text and str(first + 2) in text

    gap = lockgate(home, "run", ref, "--from-window", str(first + 5), "--to-window", str(first + 6), check=False)
    assert gap.returncode == 2
    assert f"windows {first + 3}..{first + 4} not complete" in gap.stderr
    assert "Traceback" not in gap.stderr

    restored = lockgate(home, "restore", "cli_demo", "--window", str(first))
    assert f"restored to window {first}" in restored.stdout
    cps = json.loads(lockgate(home, "--json", "checkpoints", "cli_demo").stdout)
    assert [c["window"] for c in cps] == [first]

    rerun = lockgate(home, "run", ref, "--until-caught-up")
    assert re.fullmatch(rf"job cli_demo: FINISHED; windows {first + 1}\.\.{first + 3}: 3 run, 0 already complete; "
                        r"[\d,]+ rows in, [\d,]+ rows out, 0 late; [\d.]+s \([\d,]+ rows/s\)\n", rerun.stdout), rerun.stdout
    # into a pipe: one plain line per window, its total from the run_planned event (no range was given)
    assert "\x1b" not in rerun.stderr and "\r" not in rerun.stderr, repr(rerun.stderr)
    progress = [line for line in rerun.stderr.splitlines() if line.startswith("windows ")]
    assert len(progress) == 3, rerun.stderr
    for i, line in enumerate(progress, 1):
        assert re.fullmatch(rf"windows {i}/3 \({3 - i} left\)  window {first + i}  [\d,]+ rows in  [\d,]+ rows/s",
                            line), line

    # the windowed aggregate's keyed state at the latest checkpoint: its 10 s windows close
    # with each 10 s cycle, so none is open; the columns come from the plan
    assert json.loads(lockgate(home, "--json", "state", "cli_demo").stdout) == []
    text = lockgate(home, "state", "cli_demo", "--window", str(first + 3)).stdout
    assert text.splitlines() == ["AUCTION  WINDOW_START  WINDOW_END  N  TOP", "0 rows"]
    # the rerun was one catch-up group (first+1..first+3): the checkpoints inside it are derived,
    # restorable by replay but holding no state of their own to read
    derived = lockgate(home, "state", "cli_demo", "--window", str(first + 2), check=False)
    assert derived.returncode == 2 and "Traceback" not in derived.stderr
    assert f"the checkpoint of window {first + 2} is derived" in derived.stderr
    assert f"Read the nearest checkpoint that stores its state (window {first + 3}" in derived.stderr
    nope = lockgate(home, "state", "cli_demo", "--operator", "nope", check=False)
    assert nope.returncode == 2 and nope.stderr.strip() == (
        "lockgate: error: job 'cli_demo' has no stateful operator 'nope' at window "
        f"{first + 3}; its stateful operators: per_auction")

    # nothing left to run: said plainly, never as an inverted range
    idle = lockgate(home, "run", ref, "--until-caught-up")
    assert f"job 'cli_demo' is caught up: nothing to run (last committed window {first + 3})" in idle.stdout
    assert ".." not in idle.stdout and "Traceback" not in idle.stderr
    inverted = lockgate(home, "run", ref, "--from-window", str(first + 2), "--to-window", str(first), check=False)
    assert inverted.returncode == 2
    assert inverted.stderr.strip() == (f"lockgate: error: --to-window {first} is before --from-window {first + 2}: "
                                       "nothing to run")

    # a reader that goes away (`lockgate --json checkpoints J | head -1`) ends the command quietly
    env = {**os.environ, "LOCKGATE_HOME": str(home)}
    closed = subprocess.Popen([sys.executable, "-m", "lockgate.cli.main", "--json", "checkpoints", "cli_demo"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    closed.stdout.close()  # before the command writes anything
    assert closed.wait(120) == 141
    assert closed.stderr.read() == b""


def test_bad_reference_is_a_clean_error(setup):
    home, _ = setup
    proc = lockgate(home, "compile", "no/such/file.py:pipeline", check=False)
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_catchup_is_one_line_before_any_round(setup):
    home, _ = setup
    proc = lockgate(home, "run", "no/such/file.py:pipeline", "--to-window", "5", "--catchup", "zero", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "lockgate: error: --catchup='zero': expected 'auto' (adaptive groups, the default), 'off', or the most "
        "windows a catch-up group may hold (1 to 10000)"]


BROKEN = {
    "unknown_column": '''
import lockgate as lg
pipeline = lg.Pipeline("broken")
(pipeline.source(lg.NexmarkSource("bid", max_events=100), name="bids")
    .filter("no_such_column > 3", name="keep").sink(lg.CollectSink("o")))
''',
    "join_without_window": '''
import lockgate as lg
pipeline = lg.Pipeline("broken")
bids = pipeline.source(lg.NexmarkSource("bid", max_events=100), name="bids")
bids.join(bids, on="auction", name="self_join").sink(lg.CollectSink("o"))
''',
}


@pytest.mark.parametrize(("case", "said"), [
    ("unknown_column", "operator 'keep'"),
    ("join_without_window", "operator 'self_join': join() takes exactly one of window=, between= or ttl=, got none"),
])
def test_a_broken_pipeline_is_one_line(setup, case, said):
    home, _ = setup
    path = home.parent / f"{case}.py"
    path.write_text(BROKEN[case])
    proc = lockgate(home, "compile", f"{path}:pipeline", check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockgate: error: ") and said in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "SQLQueryContextLogger" not in proc.stderr
