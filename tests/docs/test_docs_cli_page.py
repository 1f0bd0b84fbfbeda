"""The CLI page (docs/cli.md) holds each command's ``--help`` word for word, so the page and the
command say the same thing: after changing a help text (or adding an option), rewrite the page's
help blocks with

    .venv/bin/python tests/docs/test_docs_cli_page.py --write

Each block follows a ``<!-- cli-help: COMMAND -->`` marker (``lockgate`` for the top level) and is the
help as printed 100 columns wide."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "cli.md"
COMMANDS = ("lockgate", "compile", "explain", "run", "follow", "jobs", "checkpoints", "cycles", "state",
            "restore", "server")
MARKED = re.compile(r"<!-- cli-help: (?P<command>[\w-]+) -->\n```text\n(?P<help>.*?)\n```", re.DOTALL)


def helps() -> dict[str, str]:
    """Each command's --help, 100 columns wide."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        from lockgate.cli.main import _parser

        parser = _parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out = {"lockgate": parser.format_help()}
        out.update({name: sub.choices[name].format_help() for name in COMMANDS[1:]})
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return {k: v.rstrip("\n") for k, v in out.items()}


def rewritten(text: str) -> str:
    real = helps()
    return MARKED.sub(lambda m: f"<!-- cli-help: {m.group('command')} -->\n```text\n{real[m.group('command')]}\n```", text)


def test_the_cli_page_shows_every_commands_help_as_the_command_prints_it() -> None:
    text = PAGE.read_text()
    shown = {m.group("command"): m.group("help") for m in MARKED.finditer(text)}
    assert sorted(shown) == sorted(COMMANDS), "the page needs one help block per command"
    real = helps()
    stale = [c for c in COMMANDS if shown[c] != real[c]]
    assert not stale, f"docs/cli.md's help of {stale} differs from the command's: run python {Path(__file__).relative_to(REPO)} --write"


def test_run_help_says_what_a_pipeline_and_a_window_are_with_examples() -> None:
    run = " ".join(helps()["run"].split())
    assert "path/to/file.py:attr" in run and "--from-window N first window id" in run and "examples:" in run
    assert "origin + N*cycle_window" in run


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        PAGE.write_text(rewritten(PAGE.read_text()))
        print(f"rewrote the help blocks of {PAGE.relative_to(REPO)}")
