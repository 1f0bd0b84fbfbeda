"""The controller's side of metrics: gRPC requests counted by service, method and status code.

:class:`RequestMetricsInterceptor` wraps every known method's handler (an unknown method
is not counted: its name is the caller's, an unbounded label). The code is the one the
handler set (``context.abort`` sets it), ``OK`` when it returned normally, ``UNKNOWN`` when
it raised without one, ``CANCELLED`` when the client left a stream early.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from ..metrics import MetricsRecorder


def split_method(full: str) -> tuple[str, str]:
    """``("lockgate.v1.Controller", "Run")`` of ``/lockgate.v1.Controller/Run``.

    >>> split_method("/grpc.health.v1.Health/Check")
    ('grpc.health.v1.Health', 'Check')
    """
    service, _, method = full.lstrip("/").rpartition("/")
    return service, method


def _code(context: grpc.ServicerContext, default: str) -> str:
    try:
        code = context.code()  # set by abort() or set_code()
    except Exception:
        code = None
    if code is None:
        return default
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


class RequestMetricsInterceptor(grpc.ServerInterceptor):
    """Counts each request of a known method once, when it ends (``lockgate_grpc_requests_total``)."""

    def __init__(self, metrics: MetricsRecorder):
        self.metrics = metrics

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None:
            return None
        service, method = split_method(details.method or "")
        record = self.metrics.grpc_request

        def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
            def call(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    response = behavior(request, context)
                except BaseException:
                    record(service, method, _code(context, "UNKNOWN"))
                    raise
                record(service, method, _code(context, "OK"))
                return response
            return call

        def streaming(behavior: Callable[..., Any]) -> Callable[..., Any]:
            def call(request: Any, context: grpc.ServicerContext) -> Any:
                code = "UNKNOWN"
                try:
                    yield from behavior(request, context)
                    code = _code(context, "OK")
                except GeneratorExit:
                    code = "CANCELLED"
                    raise
                except BaseException:
                    code = _code(context, "UNKNOWN")
                    raise
                finally:
                    record(service, method, code)
            return call

        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                streaming(handler.stream_stream), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(
                unary(handler.stream_unary), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                streaming(handler.unary_stream), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return grpc.unary_unary_rpc_method_handler(
            unary(handler.unary_unary), request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


__all__ = ["RequestMetricsInterceptor", "split_method"]
