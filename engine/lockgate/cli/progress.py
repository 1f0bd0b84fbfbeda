"""Progress of a run on the terminal: windows done / left, rows per second and the time left.

On a terminal, a live bar drawn by ``rich`` (redrawn in place, the lines the run prints appear
above it). Anywhere else (a pipe, a file, Airflow's task log) one plain line per window, with no
escape codes and no redraws::

    windows 1/6 (5 left)  window 88361280  36,800 rows in  1,172 rows/s

The run's total comes from its ``run_planned`` event (``JobEvent.total_windows``), unless the
command knew it already (``--from-window``/``--to-window``); then the windows of the range
that were complete before the run began count as done (``windows 17/17 (0 left)`` at the end
of a run of 17 windows one of which an earlier run committed).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TextIO

from rich import progress as rp
from rich.console import Console
from rich.text import Text

from ..client.base import JobEvent


class Progress:
    """Receives a job's events; draws a live bar on a terminal, one line per window otherwise.

    :param total: the run's windows, when the command knows them (else the ``run_planned``
        event says).
    :param stream: where to draw (standard error by default).
    :param enabled: ``False`` (``--no-progress``, ``--json``): nothing but :meth:`note` lines.
    :param clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, total: int | None = None, stream: TextIO | None = None, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.clock = clock
        self.done = 0
        #: windows of the command's range complete before the run began (counted as done)
        self.skipped = 0
        self.rows = 0
        self.window: int | None = None
        self.t0 = clock()
        #: the last failed window's line, printed once the run goes on (a controller's restart)
        self.failed: str | None = None
        self._bar: rp.Progress | None = None
        self._task: rp.TaskID | None = None

    def __call__(self, e: JobEvent) -> None:
        if not self.enabled:
            return
        ending = e.kind in ("cycle_failed", "run_failed") or (e.kind == "state" and e.state == "FAILED")
        if self.failed is not None and not ending:  # the run went on (a controller's restart): say what failed
            self._line(self.failed)
            self.failed = None
        if e.kind == "run_planned":
            if self.total is None and e.total_windows is not None:
                self.total = e.total_windows
            elif self.total is not None and e.total_windows is not None:
                self.skipped = max(self.total - e.total_windows, 0)
            if self.tty and self.total:
                self._live()  # the bar from the start: the first window may take a while
        elif e.kind == "cycle_done":
            self.done += 1
            self.rows += e.rows_in
            self.window = e.window
            self._draw()
        elif e.kind == "cycle_failed":
            # held back: a run that ends with this failure prints it once, as its error line
            first = (e.message.strip().splitlines() or [""])[0]
            self.failed = f"window {e.window} failed: {first}"
        elif e.kind == "recovered":
            self._line(f"window {e.window}: {e.message}")

    # -- what is shown ---------------------------------------------------------------------
    def rate(self) -> float:
        """Rows in per second since the run began."""
        return self.rows / max(self.clock() - self.t0, 1e-6)

    def eta(self) -> float | None:
        """Seconds left at the pace of the windows done so far; None while unknown."""
        if not self.total or not self.done:
            return None
        left = max(self.total - self.skipped - self.done, 0)
        return (self.clock() - self.t0) / self.done * left

    def counts(self) -> str:
        """``windows 2/6 (4 left)``, or ``windows 2 done`` while the total is unknown (windows
        complete before the run began count as done)."""
        done = self.done + self.skipped
        if self.total:
            return f"windows {done}/{self.total} ({max(self.total - done, 0)} left)"
        return f"windows {done} done"

    def line(self) -> str:
        """The plain line of the last window done."""
        return f"{self.counts()}  window {self.window}  {self.rows:,} rows in  {self.rate():,.0f} rows/s"

    def _draw(self) -> None:
        if not self.tty:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            return
        self._live()

    def _live(self) -> None:
        """Start the live bar if need be, and bring it up to date."""
        if self._bar is None:
            self._bar = rp.Progress(*_columns(self), console=Console(file=self.stream, highlight=False),
                                    refresh_per_second=4, transient=False)
            self._task = self._bar.add_task("run", total=self.total)
            self._bar.start()
        assert self._task is not None
        self._bar.update(self._task, completed=self.done + self.skipped, total=self.total)

    # -- lines -----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        """One line for the user (``lockgate: text``), even with progress off."""
        self._line(f"lockgate: {text}")

    def _line(self, text: str) -> None:
        if self._bar is not None:  # above the live bar
            self._bar.console.print(Text(text), soft_wrap=True)
            return
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Leave the bar as it last was (a terminal), and stop redrawing it."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class _Text(rp.ProgressColumn):
    """A column of the live bar whose text ``text()`` gives, read at every redraw."""

    def __init__(self, text: Callable[[], str]):
        super().__init__()
        self._text = text

    def render(self, task: rp.Task) -> Text:
        return Text(self._text(), no_wrap=True, overflow="ellipsis")


def _columns(p: Progress) -> list[rp.ProgressColumn]:
    """The live bar, 78 columns for an 8-digit window id (the rows in are in the run's summary)::

        ━━━━━━━━━╸━━━━━━ windows 2/6 (4 left) window 88361281 1,172 rows/s ETA 0:00:41
    """

    def eta() -> str:
        left = p.eta()
        return "ETA " + ("-:--:--" if left is None else str(timedelta(seconds=round(left))))

    return [
        rp.BarColumn(bar_width=16),
        _Text(p.counts),
        _Text(lambda: "" if p.window is None else f"window {p.window}"),
        _Text(lambda: f"{p.rate():,.0f} rows/s"),
        _Text(eta),
    ]


__all__ = ["Progress"]
