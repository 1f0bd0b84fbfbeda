"""The errors of Lockgate's graph computations. Each names the problem, the function at fault and the fix.

All derive from :class:`GraphError`, itself a :class:`lockgate.errors.LockgateError`, so the CLI
and the gRPC server turn them into clean messages like any other Lockgate error.

>>> from lockgate.errors import LockgateError
>>> issubclass(MessageTypeError, LockgateError)
True
"""

from __future__ import annotations

from lockgate.errors import LockgateError


class GraphError(LockgateError):
    """Base class of the errors a graph computation raises."""

    code = "INVALID_ARGUMENT"


class NoHaltingRuleError(GraphError):
    """A vertex program with no halting rule and no bound on supersteps: it would never end."""


class ProgramReturnError(GraphError):
    """A lifecycle function (``init``, ``evolve``, ``compute``...) returned something of the wrong kind
    (e.g. a number where a :class:`~lockgate.graph.compute.Step` is expected)."""


class MessageTypeError(GraphError):
    """A message whose Spark type is not the program's ``message_type``."""


class VertexValueTypeError(GraphError):
    """A vertex value whose Spark type is not the one ``init`` gave (or ``value_type`` declares)."""


def step_type_error(program: str, fn: str, superstep: int, column: str, found: str, want: str) -> GraphError:
    """The error for a column of a :class:`~lockgate.graph.compute.Step` whose type is not the
    program's: ``value`` (a vertex value that changed type) or ``send_out``/``send_in`` (a
    message). ``found`` and ``want`` are Spark type names (``bigint``).

    >>> str(step_type_error("CC", "compute", 2, "send_out", "string", "bigint")).split(".")[0]
    'CC'
    """
    where = f"{program}.{fn}"
    if column == "value":
        return VertexValueTypeError(
            f"{where} changed the vertex value's type at superstep {superstep}: it returned {found}, but the vertex "
            f"values are {want} (the type {program}.init gave). Fix: keep the value's type in {where}, e.g. "
            f".cast('{want}'), or change what init returns"
        )
    return MessageTypeError(
        f"{where} returned a {column} message of type {found} at superstep {superstep}, but {program}'s messages "
        f"are {want} ({program}.message_type, or the vertex value's type when it is None). Fix: cast the message "
        f"in {where}, e.g. .cast('{want}'), or set {program}.message_type"
    )


class GraphInputError(GraphError):
    """Vertices or edges the computation cannot run on (missing ``id``/``src``/``dst`` columns,
    reserved column names, negative weights for shortest paths...)."""


class GraphStateError(GraphError):
    """A state folder that cannot be started or resumed (already used, empty, another program's)."""

    code = "FAILED_PRECONDITION"


__all__ = [
    "GraphError",
    "GraphInputError",
    "GraphStateError",
    "MessageTypeError",
    "NoHaltingRuleError",
    "ProgramReturnError",
    "VertexValueTypeError",
    "step_type_error",
]
