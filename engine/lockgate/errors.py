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


class JavaNotFoundError(LockgateError):
    """Java 17 or newer is needed by Spark and was not found."""

    code = "FAILED_PRECONDITION"


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
