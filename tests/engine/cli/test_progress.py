"""The run's progress: its total from the ``run_planned`` event's ``total_windows`` field (never
from the event's text), plain lines where standard error is no terminal, a live rich bar where
it is one."""

from __future__ import annotations

import io
import re

from lockgate.cli.progress import Progress
from lockgate.client.base import JobEvent


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _done(window: int, rows: int) -> JobEvent:
    return JobEvent("cycle_done", "j", window=window, rows_in=rows)


def test_the_total_comes_from_the_field_not_the_message_text() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(None, stream=out, clock=clock)
    p(JobEvent("run_planned", "j", window=7, total_windows=3, message="the run plans three windows"))
    clock.t += 2
    p(_done(7, 1_000))
    clock.t += 2
    p(_done(8, 3_000))
    p.close()
    assert out.getvalue().splitlines() == [
        "windows 1/3 (2 left)  window 7  1,000 rows in  500 rows/s",
        "windows 2/3 (1 left)  window 8  4,000 rows in  1,000 rows/s",
    ]
    assert p.eta() == 2.0  # 4 s for 2 windows, 1 left


def test_a_message_that_names_a_number_is_not_read_for_the_total() -> None:
    out = io.StringIO()
    p = Progress(None, stream=out, clock=_Clock())
    p(JobEvent("run_planned", "j", window=7, message="5 windows to run"))  # no total_windows
    p(_done(7, 10))
    assert p.total is None and p.eta() is None
    assert out.getvalue().startswith("windows 1 done  window 7  10 rows in")


def test_a_total_the_command_knows_is_kept() -> None:
    p = Progress(4, stream=io.StringIO(), clock=_Clock())
    p(JobEvent("run_planned", "j", window=7, total_windows=2, message="2 windows to run"))
    assert p.total == 4  # --from-window/--to-window: the range asked for


def test_windows_complete_before_the_run_count_as_done() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(17, stream=out, clock=clock)  # --from-window 0 --to-window 16, window 0 committed before
    p(JobEvent("run_planned", "j", window=0, total_windows=16, message="16 windows to run"))
    for w in range(1, 17):
        clock.t += 1
        p(_done(w, 10))
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("windows 2/17 (15 left)")
    assert lines[-1].startswith("windows 17/17 (0 left)")
    assert p.eta() == 0.0


def test_plain_output_has_no_escape_codes_nor_redraws() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(None, stream=out, clock=clock)
    p(JobEvent("run_planned", "j", window=1, total_windows=2, message="2 windows to run"))
    for w in (1, 2):
        clock.t += 1
        p(_done(w, 5))
    p.note("a line for the user")
    p.close()
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert text.splitlines()[-1] == "lockgate: a line for the user"
    assert len(text.splitlines()) == 3


def test_disabled_progress_prints_only_notes() -> None:
    out = io.StringIO()
    p = Progress(None, stream=out, enabled=False)
    p(JobEvent("run_planned", "j", window=1, total_windows=2))
    p(_done(1, 5))
    p.note("said anyway")
    p.close()
    assert out.getvalue() == "lockgate: said anyway\n"


def test_a_terminal_gets_a_live_bar_with_rate_and_eta(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    term, clock = _Terminal(), _Clock()
    p = Progress(None, stream=term, clock=clock)
    p(JobEvent("run_planned", "j", window=1, total_windows=4, message="4 windows to run"))
    clock.t += 10
    p(_done(1, 2_000))
    p.note("controller is back")
    clock.t += 10
    p(_done(2, 2_000))
    p.close()
    text = term.getvalue()
    assert "\x1b" in text  # drawn in place
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")
    assert "windows 2/4 (2 left) window 2 200 rows/s ETA 0:00:20" in shown, shown
    assert "lockgate: controller is back" in shown
    assert all(len(line) <= 80 for line in shown.splitlines()), shown  # one line of a terminal 80 wide
    assert p._bar is None  # stopped: nothing redraws after the run
