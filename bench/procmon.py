"""Running one benchmark process in its own process group, with the peak memory of its
whole tree (Python driver, Spark JVM, Python workers) and a time limit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass
class Finished:
    returncode: int
    wall_s: float
    peak_rss_mb: float
    launched_at: float
    timed_out: bool
    #: CPU seconds of the whole tree over its life (start-up included), sampled
    cpu_s: float = 0.0


def tree_rss(proc: psutil.Process, cpu: dict[int, float] | None = None) -> int:
    """RSS of ``proc`` and its descendants; records each one's CPU seconds in ``cpu``."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
            if cpu is not None:
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
    return total


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid:
                return True
    return False


def run_tree(cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path, timeout_s: float,
             interval: float = 0.2) -> Finished:
    """Run ``cmd`` in a new session (so a kill -9 of its group takes the JVM too) and
    sample the RSS of its process tree every ``interval`` seconds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        t0 = time.time()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            ps = psutil.Process(proc.pid)
            launched = ps.create_time()
        except psutil.Error:
            ps, launched = None, t0
        peak = 0
        cpu: dict[int, float] = {}
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                if ps is not None:
                    with contextlib.suppress(psutil.Error):
                        peak = max(peak, tree_rss(ps, cpu))
                stop.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        finally:
            stop.set()
            sampler.join()
        # a run that died leaves no orphans (its JVM) behind
        if _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        return Finished(rc, time.time() - t0, peak / 2**20, launched, timed_out, sum(cpu.values()))
