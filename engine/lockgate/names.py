"""What a name or a label may hold: the checks every place that takes one shares.

A job, sink, operator or state table name becomes a folder name, a log field and a label
in the catalog, so every character of it must be visible: Unicode's control characters
(category ``Cc``: the C0 and C1 controls, NUL, newlines, ``U+0085``, ``U+009B``) and format
characters (``Cf``: zero-width joiners, bidi overrides such as ``U+202E``) are refused, as
are line and paragraph separators (``Zl``, ``Zp``).

>>> hidden_character("nel\\x85job")
'U+0085'
>>> hidden_character("bids_per_auction") is None
True
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from .errors import InvalidArgumentError

_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})

MAX_LABELS = 20
"""A job carries at most this many labels."""
MAX_LABEL_KEY = 200
MAX_LABEL_VALUE = 1000


def hidden_character(value: str) -> str | None:
    """The first control, format or separator character of ``value`` (``U+XXXX``), else None."""
    for c in value:
        if unicodedata.category(c) in _HIDDEN:
            return f"U+{ord(c):04X}"
    return None


def check_visible(field: str, value: str) -> str:
    """``value`` unless it holds a control or format character (InvalidArgumentError naming it)."""
    bad = hidden_character(value)
    if bad is not None:
        raise InvalidArgumentError(
            f"{field} {value!r} holds the control or format character {bad}: names and labels may hold "
            "only visible characters (no NUL, newline, C1 control or bidi override); rename it"
        )
    return value


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """A job's labels, checked: at most :data:`MAX_LABELS` string pairs, keys non-empty, every
    character visible (``{}`` for None)."""
    if not labels:
        return {}
    if len(labels) > MAX_LABELS:
        raise InvalidArgumentError(f"a job takes at most {MAX_LABELS} labels, got {len(labels)}")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError(f"label {key!r}: labels map strings to strings, got {type(value).__name__}")
        if not key.strip() or len(key) > MAX_LABEL_KEY:
            raise InvalidArgumentError(f"label key {key!r} must be 1 to {MAX_LABEL_KEY} characters long")
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidArgumentError(f"label {key!r} is {len(value)} characters long, more than {MAX_LABEL_VALUE}")
        out[check_visible("label key", key)] = check_visible(f"label {key!r}", value)
    return out


__all__ = ["MAX_LABELS", "check_labels", "check_visible", "hidden_character"]
