"""Crash points: LOCKGATE_FAULT parsing, and a real SIGKILL of the process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from lockgate import faults
from lockgate.errors import InvalidArgumentError

CHILD = textwrap.dedent(
    """
    import subprocess, sys, time
    from lockgate import faults

    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print(helper.pid, flush=True)
    for w in range(5):
        faults.maybe_crash("before_run", w)
        faults.maybe_crash("after_stage", w)
    helper.kill()
    print("survived", flush=True)
    """
)


def test_parse():
    assert faults.parse("after_stage:3") == ("after_stage", 3)
    assert faults.parse("mid_commit") == ("mid_commit", None)
    assert faults.parse("before_run:-1") == ("before_run", -1)
    for bad in ("after_stag:3", "after_stage:x", "after_stage:", "", "3:after_stage"):
        with pytest.raises(InvalidArgumentError, match="LOCKGATE_FAULT"):
            faults.parse(bad)


def test_maybe_crash_does_nothing_unless_the_point_and_window_match(monkeypatch):
    monkeypatch.delenv("LOCKGATE_FAULT", raising=False)
    faults.maybe_crash("after_stage", 3)
    monkeypatch.setenv("LOCKGATE_FAULT", "after_stage:4")
    faults.maybe_crash("after_stage", 3)
    faults.maybe_crash("before_stage", 4)
    monkeypatch.setenv("LOCKGATE_FAULT", "after_stag:3")  # a typo is an error, not a fault never hit
    with pytest.raises(InvalidArgumentError, match="before_run, before_stage, after_stage"):
        faults.maybe_crash("after_stage", 3)


def _run(fault: str | None, new_session: bool) -> tuple[int, int, str]:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_FAULT"}
    if fault:
        env["LOCKGATE_FAULT"] = fault
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60,
        start_new_session=new_session,
    )
    lines = proc.stdout.split()
    return proc.returncode, int(lines[0]), " ".join(lines[1:])


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_fault_kills_the_whole_process_group_with_sigkill():
    rc, helper, rest = _run("after_stage:2", new_session=True)
    assert rc == -signal.SIGKILL and rest == ""
    assert _gone(helper), "the helper in the killed process group survived"


def test_a_process_that_does_not_lead_its_group_kills_only_itself():
    rc, helper, rest = _run("before_run", new_session=False)  # no window: the first one dies
    assert rc == -signal.SIGKILL and rest == ""
    try:
        assert not _gone(helper, timeout=0.5), "the test's own process group must not be killed"
    finally:
        os.kill(helper, signal.SIGKILL)


def test_no_fault_no_crash():
    rc, _helper, rest = _run(None, new_session=True)
    assert rc == 0 and rest == "survived"
