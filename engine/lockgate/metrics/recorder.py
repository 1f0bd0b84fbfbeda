"""What the engine tells its metrics, and the Prometheus registry that keeps them.

The engine's hooks (the cycle scheduler, the worker pool, the gRPC service) call a
:class:`MetricsRecorder`. The base class records nothing: it is what a process without a
metrics port uses, so a run pays nothing for metrics it does not serve.
:class:`PrometheusMetrics` keeps them in its own ``CollectorRegistry`` (not the client
library's global one: two controllers in one process stay apart).

Recording never fails a round: every method of :class:`PrometheusMetrics` logs an error
(once per method) and returns instead of raising.

>>> from lockgate.runtime.results import CycleResult
>>> m = PrometheusMetrics(process=False)
>>> r = CycleResult(window=3, attempt=1, staged={}, snapshot_uri=None, snapshot_manifest={},
...                 positions={}, rows_in=10, rows_out=4, late_rows=1, timings={"read": 20.0})
>>> m.round_committed("bids", r, 0.5)
>>> m.value("lockgate_rows_in_total", job_name="bids")
10.0
>>> m.value("lockgate_last_window", job_name="bids")
3.0
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..logs import get_logger
from ..states import JobState
from .families import BYTES_BUCKETS, FAMILIES, GROUP_BUCKETS, PHASE_BUCKETS, PHASES, ROUND_BUCKETS
from .rounds import state_tables, written_bytes

log = get_logger("metrics")

F = TypeVar("F", bound=Callable[..., Any])


class MetricsRecorder:
    """The hooks' view of metrics; this base records nothing (no metrics port)."""

    enabled = False

    # -- per job ---------------------------------------------------------------------
    def round_committed(self, job: str, result: Any, seconds: float, graph: Any = None) -> None:
        """A round of ``job`` committed (``result``: its CycleResult; ``graph``: the plan, for the
        watermark)."""

    def round_failed(self, job: str, windows: int = 1) -> None:
        """A round (or a catch-up group of ``windows``) of ``job`` failed."""

    def checkpoint_seen(self, job: str, checkpoint: Any, graph: Any = None) -> None:
        """A run of ``job`` starts from ``checkpoint`` (a CheckpointRecord): its window, time and
        state stand for the job until a round commits (so a run that never does shows its age)."""

    def restored(self, job: str, reason: str) -> None:
        """A run restored ``job``'s state from a checkpoint (``resume``, ``recovery``, ``rollback``)."""

    def catchup_group(self, job: str, windows: int) -> None:
        """A catch-up group of ``windows`` windows of ``job`` ran."""

    def job_state(self, job: str, state: str) -> None:
        """``job`` moved to ``state``."""

    def run_fenced(self, job: str) -> None:
        """A run of ``job`` found another run had taken the job over."""

    # -- per controller ----------------------------------------------------------------
    def worker_adopted(self) -> None:
        """An orphan of a previous controller was adopted."""

    def heartbeat_missed(self) -> None:
        """A worker missed its heartbeat deadline."""

    def grpc_request(self, service: str, method: str, code: str) -> None:
        """A gRPC request ended with status ``code``."""

    def watch_workers(self, states: Callable[[], Iterable[str]]) -> None:
        """At each scrape, count workers by the states ``states()`` gives."""

    def watch_jobs(self, states: Callable[[], Mapping[str, str]]) -> None:
        """At each scrape, take every job's state from ``states()`` (``{job: state}``, a controller's
        catalog) instead of the moves its runs reported."""


#: the recorder of a process that serves no metrics
NO_METRICS = MetricsRecorder()


def _guarded(fn: F) -> F:
    """Log, never raise: a metric must not fail a round or a request."""
    failed: list[bool] = []

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            if not failed:
                failed.append(True)
                log.exception("metrics: %s failed (the run goes on; further failures of it are not logged)",
                              fn.__name__)
            return None

    return wrapper  # type: ignore[return-value]


class _JobFigures:
    """What the scrape-time collector reads of one job."""

    __slots__ = ("commit_ts", "last_window", "state", "tables", "watermark_s", "window_s")

    def __init__(self) -> None:
        self.last_window: int | None = None
        self.commit_ts: float | None = None
        self.watermark_s: float | None = None
        self.window_s: float | None = None
        self.tables: dict[tuple[str, str], tuple[int, int]] = {}
        self.state: str | None = None


class _ScrapeCollector:
    """Gauges computed when Prometheus scrapes: ages and lags against the clock, state sizes,
    job states, workers by state."""

    def __init__(self, owner: PrometheusMetrics):
        self.owner = owner
        self._failing: set[str] = set()  # what failed at the last scrape: said once, until it works again

    def _read(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            value = read()
        except Exception as err:
            if what not in self._failing:
                self._failing.add(what)
                log.warning("metrics: reading %s failed (%s: %s); said once, until a scrape reads it again",
                            what, type(err).__name__, err)
            return None
        self._failing.discard(what)
        return value

    def describe(self) -> list[Any]:
        return []  # registered without describing: nothing is collected at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        def gauge(name: str) -> GaugeMetricFamily:
            f = FAMILIES[name]
            return GaugeMetricFamily(name, f.help, labels=list(f.labels))

        o = self.owner
        now = time.time()
        with o.lock:
            jobs = {job: (f.last_window, f.commit_ts, f.watermark_s, dict(f.tables), f.state, f.window_s)
                    for job, f in o.jobs.items()}
        states_now: dict[str, str | None] = {job: v[4] for job, v in jobs.items()}
        if o.job_states is not None:
            read = self._read("the jobs' states", lambda: {job: str(st) for job, st in o.job_states().items()})
            states_now = read if read is not None else states_now
        last, commit, age = gauge("lockgate_last_window"), gauge("lockgate_last_commit_timestamp_seconds"), \
            gauge("lockgate_last_commit_age_seconds")
        wm, lag = gauge("lockgate_watermark_timestamp_seconds"), gauge("lockgate_event_time_lag_seconds")
        rows, size, states = gauge("lockgate_state_rows"), gauge("lockgate_state_bytes"), gauge("lockgate_job_state")
        cycle = gauge("lockgate_cycle_window_seconds")
        for job, (window, ts, watermark, tables, _state, window_s) in sorted(jobs.items()):
            if window_s is not None:
                cycle.add_metric([job], window_s)
            if window is not None:
                last.add_metric([job], window)
            if ts is not None:
                commit.add_metric([job], ts)
                age.add_metric([job], max(0.0, now - ts))
            if watermark is not None:
                wm.add_metric([job], watermark)
                lag.add_metric([job], now - watermark)
            for (op, table), (n, b) in sorted(tables.items()):
                rows.add_metric([job, op, table], n)
                size.add_metric([job, op, table], b)
        for job, state in sorted(states_now.items()):
            if state is None:
                continue
            for s in JobState:  # every state, 0 or 1 (as kube-state-metrics does): bounded, alertable
                states.add_metric([job, s.value], 1.0 if s.value == state else 0.0)
        yield from (cycle, last, commit, age, wm, lag, rows, size, states)
        found = self._read("the workers", lambda: list(o.worker_states())) if o.worker_states is not None else None
        if found is not None:  # left out, rather than zeros, when they cannot be read
            workers = gauge("lockgate_workers")
            counts: dict[str, int] = dict.fromkeys(("STARTING", "IDLE", "BUSY", "LOST", "CLOSED"), 0)
            for s in found:
                counts[str(s)] = counts.get(str(s), 0) + 1
            for s, n in counts.items():
                workers.add_metric([s], n)
            yield workers


class PrometheusMetrics(MetricsRecorder):
    """Lockgate's metrics in a Prometheus registry of their own (see :mod:`lockgate.metrics.families`).

    :param process: also export the process' CPU, memory and start time (``process_*``).
    """

    enabled = True

    def __init__(self, process: bool = True):
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
        from prometheus_client.process_collector import ProcessCollector

        # no *_created series beside each counter and histogram: Prometheus' text format does not
        # use them, and they would double the series a scrape stores
        disable_created_metrics()

        self.registry = CollectorRegistry(auto_describe=False)
        self.lock = threading.Lock()
        self.jobs: dict[str, _JobFigures] = {}
        self.worker_states: Callable[[], Iterable[str]] | None = None
        self.job_states: Callable[[], Mapping[str, str]] | None = None
        buckets = {"lockgate_round_duration_seconds": ROUND_BUCKETS, "lockgate_round_phase_seconds": PHASE_BUCKETS,
                   "lockgate_checkpoint_written_bytes": BYTES_BUCKETS,
                   "lockgate_catchup_group_windows": GROUP_BUCKETS}
        self._m: dict[str, Any] = {}
        for f in FAMILIES.values():
            if f.kind == "gauge":
                continue  # computed at scrape time by _ScrapeCollector
            # the client library adds _total to a counter's samples itself
            name = f.name[: -len("_total")] if f.kind == "counter" else f.name
            if f.kind == "counter":
                self._m[f.name] = Counter(name, f.help, f.labels, registry=self.registry)
            else:
                self._m[f.name] = Histogram(name, f.help, f.labels, registry=self.registry, buckets=buckets[f.name])
        self.registry.register(_ScrapeCollector(self))
        if process:
            ProcessCollector(registry=self.registry)

    def _job(self, job: str) -> _JobFigures:
        f = self.jobs.get(job)
        if f is None:
            f = self.jobs[job] = _JobFigures()
        return f

    # -- per job ---------------------------------------------------------------------
    @_guarded
    def round_committed(self, job: str, result: Any, seconds: float, graph: Any = None) -> None:
        m = self._m
        m["lockgate_rounds_committed_total"].labels(job).inc()
        m["lockgate_round_duration_seconds"].labels(job).observe(max(0.0, seconds))
        timings = result.timings or {}
        for phase in PHASES:
            ms = timings.get(phase)
            if ms is not None:
                m["lockgate_round_phase_seconds"].labels(job, phase).observe(max(0.0, float(ms)) / 1000.0)
        for name, n in (("lockgate_rows_in_total", result.rows_in), ("lockgate_rows_out_total", result.rows_out),
                        ("lockgate_rows_late_total", result.late_rows),
                        ("lockgate_rows_invalid_total", getattr(result, "invalid_rows", 0))):
            m[name].labels(job).inc(max(0, int(n or 0)))
        uri, manifest = result.snapshot_uri, result.snapshot_manifest
        m["lockgate_checkpoint_written_bytes"].labels(job).observe(written_bytes(uri, manifest))
        self._committed(job, result.window, time.time(), state_tables(uri, manifest), graph)

    def _committed(self, job: str, window: int, at: float, tables: dict[tuple[str, str], tuple[int, int]],
                   graph: Any) -> None:
        watermark = window_s = None
        if graph is not None:
            lateness = int((getattr(graph, "watermark", None) or {}).get("lateness_us") or 0)
            watermark = (graph.clock.end_us(window) - lateness) / 1e6
            window_s = graph.clock.size_us / 1e6
        with self.lock:
            f = self._job(job)
            if f.last_window is None or window >= f.last_window:
                f.last_window = window
                f.watermark_s = watermark if watermark is not None else f.watermark_s
            f.commit_ts = at
            f.tables = tables
            f.window_s = window_s if window_s is not None else f.window_s

    @_guarded
    def checkpoint_seen(self, job: str, checkpoint: Any, graph: Any = None) -> None:
        if checkpoint is None:
            return
        with self.lock:
            known = self.jobs.get(job)
            if known is not None and known.last_window is not None and known.last_window >= checkpoint.window:
                return  # this process committed it (or a later one): its own figures stand
        created = checkpoint.created
        at = created.timestamp() if hasattr(created, "timestamp") else time.time()
        self._committed(job, checkpoint.window, at,
                        state_tables(checkpoint.snapshot_uri, checkpoint.snapshot_manifest), graph)

    @_guarded
    def round_failed(self, job: str, windows: int = 1) -> None:
        self._m["lockgate_rounds_failed_total"].labels(job).inc(max(1, windows))

    @_guarded
    def restored(self, job: str, reason: str) -> None:
        self._m["lockgate_restores_total"].labels(job, reason).inc()

    @_guarded
    def catchup_group(self, job: str, windows: int) -> None:
        self._m["lockgate_catchup_groups_total"].labels(job).inc()
        self._m["lockgate_catchup_group_windows"].labels(job).observe(windows)

    @_guarded
    def job_state(self, job: str, state: str) -> None:
        with self.lock:
            f = self._job(job)
            f.state = str(state)

    @_guarded
    def run_fenced(self, job: str) -> None:
        self._m["lockgate_fenced_runs_total"].inc()

    # -- per controller ----------------------------------------------------------------
    @_guarded
    def worker_adopted(self) -> None:
        self._m["lockgate_adopted_orphans_total"].inc()

    @_guarded
    def heartbeat_missed(self) -> None:
        self._m["lockgate_heartbeats_missed_total"].inc()

    @_guarded
    def grpc_request(self, service: str, method: str, code: str) -> None:
        self._m["lockgate_grpc_requests_total"].labels(service, method, code).inc()

    def watch_workers(self, states: Callable[[], Iterable[str]]) -> None:
        self.worker_states = states

    def watch_jobs(self, states: Callable[[], Mapping[str, str]]) -> None:
        self.job_states = states

    # -- reading -----------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (what the endpoint serves)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (None: no such sample), e.g. for tests and the CLI."""
        value = self.registry.get_sample_value(name, labels)
        return None if value is None else float(value)


__all__ = ["NO_METRICS", "MetricsRecorder", "PrometheusMetrics"]
