"""Which plans a catch-up group computes in one pass (no Spark: the controller asks too).

A plan qualifies when every operator is *window-exact*: its output for a cycle window depends
only on which window each record arrived in and on the clock's watermarks, never on what
happened at the boundaries between rounds. Stateless ``select``, ``with_column``, ``filter``
and ``union`` are; so are tumbling and sliding windowed aggregates and tumbling windowed
joins (inner or outer), whose results the watermark closes at a cycle the clock alone names. The one-pass computation itself is
:mod:`lockgate.runtime.catchup`.
"""

from __future__ import annotations

from .logical import PipelineGraph

#: operators a one-pass group carries as they are
STATELESS = ("select", "with_column", "filter", "union", "sink")
#: windowed aggregates a one-pass group computes for the whole group at once
WINDOWS = ("tumbling", "sliding")


def one_pass(graph: PipelineGraph) -> bool:
    """Whether a catch-up group of ``graph`` can be computed in one pass."""
    if not isinstance(graph.watermark["late"], str):
        return False  # a late-record side sink: window by window
    for v in graph.vertices.values():
        if v.op == "source":
            src = v.config["source"]
            if src.get("kind") == "nexmark" and src.get("out_of_order", 0) > 0 and not src.get("arrival"):
                # its records are sliced by a nominal arrival time that is no column of theirs,
                # so one read of the whole group could not say which window each arrived in
                return False
            if src.get("kind") == "nats":
                # a message log's windows are sequence ranges, each starting after the one before:
                # read window by window, never tagged by a time column
                return False
            continue
        if v.op in STATELESS:
            continue
        if v.op == "window_aggregate" and v.config["window"]["type"] in WINDOWS:
            continue
        if v.op == "join" and "window" in v.config:
            continue  # a windowed join: every record of a window is joined when the window closes
        return False
    return True
