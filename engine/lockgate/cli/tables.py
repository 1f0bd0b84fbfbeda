"""The CLI's tables (``jobs``, ``checkpoints``, ``state``), drawn by ``rich``.

On a terminal a table fits its width: a column too wide for it wraps inside its cells, and
nothing is cut off. Anywhere else (a pipe, a file, a log) it is as wide as its content, in
plain text: columns two spaces apart, no trailing blanks, no escape codes::

    WINDOW    START                      ROWS IN
    88361280  2026-01-01T00:00:00+00:00  36800

A table that fits the terminal reads the same on it as in a pipe. Text for no terminal is
written without rich: rich lays out a table at about half a millisecond a row, and ``lockgate
state --limit 0 | ...`` may print many thousands.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from typing import Any, TextIO


def terminal_width(stream: TextIO) -> int | None:
    """The width of the terminal ``stream`` writes to; None when it is not a terminal."""
    try:
        if not stream.isatty():
            return None
    except ValueError:  # a closed stream
        return None
    return shutil.get_terminal_size().columns


def render_table(rows: Sequence[Sequence[Any]], header: Sequence[str], width: int | None = None) -> str:
    """``rows`` under ``header`` as plain text, at most ``width`` columns wide (None: as wide as
    the content). A cell is shown as ``str(value)`` (``None`` empty), never read as markup."""
    cells = [list(header)] + [["" if c is None else str(c) for c in row] for row in rows]
    if width is None:
        return _plain(cells)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1), header_style="",
                  highlight=False)
    for name in header:
        table.add_column(name, overflow="fold")
    for row in cells[1:]:
        table.add_row(*(Text(c) for c in row))
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False,
                      markup=False, emoji=False, soft_wrap=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def _plain(cells: list[list[str]]) -> str:
    """The header and rows in ``cells`` as rich lays them out with room to spare: each column as
    wide as its widest cell, two spaces between columns, no trailing blanks."""
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


__all__ = ["render_table", "terminal_width"]
