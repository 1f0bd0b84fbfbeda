"""Prometheus metrics of Lockgate's controllers and runs.

``lockgate server --metrics-port 9464`` and ``lockgate run --metrics-port 9464`` serve them
at ``http://127.0.0.1:9464/metrics``; in Python, :func:`serve` does the same for the
embedded runs of this process::

    import lockgate
    from lockgate import metrics

    metrics.serve(9464)                      # http://127.0.0.1:9464/metrics
    lockgate.connect("embedded").run("pipelines/bids.py:pipeline", first=0, last=99)

Per job: rounds committed and failed, round and phase seconds, rows in, out, late and
invalid, the last committed window and its age, the watermark and the event-time lag,
state rows and bytes per state table, checkpoint bytes written per round, restores,
catch-up groups, the job's state. Per controller: workers by state, fenced runs, adopted
orphans, missed heartbeats, gRPC requests by method and code. The full list, with each
metric's type and labels, is :data:`~lockgate.metrics.families.FAMILIES` (and the
documentation's Monitoring page).

A process that serves no metrics records none (:data:`NO_METRICS`), and a metric that
fails to record, or an endpoint that cannot bind its port, never fails a round.
"""

from __future__ import annotations

import threading

from .exporter import DEFAULT_HOST, MetricsExporter
from .families import FAMILIES, JOB, PHASES, Family
from .recorder import NO_METRICS, MetricsRecorder, PrometheusMetrics

_lock = threading.Lock()
_current: MetricsRecorder = NO_METRICS


def current() -> MetricsRecorder:
    """The recorder of this process' embedded runs: the one :func:`serve` (or :func:`use`)
    installed, else :data:`NO_METRICS`."""
    return _current


def use(metrics: MetricsRecorder) -> MetricsRecorder:
    """Make ``metrics`` the recorder of this process' embedded runs; returns the previous one."""
    global _current
    with _lock:
        previous, _current = _current, metrics
    return previous


def serve(port: int, host: str = DEFAULT_HOST) -> MetricsExporter:
    """Record this process' embedded runs and serve them at ``http://host:port/metrics``.

    The recorder is installed even when the port cannot be bound (``exporter.serving`` is then
    False and the reason is logged): the runs go on either way. Calling it again serves the
    same recorder on another port.
    """
    metrics = current()
    if not isinstance(metrics, PrometheusMetrics):
        metrics = PrometheusMetrics()
        use(metrics)
    exporter = MetricsExporter(metrics, port, host)
    exporter.start()
    return exporter


__all__ = [
    "DEFAULT_HOST",
    "FAMILIES",
    "JOB",
    "NO_METRICS",
    "PHASES",
    "Family",
    "MetricsExporter",
    "MetricsRecorder",
    "PrometheusMetrics",
    "current",
    "serve",
    "use",
]
