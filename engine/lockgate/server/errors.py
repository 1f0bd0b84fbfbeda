"""Errors of the control plane, and their mapping to gRPC status codes (both ways).

Each :class:`~lockgate.errors.LockgateError` has a ``code`` (``NOT_FOUND``,
``FAILED_PRECONDITION``, ``INVALID_PLAN``...); the server turns it into a gRPC status with
the error's message as details and the error's class name in the trailing metadata
``lockgate-error``, so :mod:`lockgate.server.client` raises the same class again.
"""

from __future__ import annotations

import grpc

from .. import errors as lg_errors
from ..errors import ControllerUnavailableError, LockgateError

ERROR_CLASS_KEY = "lockgate-error"


class WorkerLostError(LockgateError):
    """The worker running a job died, stopped heartbeating or lost its connection."""

    code = "UNAVAILABLE"


class WorkerStartError(LockgateError):
    """A worker process could not be started or did not connect in time."""

    code = "UNAVAILABLE"


class CycleFailedError(LockgateError):
    """A cycle failed inside the worker; ``error_type`` and ``error_code`` say how."""

    code = "ABORTED"

    #: the full text the worker's error carried (Spark's, for a SparkFailureError), else None
    detail: str | None = None

    def __init__(self, message: str, error_type: str = "", error_code: str = "", cancelled: bool = False,
                 deterministic: bool = False):
        message, marker, detail = message.partition(lg_errors.DETAIL_MARKER)
        super().__init__(message.rstrip() if marker else message)
        self.detail = detail.strip() or None
        self.error_type = error_type
        self.error_code = error_code
        self.cancelled = cancelled
        #: the round failed in a way running it again cannot change (never retried)
        self.deterministic = deterministic
        if error_code in CODES:
            self.code = error_code  # the worker's Lockgate error decides the status


class AuthenticationError(LockgateError):
    """The controller refused the call's bearer token (missing or wrong)."""

    code = "UNAUTHENTICATED"


class PermissionDeniedError(LockgateError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(LockgateError):
    """The controller is at one of its limits (``--max-workers``, ``--max-streams``,
    ``--max-streams-per-client``, the largest request)."""

    code = "RESOURCE_EXHAUSTED"


#: LockgateError.code -> gRPC status code
CODES: dict[str, grpc.StatusCode] = {
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "INVALID_PLAN": grpc.StatusCode.INVALID_ARGUMENT,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "ABORTED": grpc.StatusCode.ABORTED,
    "DATA_LOSS": grpc.StatusCode.DATA_LOSS,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "RESOURCE_EXHAUSTED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "DEADLINE_EXCEEDED": grpc.StatusCode.DEADLINE_EXCEEDED,
}

#: errors that say the request itself is wrong: retrying cannot help
FATAL_CODES = frozenset({"INVALID_PLAN", "INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "DATA_LOSS",
                         "ALREADY_EXISTS", "PERMISSION_DENIED", "UNAUTHENTICATED"})


def status_of(err: BaseException) -> grpc.StatusCode:
    if isinstance(err, LockgateError):
        return CODES.get(err.code, grpc.StatusCode.UNKNOWN)
    if isinstance(err, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.INTERNAL


def message_of(err: BaseException) -> str:
    if isinstance(err, LockgateError):
        return str(err)
    return f"{type(err).__name__}: {err}"


_LOCAL = {
    c.__name__: c
    for c in (WorkerLostError, WorkerStartError, CycleFailedError, ControllerUnavailableError,
              AuthenticationError, PermissionDeniedError, ResourceExhaustedError)
}

_BY_STATUS: dict[grpc.StatusCode, type[LockgateError]] = {
    grpc.StatusCode.NOT_FOUND: lg_errors.JobNotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: lg_errors.InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: lg_errors.JobStateError,
    grpc.StatusCode.ALREADY_EXISTS: lg_errors.CheckpointExistsError,
    grpc.StatusCode.ABORTED: lg_errors.FencedError,
    grpc.StatusCode.DATA_LOSS: lg_errors.SnapshotError,
    grpc.StatusCode.UNAVAILABLE: ControllerUnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def error_class(name: str | None, status: grpc.StatusCode) -> type[LockgateError]:
    """The LockgateError class named ``name`` (from the trailing metadata), else one for ``status``."""
    if name:
        cls = _LOCAL.get(name) or getattr(lg_errors, name, None)
        if isinstance(cls, type) and issubclass(cls, LockgateError):
            return cls
    return _BY_STATUS.get(status, LockgateError)


def rebuild(name: str | None, status: grpc.StatusCode, message: str) -> LockgateError:
    """The exception a server-side error stands for, raised again on the client side."""
    cls = error_class(name, status)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if isinstance(err, lg_errors.CompileError):
        err.operator = None
    if isinstance(err, CycleFailedError):
        err.error_type, err.error_code, err.cancelled, err.deterministic = "", "", False, False
    if isinstance(err, lg_errors.WindowGapError):
        err.job, err.missing, err.requested = "", (0, 0), 0
    return err
