"""Bounds of the controller's client-facing API: the range of every field of a request,
and concurrent streams per client and in total.

Every numeric field is range-checked where a request comes in (INVALID_ARGUMENT, naming
the field and its range), before anything runs: a window id beyond what any clock can
reach would otherwise fail in the middle of a run, over and over.

A client-facing stream (``Watch``, ``Run``'s follow, ``ReadSink``) holds one of the
controller's threads for as long as it is open. The streams are counted here, per client
(one connection: a ``lockgate.connect(...)`` client, a CLI process) and in total; past
either bound a new stream is refused at once with RESOURCE_EXHAUSTED, naming the flag
that raises it. Workers never compete for these threads: they talk to the controller on
a server of their own.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import grpc

from ..clock import WindowClock, to_micros
from ..errors import InvalidArgumentError
from ..names import hidden_character
from .errors import ResourceExhaustedError

#: the first and the last instant a datetime can hold (years 1 and 9999), in µs since the epoch
MIN_US = to_micros(datetime.min.replace(tzinfo=UTC))
MAX_US = to_micros(datetime.max.replace(tzinfo=UTC))
#: no clock has more windows than this (1 µs windows from the year 1 to 9999)
MAX_WINDOW = MAX_US - MIN_US
#: the longest timeout a request may give (30 days)
MAX_TIMEOUT_S = 30 * 86_400.0
MAX_NAME = 200
MAX_TEXT = 1000


def _printable(field: str, value: str, max_len: int) -> None:
    if len(value) > max_len:
        raise InvalidArgumentError(f"{field} is {len(value)} characters long, more than {max_len}")
    bad = hidden_character(value)
    if bad is not None:
        raise InvalidArgumentError(
            f"{field} holds the control or format character {bad} (a NUL, a newline, a C1 control, a bidi "
            "override...): only visible characters are taken"
        )


def check_window(field: str, value: int) -> int:
    """A window id: 0 to MAX_WINDOW."""
    if not 0 <= value <= MAX_WINDOW:
        raise InvalidArgumentError(f"{field} window {value} is out of range: window ids are 0..{MAX_WINDOW}")
    return value


def check_instant_us(field: str, value: int) -> int:
    """Microseconds since the epoch that a datetime can hold (years 1 to 9999)."""
    if not MIN_US <= value <= MAX_US:
        raise InvalidArgumentError(
            f"{field} {value} is out of range: microseconds since the epoch, {MIN_US}..{MAX_US} (years 1 to 9999)"
        )
    return value


def check_timeout(field: str, value: float | None) -> float | None:
    """A timeout in seconds: unset, or finite and 0 to MAX_TIMEOUT_S."""
    if value is None:
        return None
    if not math.isfinite(value) or not 0 <= value <= MAX_TIMEOUT_S:
        raise InvalidArgumentError(
            f"{field} {value!r} is out of range: seconds, 0..{MAX_TIMEOUT_S:g} (leave it unset to wait without limit)"
        )
    return value


def check_name(field: str, value: str, *, new: bool = False) -> str:
    """A job or sink name. Every name is printable and at most MAX_NAME characters long;
    a name being created (``new``) also becomes a folder: no ``/``, no ``\\``, not ``.``
    or ``..``, not empty."""
    _printable(field, value, MAX_NAME)
    if new and (not value.strip() or "/" in value or "\\" in value or value in (".", "..")):
        raise InvalidArgumentError(f"{field} {value!r} cannot name a folder: no '/', no '\\', not '.' or '..'")
    return value


def check_text(field: str, value: str, max_len: int = MAX_TEXT) -> str:
    """A free text field: printable and at most ``max_len`` characters long."""
    _printable(field, value, max_len)
    return value


def last_window(clock: WindowClock) -> int:
    """The last window of ``clock`` that ends within the year 9999."""
    return (MAX_US - clock.origin_us) // clock.size_us - 1


def check_windows_in_clock(clock: WindowClock, *windows: int | None) -> None:
    """Every window given exists on ``clock`` (it starts and ends within years 1 to 9999)."""
    last = last_window(clock)
    for w in windows:
        if w is not None and not 0 <= w <= last:
            raise InvalidArgumentError(
                f"window {w} is out of range for this pipeline's {clock.size_s:g} s cycle windows: its windows "
                f"are 0..{last} (the last one ends in the year 9999)"
            )


class StreamLimiter:
    """Counts open streams per client and in total (thread-safe)."""

    def __init__(self, max_total: int, max_per_client: int):
        if max_total < 1 or max_per_client < 1:
            raise ValueError("--max-streams and --max-streams-per-client must be at least 1")
        self.max_total = max_total
        self.max_per_client = max_per_client
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._total = 0

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    @contextlib.contextmanager
    def stream(self, client: str, method: str) -> Iterator[None]:
        """Hold one stream slot of ``client`` while the block runs; ResourceExhaustedError
        when none is free."""
        with self._lock:
            mine = self._open.get(client, 0)
            if self._total >= self.max_total:
                raise ResourceExhaustedError(
                    f"{method} refused: the controller serves {self._total} streams (Watch, Run, ReadSink), its "
                    f"limit (lockgate server --max-streams {self.max_total}); close some or raise the limit"
                )
            if mine >= self.max_per_client:
                raise ResourceExhaustedError(
                    f"{method} refused: this client has {mine} streams open (Watch, Run, ReadSink), the limit "
                    f"per client (lockgate server --max-streams-per-client {self.max_per_client}); close some, "
                    "or raise the limit"
                )
            self._open[client] = mine + 1
            self._total += 1
        try:
            yield
        finally:
            with self._lock:
                self._total -= 1
                left = self._open.get(client, 1) - 1
                if left > 0:
                    self._open[client] = left
                else:
                    self._open.pop(client, None)


class _Malformed:
    """What a request that does not parse as its message becomes."""

    def __init__(self, error: Exception):
        self.error = error


class MalformedRequestInterceptor(grpc.ServerInterceptor):
    """A request whose bytes do not parse as the method's message (wrong types, garbage) is
    refused with INVALID_ARGUMENT and a message, where gRPC itself would answer INTERNAL."""

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer
        method = details.method

        def deserialize(data: bytes) -> Any:
            try:
                return parse(data)
            except Exception as err:
                return _Malformed(err)

        def guard(behavior: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            def refuse(request: Any, context: grpc.ServicerContext) -> None:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{method}: the request does not parse as its message ({type(request.error).__name__})")

            if streaming:
                def stream(request: Any, context: grpc.ServicerContext) -> Any:
                    if isinstance(request, _Malformed):
                        refuse(request, context)
                    yield from behavior(request, context)
                return stream

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                if isinstance(request, _Malformed):
                    refuse(request, context)
                return behavior(request, context)
            return unary

        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                guard(handler.unary_stream, True), request_deserializer=deserialize,
                response_serializer=handler.response_serializer)
        return grpc.unary_unary_rpc_method_handler(
            guard(handler.unary_unary, False), request_deserializer=deserialize,
            response_serializer=handler.response_serializer)


__all__ = ["MalformedRequestInterceptor", "MAX_WINDOW", "StreamLimiter", "check_instant_us", "check_name", "check_text", "check_timeout",
           "check_window", "check_windows_in_clock", "last_window"]
