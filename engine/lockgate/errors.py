"""The errors Lockgate raises. Each names the problem and the fix.

Every error a user can hit derives from :class:`LockgateError`, so callers (the CLI, the
gRPC server, the Airflow provider) can turn it into a clean message or status code
without a traceback. ``code`` is a short stable identifier that the gRPC layer maps to a
status code.
"""

from __future__ import annotations


class LockgateError(Exception):
    """Base class of every error a Lockgate user can act on."""

    code = "LOCKGATE_ERROR"


class CompileError(LockgateError):
    """A pipeline that cannot be compiled to a plan (raised at compile time).

    ``operator`` names the offending operator when there is one.
    """

    code = "INVALID_PLAN"

    def __init__(self, message: str, operator: str | None = None):
        self.operator = operator
        prefix = f"operator '{operator}': " if operator else ""
        super().__init__(prefix + message)


class PipelineLoadError(LockgateError):
    """A pipeline reference (``file.py:attr`` or ``module:attr``) that cannot be loaded."""

    code = "INVALID_ARGUMENT"


class PipelineRefusedError(PipelineLoadError):
    """A pipeline reference from outside the folders and module prefixes the controller
    accepts (``lockgate server --pipelines DIR --pipeline-modules PREFIX``); refused before
    anything is imported."""

    code = "PERMISSION_DENIED"


class ControllerUnavailableError(LockgateError):
    """The controller cannot be reached (not running, wrong address, TLS mismatch)."""

    code = "UNAVAILABLE"


class JavaNotFoundError(LockgateError):
    """Java 17 or newer is needed by Spark and was not found."""

    code = "FAILED_PRECONDITION"


class SparkStartError(LockgateError):
    """The Spark driver JVM exited before it started; the message carries its last lines."""

    code = "UNAVAILABLE"


class JobNotFoundError(LockgateError):
    code = "NOT_FOUND"


class CheckpointNotFoundError(LockgateError):
    code = "NOT_FOUND"


class WindowGapError(LockgateError):
    """Windows were requested while an earlier window of the job is not complete."""

    code = "FAILED_PRECONDITION"

    def __init__(self, job: str, missing_from: int, missing_to: int, requested: int, hint: str = ""):
        self.job = job
        self.missing = (missing_from, missing_to)
        self.requested = requested
        missing = (
            f"window {missing_from}" if missing_from == missing_to else f"windows {missing_from}..{missing_to}"
        )
        super().__init__(
            f"job '{job}': cannot run window {requested}: {missing} not complete yet. Windows run "
            f"strictly in order; run the earlier windows first"
            + (f" ({hint})" if hint else "")
            + "."
        )


class StateLayoutError(LockgateError):
    """The job's checkpointed state does not fit the new plan's stateful operators."""

    code = "FAILED_PRECONDITION"


class SnapshotError(LockgateError):
    """A state snapshot is missing or corrupt."""

    code = "DATA_LOSS"


class JobStateError(LockgateError):
    """An action that the job's current state does not allow (e.g. already running)."""

    code = "FAILED_PRECONDITION"


class FencedError(LockgateError):
    """A runner whose generation was superseded tried to commit: it must stop."""

    code = "ABORTED"


class SinkCommitError(LockgateError):
    code = "UNAVAILABLE"


class InvalidArgumentError(LockgateError, ValueError):
    """An argument that Lockgate cannot use (e.g. a negative count or an unknown state)."""

    code = "INVALID_ARGUMENT"


class CatalogError(LockgateError):
    """The catalog database cannot be used (unsupported URL, newer schema, conflicting data)."""

    code = "FAILED_PRECONDITION"


class CatalogUnavailableError(CatalogError):
    """The catalog database cannot be written right now; the message names it and the fix."""


class CatalogReadOnlyError(CatalogUnavailableError):
    """The catalog database (or its folder) is read-only for this process: retrying cannot help."""


class CatalogLockedError(CatalogUnavailableError):
    """Another process held the catalog's write lock longer than the busy timeout: retrying can help."""

    code = "UNAVAILABLE"


class CatalogFullError(CatalogUnavailableError):
    """The disk under the catalog database is full: retrying helps once there is room."""

    code = "UNAVAILABLE"


class PlanNotFoundError(LockgateError):
    """A plan version that the catalog does not hold."""

    code = "NOT_FOUND"


class CycleNotFoundError(LockgateError):
    """A cycle id that the catalog does not hold."""

    code = "NOT_FOUND"


class CycleStateError(LockgateError):
    """A cycle change that the cycle's current state does not allow (e.g. staging a failed cycle)."""

    code = "FAILED_PRECONDITION"


class CheckpointExistsError(LockgateError):
    """A window of the job already has a complete checkpoint."""

    code = "ALREADY_EXISTS"


class SinkNotFoundError(LockgateError):
    """A sink's committed output was asked for, but the sink never committed a window."""

    code = "NOT_FOUND"


class StateNotFoundError(LockgateError):
    """A job's keyed state was asked for an operator (or state table) that holds none."""

    code = "NOT_FOUND"


class SinkUnavailableError(SinkCommitError):
    """A sink's database cannot be reached or cannot take the window right now (down,
    restarting, connection lost, out of disk): the window is not checkpointed, and retrying
    once the database is back commits it exactly once."""

    code = "UNAVAILABLE"


class SinkRefusedError(SinkCommitError):
    """A sink's database refuses the window for a reason retrying cannot fix (wrong
    credentials, no such database, no permission, rows that do not fit the table)."""

    code = "FAILED_PRECONDITION"


class StorageFullError(LockgateError):
    """A disk Lockgate writes to (staged sink output, a file sink's folder, state snapshots)
    is full: retrying helps once there is room. ``folder`` names it when it is known."""

    code = "UNAVAILABLE"
    folder: str | None = None

    def __init__(self, message: str, folder: str | None = None):
        super().__init__(message)
        self.folder = folder


class StorageAccessError(LockgateError):
    """A folder Lockgate writes to refuses this process (permission denied, a read-only
    file system): retrying cannot help until it is fixed. ``folder`` names it."""

    code = "FAILED_PRECONDITION"
    folder: str | None = None

    def __init__(self, message: str, folder: str | None = None):
        super().__init__(message)
        self.folder = folder


class SourceUnavailableError(LockgateError):
    """A source's database cannot be reached right now (down, restarting, connection lost):
    nothing of the window was read or committed; retrying once it is back reads it exactly once."""

    code = "UNAVAILABLE"


class SourceRefusedError(LockgateError):
    """A source's database refuses the read for a reason retrying cannot fix (wrong
    credentials, no such database or table, no permission)."""

    code = "FAILED_PRECONDITION"


class InvalidRecordsError(LockgateError):
    """Records that break a source's or a graph's contract (a line that does not parse into the
    declared schema, a record with no event time, a null vertex id) under ``invalid="fail"``:
    the window fails and nothing of it is committed. ``source``, ``file``, ``column`` and
    ``count`` say where (None where unknown)."""

    code = "FAILED_PRECONDITION"

    def __init__(self, message: str, source: str | None = None, file: str | None = None,
                 column: str | None = None, count: int = 0):
        super().__init__(message)
        self.source, self.file, self.column, self.count = source, file, column, count


#: the line between a failure's one-line message and the full text Spark gave (JVM stack
#: traces, the Python worker's traceback) where both are stored together (a cycle's error)
DETAIL_MARKER = "--- as Spark reported it ---"


class SparkFailureError(LockgateError):
    """A round that Spark failed for a reason in the job's data or code, as one line naming the
    window, the operator or source (``operator``), what went wrong and the fix. ``detail`` keeps
    the full text Spark gave (the JVM's stack trace, the Python worker's traceback): ``lockgate
    -v`` prints it and the catalog stores it with the failed cycle. Nothing of the window is
    committed; once fixed, the next run runs it again."""

    code = "FAILED_PRECONDITION"
    window: int | None = None
    operator: str | None = None
    detail: str | None = None

    def __init__(self, message: str, *, window: int | None = None, operator: str | None = None,
                 detail: str | None = None):
        super().__init__(message)
        self.window, self.operator, self.detail = window, operator, detail


class SourceSchemaError(SparkFailureError):
    """A source's file holds a column of another type than the source's schema declares (a
    Parquet ``src`` of strings where the schema says BIGINT): ``file``, ``column``,
    ``expected`` and ``found`` say which (None where Spark did not say)."""

    file: str | None = None
    column: str | None = None
    expected: str | None = None
    found: str | None = None


class ExpressionError(SparkFailureError):
    """An operator's expression that fails on a value under ANSI SQL (a CAST of a string that
    is no number, an overflow, a division by zero): ``expression``, ``value``, ``expected``
    (the type cast to) say which (None where Spark did not say)."""

    expression: str | None = None
    value: str | None = None
    expected: str | None = None


class UserFunctionError(SparkFailureError):
    """A pipeline's own function (``map_batches``) raised: ``error_type`` and ``error_message``
    are its exception's; ``detail`` ends with its Python traceback. A controller retries the
    round (with its restart backoff) unless the exception was a ValueError, TypeError or
    ArithmeticError, which fail the same way every time (code ``FAILED_PRECONDITION``)."""

    code = "ABORTED"
    error_type: str | None = None
    error_message: str | None = None


class SparkMemoryError(SparkFailureError):
    """Spark ran out of memory in a round: ``where`` is ``"jvm"`` (java.lang.OutOfMemoryError, in
    the driver or an executor) or ``"python"`` (a MemoryError in a Python worker or the driver's
    Python). The message names the Spark settings to raise and the smaller cycle window."""

    code = "RESOURCE_EXHAUSTED"
    where: str | None = None
