"""Progress of a run on the terminal: windows done / left and rows per second."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ..client.base import JobEvent


class Progress:
    """Receives a job's events; draws a bar on a terminal, one line per window otherwise."""

    def __init__(self, total: int | None = None, stream: TextIO | None = None, enabled: bool = True):
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.done = 0
        self.rows = 0
        self.t0 = time.monotonic()
        #: the last failed window's line, printed once the run goes on (a controller's restart)
        self.failed: str | None = None

    def __call__(self, e: JobEvent) -> None:
        if not self.enabled:
            return
        ending = e.kind in ("cycle_failed", "run_failed") or (e.kind == "state" and e.state == "FAILED")
        if self.failed is not None and not ending:  # the run went on (a controller's restart): say what failed
            self._line(self.failed)
            self.failed = None
        if e.kind == "run_planned" and self.total is None:
            self.total = int(e.message.split()[0])
        elif e.kind == "cycle_done":
            self.done += 1
            self.rows += e.rows_in
            self._draw(e)
        elif e.kind == "cycle_failed":
            # held back: a run that ends with this failure prints it once, as its error line
            first = (e.message.strip().splitlines() or [""])[0]
            self.failed = f"window {e.window} failed: {first}"
        elif e.kind == "recovered":
            self._line(f"window {e.window}: {e.message}")

    def _draw(self, e: JobEvent) -> None:
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        rate = self.rows / elapsed
        if self.total:
            left = max(self.total - self.done, 0)
            width = 24
            filled = int(width * min(self.done / self.total, 1))
            bar = "#" * filled + "-" * (width - filled)
            text = (
                f"[{bar}] windows {self.done}/{self.total} ({left} left)  window {e.window}  "
                f"{self.rows:,} rows in  {rate:,.0f} rows/s"
            )
        else:
            text = f"windows {self.done} done  window {e.window}  {self.rows:,} rows in  {rate:,.0f} rows/s"
        if self.tty:
            self.stream.write("\r" + text.ljust(100))
            self.stream.flush()
        else:
            self.stream.write(text + "\n")

    def note(self, text: str) -> None:
        """One line for the user (``lockgate: text``), even with progress off."""
        if self.tty and self.done:
            self.stream.write("\n")
        self.stream.write(f"lockgate: {text}\n")
        self.stream.flush()

    def _line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\n")
        self.stream.write(text + "\n")

    def close(self) -> None:
        if self.enabled and self.tty and self.done:
            self.stream.write("\n")
            self.stream.flush()
