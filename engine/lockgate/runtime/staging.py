"""Names of the folders of the sink protocol: staged attempts and committed windows.

- a staged attempt of window ``W`` is ``w=<W:010d>-a<A>``, under the sink's staging root:
  ``<path>/_staging/<job>/`` for a file sink (the commit is then a rename on the same file
  system), ``<home>/staging/<job>/<sink_name>/`` for postgres and collect sinks;
- a committed window of a file or collect sink is the folder ``lg_window=<W>``.

The worker (:mod:`lockgate.runtime.sinks`) writes these folders and the controller
(:mod:`lockgate.runtime.committers`) commits them; both name them here. No Spark import.
"""

from __future__ import annotations

import re
from typing import Any

from ..filesystems import join, location_uri

#: a committed window's folder is ``lg_window=<W>`` (also the window column of collected rows)
WINDOW_DIR = "lg_window"
#: where retracted windows go (one rename) before they are deleted
RETRACTED_DIR = "_retracted"

_WINDOW_RE = re.compile(r"^lg_window=(-?\d+)$")
_STAGED_RE = re.compile(r"^w=(-?\d+)-a(\d+)$")


def staging_dir_name(window: int, attempt: int) -> str:
    """``w=<W:010d>-a<A>``: one staged attempt of one window."""
    return f"w={window:010d}-a{attempt}"


def staged_window(name: str) -> int | None:
    """The window of a staged attempt's folder name, ``None`` for any other name."""
    m = _STAGED_RE.match(name)
    return int(m.group(1)) if m else None


def window_dir_name(window: int) -> str:
    """``lg_window=<W>``: the committed folder of window ``W``."""
    return f"{WINDOW_DIR}={window}"


def committed_window(name: str) -> int | None:
    """The window of a committed folder's name, ``None`` for any other name."""
    m = _WINDOW_RE.match(name)
    return int(m.group(1)) if m else None


def staging_root(sink: dict[str, Any], *, job: str, sink_name: str, home: str) -> str:
    """The folder holding every staged attempt of ``job`` for the sink."""
    if sink["kind"] == "file":
        return join(location_uri(sink["path"]), "_staging", job)
    return join(location_uri(home), "staging", job, sink_name)


def staging_uri(
    sink: dict[str, Any], *, job: str, sink_name: str, window: int, attempt: int, home: str
) -> str:
    """Where window ``window``, attempt ``attempt`` of the sink is staged."""
    return join(staging_root(sink, job=job, sink_name=sink_name, home=home), staging_dir_name(window, attempt))
