"""The CLI's tables: plain and as wide as their content for no terminal (the format scripts
read), fitted to the terminal's width on one."""

from __future__ import annotations

import io

from lockgate.cli.tables import render_table, terminal_width

HEADER = ["WINDOW", "START", "END", "ROWS IN", "ROWS OUT", "PLAN", "CREATED"]
ROWS = [[88361280 + i, "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:20+00:00", 36_800, 1_172,
         "0123456789abcdef", "2026-05-01 10:00:00"] for i in range(3)]


def test_plain_table_is_as_wide_as_its_content() -> None:
    text = render_table([["a", None, 3], ["[bold]b[/]", "yy", 44]], ["X", "Y", "Z"])
    assert text.splitlines() == [
        "X           Y   Z",
        "a               3",
        "[bold]b[/]  yy  44",  # a cell is text, never markup
    ]
    assert render_table([], ["AUCTION", "WINDOW_START", "N"]) == "AUCTION  WINDOW_START  N"


def test_a_table_wider_than_the_terminal_is_fitted() -> None:
    plain = render_table(ROWS, HEADER)
    assert max(len(line) for line in plain.splitlines()) > 60
    fitted = render_table(ROWS, HEADER, width=60)
    lines = fitted.splitlines()
    assert lines and all(len(line) <= 60 for line in lines), fitted
    assert "\x1b" not in fitted
    # nothing is cut off: every character of every cell is there, wrapped inside its column
    assert sorted("".join(fitted.split())) == sorted("".join(plain.split()))


def test_a_table_that_fits_reads_the_same_on_a_terminal_as_in_a_pipe() -> None:
    assert render_table(ROWS, HEADER, width=200) == render_table(ROWS, HEADER)


def test_terminal_width_is_none_for_a_pipe() -> None:
    assert terminal_width(io.StringIO()) is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert terminal_width(Terminal()) > 0
