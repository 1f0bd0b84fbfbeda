"""The vertex-centric program API, modelled on GeaFlow's ``VertexCentricCompute``.

A :class:`VertexProgram` says what each vertex does, with GeaFlow's lifecycle names:

- ``init(ctx)``: the initial value of a vertex (superstep 0);
- ``evolve(ctx)``: optional, the first step of a dynamic window, over the window's new edges
  (see :class:`~lockgate.graph.superstep.SuperstepDriver` ``run(previous=..., new_edges=...)``);
- ``compute(ctx)``: one superstep of a vertex: from its value and its combined incoming messages,
  its new value and the messages it sends along its out-edges and in-edges (a :class:`Step`);
- ``finish(state)``: the results, from the final state.

Every function receives Spark :class:`~pyspark.sql.Column` expressions and returns Column
expressions: the driver evaluates them for all vertices at once, a superstep at a time, as
DataFrame projections, joins and aggregates (never a Python function per vertex). The messages a
vertex sends are joined with the edges, combined per receiving vertex by the program's
:class:`Combiner` (a Spark aggregate) and delivered in the next superstep.

Example, the minimum label of each weakly connected component::

    from pyspark.sql import functions as F

    from lockgate.graph import MIN, Halt, Step, VertexProgram

    class MinLabel(VertexProgram):
        combiner = MIN
        halt_when = Halt.NO_MESSAGES

        def init(self, ctx):
            return ctx.id

        def compute(self, ctx):
            if ctx.superstep == 1:  # every vertex tells its neighbours its label
                return Step(ctx.value, send_out=ctx.value, send_in=ctx.value)
            smaller = ctx.messages < ctx.value
            value = F.when(smaller, ctx.messages).otherwise(ctx.value)
            sent = F.when(smaller, value)  # null: this vertex sends nothing
            return Step(value, send_out=sent, send_in=sent)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql import Column
from pyspark.sql import functions as F

from lockgate.graph.errors import ProgramReturnError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

    from lockgate.graph.stats import SuperstepStats


class Halt(enum.Enum):
    """When a computation stops by itself (besides ``max_supersteps`` and ``converged``).

    >>> Halt.NO_MESSAGES.value
    'no_messages'
    """

    #: after a superstep that sent no message
    NO_MESSAGES = "no_messages"
    #: after a superstep that changed no vertex value, from superstep 2 on (in superstep 1 the
    #: vertices typically only announce their initial values)
    NO_CHANGE = "no_change"


@dataclass(frozen=True)
class Combiner:
    """How the messages sent to one vertex in a superstep are combined into one: a Spark aggregate.

    ``aggregate`` maps the message column to an aggregate Column (``F.sum``, ``F.min``...). The
    built-in :data:`SUM`, :data:`MIN` and :data:`MAX` cast their result back to the message type
    (Spark sums an ``int`` to a ``bigint``); a custom combiner must keep the message type itself.

    >>> from pyspark.sql import functions as F
    >>> MODE = Combiner("mode", lambda m: F.mode(m, deterministic=True))  # most frequent, then lowest
    >>> MODE.name
    'mode'
    """

    name: str
    aggregate: Callable[[Column], Column]
    #: cast the aggregate to the message type (the built-in combiners do)
    cast: bool = False


#: the sum of the messages
SUM = Combiner("sum", F.sum, cast=True)
#: the smallest message
MIN = Combiner("min", F.min, cast=True)
#: the largest message
MAX = Combiner("max", F.max, cast=True)


@dataclass(frozen=True)
class Step:
    """What ``compute`` (or ``evolve``) returns for the vertices: their new value and their messages.

    ``send_out`` is the message a vertex sends along each of its out-edges (to the edge's ``dst``),
    ``send_in`` along each of its in-edges (to the edge's ``src``); where the expression is null
    (or the argument is ``None``) the vertex sends nothing that way. Both are per vertex; a message
    that depends on the edge (a weight) is made in :meth:`VertexProgram.along_edge`.

    >>> from pyspark.sql import functions as F
    >>> step = Step(F.col("v"), send_out=F.col("v") + 1)
    >>> step.send_in is None
    True
    """

    value: Column
    send_out: Column | None = None
    send_in: Column | None = None


@dataclass(frozen=True)
class VertexContext:
    """The vertices as ``init``, ``evolve`` and ``compute`` see them: Column expressions over the state.

    ``value`` is the vertex value before this superstep (null in ``init``), ``messages`` the combined
    messages the vertex received (null where none), ``message_count`` how many were combined.
    ``superstep`` and ``num_vertices`` are Python ints (``init`` runs at superstep 0, the first
    ``compute`` or ``evolve`` at superstep 1); :meth:`aggregate` gives the program's aggregates
    (:meth:`VertexProgram.aggregates`) over the previous superstep's state, as Python values.
    ``touched`` and ``is_new`` are set in ``evolve`` only: the vertex is an endpoint of a new edge
    of the window, the vertex has no previous value.

    >>> # in compute: ctx.value + F.coalesce(ctx.messages, F.lit(0.0))
    """

    id: Column
    value: Column
    messages: Column
    message_count: Column
    out_degree: Column
    in_degree: Column
    superstep: int
    num_vertices: int
    aggregates: Mapping[str, Any] = field(default_factory=dict)
    touched: Column | None = None
    is_new: Column | None = None

    def attr(self, name: str) -> Column:
        """A column of the input vertices DataFrame (its attributes), e.g. ``ctx.attr("weight")``."""
        return F.col(f"`{name}`")

    def aggregate(self, name: str) -> Any:
        """The value of aggregate ``name`` over the previous superstep's state (a Python value)."""
        try:
            return self.aggregates[name]
        except KeyError:
            raise KeyError(
                f"no aggregate {name!r} at superstep {self.superstep} (there are {sorted(self.aggregates)}): "
                "declare it in the program's aggregates()"
            ) from None


@dataclass(frozen=True)
class EdgeContext:
    """One edge a message travels along, for :meth:`VertexProgram.along_edge`.

    ``src`` and ``dst`` are the edge's endpoints (Columns), ``attr(name)`` any column of the edge
    stream; ``direction`` is ``"out"`` for ``send_out`` messages (from ``src`` to ``dst``) and ``"in"``
    for ``send_in`` messages (from ``dst`` to ``src``).

    >>> # along_edge: message + edge.attr("weight")
    """

    src: Column
    dst: Column
    direction: str

    def attr(self, name: str) -> Column:
        """A column of the input edges DataFrame, e.g. ``edge.attr("weight")``."""
        return F.col(f"`{name}`")


@dataclass(frozen=True)
class AggregateContext:
    """The state after a superstep, for :meth:`VertexProgram.aggregates`: the new ``value``, the
    ``previous`` one (equal to ``value`` at superstep 0), degrees and vertex attributes.

    >>> # aggregates: {"delta": F.sum(F.abs(ctx.value - ctx.previous))}
    """

    id: Column
    value: Column
    previous: Column
    out_degree: Column
    in_degree: Column
    superstep: int
    num_vertices: int

    def attr(self, name: str) -> Column:
        """A column of the input vertices DataFrame."""
        return F.col(f"`{name}`")


class VertexProgram:
    """A vertex-centric computation: subclass it (a frozen dataclass for parameters) and define
    ``init`` and ``compute``; ``evolve``, ``along_edge``, ``aggregates``, ``converged`` and ``finish``
    are optional.

    Class attributes configure it:

    - ``combiner``: how messages to a vertex are combined (:data:`SUM`, :data:`MIN`, :data:`MAX`
      or a :class:`Combiner`);
    - ``halt_when``: a :class:`Halt` rule or ``None``; ``max_supersteps``: a bound or ``None``
      (a program needs a rule, a bound or a ``converged`` method);
    - ``message_type``: the Spark type of messages (``None``: the type of the vertex value);
    - ``value_type``: the Spark type of vertex values (``None``: the type ``init`` gives);
    - ``compute_all``: run ``compute`` on every vertex every superstep (``True``) or only on those
      that received messages (``False``, Pregel's vote to halt; all vertices run superstep 1).

    >>> from dataclasses import dataclass
    >>> from lockgate.graph import MAX, Step, VertexProgram
    >>> @dataclass(frozen=True)
    ... class Hops(VertexProgram):
    ...     rounds: int = 3
    ...     combiner = MAX
    ...     halt_when = None
    ...     @property
    ...     def max_supersteps(self): return self.rounds
    ...     def init(self, ctx): return ctx.id
    ...     def compute(self, ctx): return Step(ctx.value, send_out=ctx.value)
    >>> Hops().name
    'Hops'
    """

    combiner: ClassVar[Combiner] = SUM
    halt_when: Halt | None = Halt.NO_MESSAGES
    max_supersteps: int | None = None
    message_type: DataType | None = None
    value_type: DataType | None = None
    compute_all: bool = False

    @property
    def name(self) -> str:
        """The program's name in errors and state folders (its class name)."""
        return type(self).__qualname__

    def init(self, ctx: VertexContext) -> Column:
        """The initial value of every vertex (``ctx.value`` and ``ctx.messages`` are null).

        In a dynamic run (``previous=``), vertices that have a previous value keep it and ``init``
        gives the value of the new ones only.
        """
        raise ProgramReturnError(f"{self.name}.init is not defined: define init(ctx) returning the initial "
                                 "vertex value as a Spark Column")

    def evolve(self, ctx: VertexContext) -> Step:
        """The first superstep of a dynamic window: its messages travel along the window's new edges
        only (``ctx.touched`` marks their endpoints), so only the part of the graph they reach
        recomputes. Not overridden: superstep 1 is a plain ``compute`` over all edges, starting from
        the previous values (a warm start), and this default is never called."""
        return self.compute(ctx)

    def compute(self, ctx: VertexContext) -> Step:
        """One superstep: the new value and messages of the vertices (see :class:`Step`)."""
        raise ProgramReturnError(f"{self.name}.compute is not defined: define compute(ctx) returning a Step")

    def along_edge(self, message: Column, edge: EdgeContext) -> Column:
        """The message as it arrives over ``edge`` (default: unchanged); e.g. add the edge weight."""
        return message

    def aggregates(self, ctx: AggregateContext) -> dict[str, Column]:
        """Global aggregates over the state after each superstep (Spark aggregate Columns by name),
        recorded in the superstep's stats and given to the next superstep (``ctx.aggregate``)."""
        return {}

    def converged(self, stats: SuperstepStats) -> bool:
        """A custom halting rule over a superstep's stats (default: never)."""
        return False

    def finish(self, state: DataFrame) -> DataFrame:
        """The results from the final state (columns ``id``, ``value`` and the vertex attributes);
        default: ``id`` and ``value``."""
        return state.select("id", "value")

    # -- for the driver ------------------------------------------------------------------------

    def has_evolve(self) -> bool:
        """True when the program defines its own ``evolve``."""
        return type(self).evolve is not VertexProgram.evolve

    def has_converged(self) -> bool:
        """True when the program defines its own ``converged`` rule."""
        return type(self).converged is not VertexProgram.converged

    def describe(self) -> dict[str, Any]:
        """The program's name and parameters (a dataclass's fields), recorded in the state folder
        so that a resume checks it continues the same computation."""
        params: dict[str, Any] = {}
        if dataclasses.is_dataclass(self):
            for f in dataclasses.fields(self):
                v = getattr(self, f.name)
                params[f.name] = v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)
        return {"program": f"{type(self).__module__}.{type(self).__qualname__}", "params": params}


__all__ = [
    "MAX",
    "MIN",
    "SUM",
    "AggregateContext",
    "Combiner",
    "EdgeContext",
    "Halt",
    "Step",
    "VertexContext",
    "VertexProgram",
]
