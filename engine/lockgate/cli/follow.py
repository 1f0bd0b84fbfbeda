"""Following a job on a controller, and following it again when the controller goes away.

A controller that dies (kill -9, a crash, a restart) does not lose the runs it had begun:
the job stays under way in the catalog and the next controller started over the same
catalog resumes it from its last complete window. So the CLI, when the controller stops
answering in the middle of a run it follows, says so in one line, waits for a controller
to answer again (up to ``--reattach-timeout`` seconds), then follows the job again until
it rests (FINISHED, STOPPED or FAILED) and prints the run's usual summary. When the wait
expires it exits with one line saying the job is not lost and how to follow it later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..client.base import Client, JobEvent, JobInfo, RunResult
from ..errors import LockgateError
from ..server.errors import ControllerUnavailableError
from ..states import is_terminal

#: seconds between two tries to reach a controller that went away
POLL_S = 1.0
#: each Watch call lasts at most this long; the job's state is read between two calls
WATCH_CHUNK_S = 15.0


class ReattachTimeoutError(ControllerUnavailableError):
    """No controller answered within ``--reattach-timeout``; the job is not lost."""


class JobFailedError(LockgateError):
    """The job followed again after a controller came back ended FAILED."""


@dataclass
class Target:
    """What is followed: the job, and the run's range as far as it is known."""

    job: str
    first: int | None = None  # the run's first window, when known
    last: int | None = None  # its last window, when known (else: where the job ends)
    last_before: int | None = None  # the job's last complete window when the run began
    known_before: bool = False  # last_before was read when the run began (None: no window yet)


@dataclass
class Tally:
    """The job's events as they arrive (passed on to ``forward``): each committed window's
    rows in, rows out and late rows, for a summary whose checkpoints may have expired."""

    forward: Callable[[JobEvent], None] | None = None
    windows: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def __call__(self, e: JobEvent) -> None:
        if e.kind == "cycle_done" and e.window is not None:
            self.windows[e.window] = (e.rows_in, e.rows_out, e.late_rows)
        if self.forward is not None:
            self.forward(e)


class Follower:
    """Follows ``target`` on the controller at ``url``; ``connect()`` opens a new client.

    ``note`` prints one line to the user (over the progress bar); ``timeout`` is how long
    a controller may stay unreachable before :class:`ReattachTimeoutError`; ``client``, when
    given, is used first (and left open); ``t0`` is when the run began (time.monotonic()).
    """

    def __init__(self, url: str, connect: Callable[[], Client], timeout: float, tally: Tally,
                 note: Callable[[str], None], client: Client | None = None, t0: float | None = None):
        self.url = url
        self.connect = connect
        self.timeout = timeout
        self.tally = tally
        self.note = note
        self.t0 = time.monotonic() if t0 is None else t0
        self.client = client
        self._given = client  # the caller's client: the caller closes it

    # -- waiting for a controller --------------------------------------------------------
    def _reach(self, target: Target, cause: str) -> JobInfo:
        """Wait (one line said) until a controller answers for the job; returns the job."""
        self._drop_client()
        self.note(
            f"controller at {self.url} unreachable ({cause}); job '{target.job}' continues when a controller is "
            f"back over the same catalog; waiting up to {self.timeout:g} s (--reattach-timeout) ..."
        )
        deadline = time.monotonic() + self.timeout
        while True:
            client = self.connect()
            try:
                info = client.get_job(target.job)
            except ControllerUnavailableError:
                client.close()
                if time.monotonic() >= deadline:
                    raise ReattachTimeoutError(self._gone_message(target)) from None
                time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
                continue
            except BaseException:
                client.close()
                raise
            self.client = client
            self.note(f"controller at {self.url} is back: following job '{target.job}' "
                      f"(state {info.state}, last complete window {_w(info.last_window)})")
            return info

    def _gone_message(self, target: Target) -> str:
        return (
            f"no controller answered at {self.url} for {self.timeout:g} s. Job '{target.job}' is not lost: it "
            "goes on from its last complete window once a controller runs again over the same catalog. Follow "
            f"it then with: lockgate --controller {self.url} follow {target.job}"
        )

    def _drop_client(self) -> None:
        if self.client is not None and self.client is not self._given:
            self.client.close()
        self.client = None

    # -- following ------------------------------------------------------------------------
    def follow(self, target: Target, cause: str | None = None) -> JobInfo:
        """Follow ``target`` until the job rests (FINISHED or STOPPED; FAILED raises
        :class:`JobFailedError`), waiting for a controller whenever none answers. ``cause``:
        why the controller is unreachable right now (None: use the current connection)."""
        info: JobInfo | None = None
        while True:
            try:
                if cause is not None:
                    info = self._reach(target, cause)
                    cause = None
                if self.client is None:
                    self.client = self.connect()
                return self._until_rest(target, info)
            except ReattachTimeoutError:
                raise
            except ControllerUnavailableError as err:
                cause, info = cause_of(err), None

    def _until_rest(self, target: Target, info: JobInfo | None) -> JobInfo:
        client = self.client
        assert client is not None
        if info is None:
            info = client.get_job(target.job)
        while not is_terminal(info.state):
            for event in client.watch(target.job, timeout=WATCH_CHUNK_S):
                self.tally(event)
            info = client.get_job(target.job)
        if info.state == "FAILED":
            raise JobFailedError(
                f"job '{target.job}' FAILED after window {_w(info.last_window)}: "
                f"{info.last_error or 'no error recorded'}"
            )
        return info

    def summary(self, target: Target, info: JobInfo) -> RunResult:
        """The run's summary once the job rests: the windows of the range it committed, their
        rows from the events seen and, for windows committed while no controller was
        followed, from their checkpoints. Late rows are known only from events; a window
        seen by neither (its checkpoint expired, ``--keep-checkpoints``) is noted and not
        counted."""
        assert self.client is not None
        before = target.last_before if target.known_before else None
        last = target.last if target.last is not None else info.last_window
        cps = {c.window: c for c in self.client.list_checkpoints(target.job)}
        first = target.first if target.first is not None else (before + 1 if before is not None else None)
        if first is None:  # a new job whose run began before the controller said its range
            first = min([*cps, *self.tally.windows], default=last)
        done = info.last_window
        ran: list[int] = []
        if first is not None and last is not None and done is not None:
            start = first if before is None else max(first, before + 1)
            ran = list(range(start, min(last, done) + 1))
        skipped = 0
        if before is not None and first is not None and last is not None:
            skipped = max(0, min(last, before) - first + 1)
        rows_in = rows_out = late = 0
        unseen = 0
        for w in ran:
            if w in self.tally.windows:
                r_in, r_out, r_late = self.tally.windows[w]
            elif w in cps:
                r_in, r_out, r_late = cps[w].rows_in, cps[w].rows_out, 0
            else:
                unseen += 1
                continue
            rows_in, rows_out, late = rows_in + r_in, rows_out + r_out, late + r_late
        if unseen:
            self.note(f"rows of {unseen} window(s) committed while no controller was followed are not counted "
                      "(their checkpoints have expired)")
        return RunResult(
            job=target.job,
            first_window=first,
            last_window=last,
            windows_run=len(ran),
            windows_skipped=skipped,
            rows_in=rows_in,
            rows_out=rows_out,
            late_rows=late,
            elapsed_s=round(time.monotonic() - self.t0, 3),
            state=str(info.state),
        )

    def close(self) -> None:
        self._drop_client()


def cause_of(err: BaseException) -> str:
    """What gRPC said when the controller could not be reached (else the error's text)."""
    return str(getattr(err, "details", None) or err)


def _w(window: int | None) -> str:
    return "none yet" if window is None else str(window)


def detach_target(err: Any, first: int | None, last: int | None) -> Target:
    """The target of a run that a :class:`~lockgate.server.client.RunDetachedError` interrupted."""
    return Target(job=err.job, first=first if first is not None else err.first, last=last,
                  last_before=err.last_before, known_before=True)


__all__ = ["Follower", "JobFailedError", "ReattachTimeoutError", "Tally", "Target", "cause_of", "detach_target"]
