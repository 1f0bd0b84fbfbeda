"""``LOCKGATE_*`` settings of a round, read from the environment when a runner starts: whole
numbers (rows, deltas), on/off switches, and the size test the round's driver and
code-generation paths share."""

from __future__ import annotations

import os

from ..errors import InvalidArgumentError


def count_setting(name: str, default: int, unit: str, zero: str) -> int:
    """The whole number ``name`` holds (``default`` when unset); a negative or non-numeric value
    raises :class:`InvalidArgumentError` naming the setting, its ``unit``, what 0 means and the default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(f"{name}={raw!r}: expected a whole number of {unit} ({zero}; default {default})")
    return value


def switch(name: str) -> bool:
    """An on/off setting, on unless ``name`` holds ``0``, ``false`` or ``off`` (any case)."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "off")


def within(rows: int | None, limit: int) -> bool:
    """True when an expected row count is known and a path of ``limit`` rows (0: off) takes it."""
    return limit > 0 and rows is not None and rows <= limit
