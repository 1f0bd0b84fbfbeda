"""Pipeline: the user's DSL starts here (its streams are :mod:`lockgate.api.stream`).

A pipeline is defined in an ordinary Python module and referenced as
``path/to/file.py:attr`` or ``package.module:attr``::

    from datetime import timedelta
    import lockgate as lg

    pipeline = lg.Pipeline("bids_per_auction", cycle_window=timedelta(minutes=1))
    bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=500), name="bids")
    (bids.filter("price > 100")
         .key_by("auction")
         .window(lg.Tumbling(timedelta(seconds=10)))
         .aggregate(bids=lg.count(), top=lg.max("price"), name="per_auction")
         .sink(lg.FileSink("out/per_auction")))

Nothing runs when the module is imported: the calls record operators, and
:func:`lockgate.runtime.compiler.compile_pipeline` turns them into a plan.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..clock import EPOCH, WindowClock
from .graphs import Graph
from .nodes import Input, OpNode, PipelineNodes
from .sources import Source, check_invalid
from .sql import compile_sql
from .stream import Stream, WindowedStream
from .windows import Watermark, _micros


class Pipeline(PipelineNodes):
    """A dataflow pipeline: sources, transforms and sinks, run one cycle window at a time.

    :param name: the pipeline's name; also the default job name.
    :param cycle_window: the slice of input (by event time, or by the sources' arrival
        column) that one cycle round processes and checkpoints.
    :param watermark: allowed lateness and what to do with late records.
    :param parallelism: default number of partitions of keyed operators.
    :param origin: the instant window 0 starts at; window ids are stable across runs.
    :param invalid: what happens to a record that breaks a source's or a graph's contract (a CSV
        or JSON line that does not parse into the declared schema, an edge with a null ``src`` or
        ``dst``, a vertex with a null ``id``): ``"fail"`` (the
        default) fails the window with one line naming the source or operator, the file, the
        column and the count, and commits nothing; ``"skip"`` drops such records and counts them
        (``invalid_rows`` in ``lockgate cycles``, the run's summary and the UI). A source's own
        ``invalid=`` overrides it. Never silent. A record whose event time is null fails its
        window whatever the rule: no cycle window holds it.
    """

    def __init__(
        self,
        name: str,
        cycle_window: timedelta = timedelta(minutes=1),
        watermark: Watermark | None = None,
        parallelism: int = 2,
        origin: datetime = EPOCH,
        invalid: str = "fail",
    ):
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"pipeline name {name!r}: use letters, digits, '_' and '-' only")
        if cycle_window <= timedelta(0):
            raise ValueError(f"pipeline {name!r}: cycle_window must be positive, got {cycle_window}")
        super().__init__(name)
        self.cycle_window = cycle_window
        self.watermark = watermark or Watermark()
        self.parallelism = parallelism
        self.origin = origin if origin.tzinfo else origin.replace(tzinfo=UTC)
        self.invalid = check_invalid(invalid, f"pipeline {name!r}")

    # -- windows ---------------------------------------------------------------------
    @property
    def cycle_micros(self) -> int:
        return _micros(self.cycle_window)

    @property
    def clock(self) -> WindowClock:
        """The pipeline's cycle windows: window ids to instants and back."""
        return WindowClock.of(self.cycle_window, self.origin)

    def window_of(self, t: datetime) -> int:
        """Id of the cycle window holding instant ``t``."""
        return self.clock.window_of(t)

    def window_bounds(self, window: int) -> tuple[datetime, datetime]:
        """``[start, end)`` of cycle window ``window``."""
        return self.clock.bounds(window)

    # -- building --------------------------------------------------------------------
    def source(self, source: Source, name: str | None = None) -> Stream:
        """Add a source and return its stream."""
        node = self._add("source", [], {"source": source.to_config()}, name, parallelism=1)
        return Stream(self, node.id)

    def sql(self, query: str, name: str | None = None) -> Stream:
        """A stream defined in Spark SQL over this pipeline's named streams (a source or an
        operator is the table of its name), compiled to the operators the Python API builds:
        ``WHERE`` a filter, ``GROUP BY window(ts, '10 seconds'), keys`` a windowed aggregate,
        ``session_window`` sessions, ``GROUP BY keys`` alone a running aggregate. A clause that
        cannot run incrementally (``ORDER BY``, ``LIMIT``, ``JOIN``, ``OVER``, a subquery) is a
        :class:`~lockgate.errors.CompileError` naming it. See :mod:`lockgate.api.sql`.

        >>> p.sql("SELECT auction, window.start AS window_start, count(*) AS bids, max(price) AS top "
        ...       "FROM bids GROUP BY auction, window(date_time, '10 seconds')", name="per_auction")
        """
        return compile_sql(self, query, name)

    def graph(self, edges: Stream, vertices: Stream | None = None, name: str | None = None) -> Graph:
        """A graph whose edges arrive on ``edges`` (columns ``src``, ``dst`` and any edge
        attributes) and, optionally, whose vertices arrive on ``vertices`` (``id`` and any vertex
        attributes; without it the vertices are the edges' endpoints). Each cycle window adds its
        records to the graph; :meth:`Graph.compute` and :meth:`Graph.traverse` run over it. See
        :mod:`lockgate.api.graphs`.

        >>> g = p.graph(links.select("src", "dst"), name="web")
        >>> g.compute(lockgate.graph.library.PageRank(), name="ranks").sink(lg.FileSink("out/ranks"))
        """
        return Graph(self, edges, vertices, name)

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, operators={list(self.nodes)})"


__all__ = ["Input", "OpNode", "Pipeline", "Stream", "WindowedStream"]
