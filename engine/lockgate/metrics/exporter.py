"""The HTTP endpoint Prometheus scrapes: ``GET /metrics`` in the text exposition format.

Served by the client library's own threaded server, on loopback unless told otherwise (as
the gRPC port without a token). A port that cannot be bound (taken, not allowed) is
logged and the process goes on without an endpoint: metrics never stop a controller or
a run.

>>> from lockgate.metrics import PrometheusMetrics
>>> exporter = MetricsExporter(PrometheusMetrics(process=False), port=0)
>>> exporter.start()
True
>>> import urllib.request
>>> body = urllib.request.urlopen(exporter.url).read().decode()
>>> "lockgate_rounds_committed_total" in body
True
>>> exporter.stop()
"""

from __future__ import annotations

from typing import Any

from ..logs import get_logger, log_event
from .recorder import PrometheusMetrics

log = get_logger("metrics")

DEFAULT_HOST = "127.0.0.1"


class MetricsExporter:
    """Serves ``metrics`` at ``http://host:port/metrics`` on a daemon thread.

    :param metrics: the registry to serve.
    :param port: the TCP port (0: any free one; :attr:`port` says which after :meth:`start`).
    :param host: the address to bind (default loopback; ``0.0.0.0`` to let a Prometheus on
        another machine scrape it: the endpoint has no authentication).
    """

    def __init__(self, metrics: PrometheusMetrics, port: int, host: str = DEFAULT_HOST):
        self.metrics = metrics
        self.host = host or DEFAULT_HOST
        self.port = int(port)
        self.error: str | None = None
        self._server: Any = None
        self._thread: Any = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> bool:
        """Bind and serve; False (logged, :attr:`error` says why) when the port cannot be bound."""
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.metrics.registry)
        except (OSError, ValueError) as err:
            self.error = f"{type(err).__name__}: {err}"
            log.warning("metrics endpoint not started: cannot listen on %s:%s (%s); the run goes on without it",
                        self.host, self.port, self.error)
            return False
        self.port = self._server.server_address[1]
        log_event(log, "metrics_served", url=self.url)
        return True

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Stop serving (a no-op when not serving)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


__all__ = ["DEFAULT_HOST", "MetricsExporter"]
