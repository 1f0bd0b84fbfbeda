"""Security of the controller: the bearer token, TLS and the loopback rule.

- **Token**: when the server has one (``--token-file F`` or ``$LOCKGATE_TOKEN``), every
  call must carry the metadata ``authorization: Bearer <token>``; a missing or wrong token
  is refused with UNAUTHENTICATED before any handler runs, so nothing changes. The only
  exception is the standard health service (``grpc.health.v1.Health``), which tells
  nothing but SERVING and must answer probes that cannot send headers.
- **TLS**: ``--tls-cert`` and ``--tls-key`` (PEM) make the server speak TLS; clients use
  ``grpcs://host:port`` with the CA (or the self-signed certificate) as ``tls_ca``.
- **Loopback rule**: without a token the server binds only a loopback address; and only a
  controller whose pipeline references are confined (``--pipelines``,
  ``--pipeline-modules``) binds anything else.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from ..errors import InvalidArgumentError, LockgateError

HEALTH_PREFIX = "/grpc.health.v1.Health/"
TOKEN_ENV = "LOCKGATE_TOKEN"


def load_token(token_file: str | None = None, env: str = TOKEN_ENV) -> str | None:
    """The token from ``token_file`` (first line, stripped), else from ``$LOCKGATE_TOKEN``."""
    if token_file:
        try:
            text = Path(token_file).expanduser().read_text().strip()
        except OSError as err:
            raise InvalidArgumentError(f"cannot read the token file {token_file}: {err}") from err
        if not text:
            raise InvalidArgumentError(f"the token file {token_file} is empty")
        return text.splitlines()[0].strip()
    token = os.environ.get(env, "").strip()
    return token or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen on a non-loopback address without a token."""
    if token is None and not is_loopback(host):
        raise LockgateError(
            f"refusing to bind {host}: without a token the controller listens on loopback only "
            "(127.0.0.1 or ::1). Give a token with --token-file FILE or $LOCKGATE_TOKEN (and TLS with "
            "--tls-cert/--tls-key) to listen on other addresses"
        )


def check_confinement(host: str, confined: bool) -> None:
    """Refuse to listen on a network interface while any pipeline reference is accepted:
    a pipeline reference is code the controller runs as its user."""
    if not confined and not is_loopback(host):
        raise LockgateError(
            f"refusing to bind {host} with --allow-any-pipeline: a pipeline is code that runs as this "
            "controller's user. Give the folders and module prefixes pipelines may come from with "
            "--pipelines DIR and --pipeline-modules PREFIX (repeatable) instead"
        )


def bind_address(host: str, port: int) -> str:
    h = host.strip("[]")
    return f"[{h}]:{port}" if ":" in h else f"{h}:{port}"


def _abort_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    def abort(_request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call (health checks aside) whose bearer token is missing or wrong."""

    def __init__(self, token: str, on_refused: Callable[[str, str], None] | None = None):
        self._expected = f"Bearer {token}".encode()
        self._on_refused = on_refused

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = details.method or ""
        if method.startswith(HEALTH_PREFIX):
            return continuation(details)
        given = None
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                break
        if given is not None and hmac.compare_digest(given, self._expected):
            return continuation(details)
        handler = continuation(details)
        if handler is None:
            return None
        why = "missing bearer token" if given is None else "wrong bearer token"
        if self._on_refused:
            self._on_refused(method, why)
        return _abort_handler(
            handler,
            grpc.StatusCode.UNAUTHENTICATED,
            f"{why}: this controller requires 'authorization: Bearer <token>' "
            "(lockgate --token ..., $LOCKGATE_TOKEN, or the Airflow connection's password)",
        )


def server_credentials(cert_file: str, key_file: str) -> grpc.ServerCredentials:
    try:
        cert = Path(cert_file).read_bytes()
        key = Path(key_file).read_bytes()
    except OSError as err:
        raise InvalidArgumentError(f"cannot read the TLS certificate or key: {err}") from err
    return grpc.ssl_server_credentials([(key, cert)])


def channel(
    target: str,
    *,
    tls: bool = False,
    tls_ca: str | bytes | None = None,
    server_name: str | None = None,
    aio: bool = False,
    options: list[tuple[str, Any]] | None = None,
) -> Any:
    """A (sync or asyncio) channel to ``target`` (host:port), with TLS when asked."""
    opts = list(options or [])
    opts += [("grpc.max_receive_message_length", 64 * 1024 * 1024), ("grpc.enable_retries", 1)]
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    mod: Any = grpc.aio if aio else grpc
    if not tls:
        return mod.insecure_channel(target, options=opts)
    root = None
    if tls_ca:
        root = tls_ca if isinstance(tls_ca, bytes) else Path(tls_ca).expanduser().read_bytes()
    return mod.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=root), options=opts)


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()
