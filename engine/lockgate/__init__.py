"""Lockgate: dataflow pipelines on Apache Spark in checkpointed window cycles.

>>> import lockgate as lg
>>> from datetime import timedelta
>>> p = lg.Pipeline("bids", cycle_window=timedelta(minutes=1))
>>> bids = p.source(lg.NexmarkSource("bid", events_per_second=100, max_events=10_000))
>>> (bids.key_by("auction").window(lg.Tumbling(timedelta(seconds=10)))
...      .aggregate(n=lg.count()).sink(lg.CollectSink("counts")))
>>> client = lg.connect("embedded")
>>> client.run("my_pipelines.py:p", until_caught_up=True)
"""

from __future__ import annotations

from .api import (
    Aggregate,
    CollectSink,
    DeltaSink,
    FileSink,
    FileSource,
    FileTable,
    Graph,
    IcebergSink,
    NatsSource,
    NexmarkSource,
    Pipeline,
    PostgresSink,
    PostgresSource,
    PostgresTable,
    Session,
    Sliding,
    Stream,
    Tumbling,
    Watermark,
    approx_distinct,
    avg,
    collect,
    count,
    count_distinct,
    load_pipeline,
    max,
    min,
    pipeline_factory,
    sum,
    top_k,
)
from .client.base import (
    AsyncClient,
    CheckpointInfo,
    Client,
    CompileResult,
    CycleInfo,
    CyclePage,
    JobEvent,
    JobInfo,
    PlanInfo,
    RunResult,
    SuperstepInfo,
    TransitionInfo,
)
from .clock import WindowClock
from .control.catchup import check_catchup
from .defaults import default_home
from .errors import (
    CompileError,
    ControllerUnavailableError,
    JobNotFoundError,
    LockgateError,
    PipelineLoadError,
    PipelineRefusedError,
    SnapshotError,
    StateLayoutError,
    WindowGapError,
)
from .states import TERMINAL_STATES, JobState, is_terminal
from .version import __version__ as __version__


def connect(url: str = "embedded", **options: object) -> Client:
    """A client for ``url``: ``"embedded"`` (in this process) or ``"grpc://host:port"`` (a controller).

    ``options`` go to the client: for embedded, ``home``, ``catalog_url``, ``snapshots``,
    ``spark_master``, ``keep_checkpoints``; for gRPC, ``token``, ``tls_ca``, ``timeout``.
    """
    if url in ("embedded", "", None) or url.startswith("embedded"):
        from .client.embedded import EmbeddedClient

        return EmbeddedClient(**options)  # type: ignore[arg-type]
    if url.startswith(("grpc://", "grpcs://")):
        try:
            from .server.client import GrpcClient
        except ImportError as err:  # pragma: no cover - until the server exists
            raise LockgateError(f"the gRPC client is not available: {err}") from err
        return GrpcClient(url, **options)  # type: ignore[arg-type]
    raise LockgateError(f"unknown controller URL {url!r}: use 'embedded' or 'grpc://host:port'")


def connect_async(url: str = "embedded", **options: object) -> AsyncClient:
    """The asyncio client for ``url`` (what Airflow triggers use); see :func:`connect`."""
    if url in ("embedded", "", None) or url.startswith("embedded"):
        from .client.embedded import EmbeddedAsyncClient

        return EmbeddedAsyncClient(**options)  # type: ignore[arg-type]
    if url.startswith(("grpc://", "grpcs://")):
        try:
            from .server.client import AsyncGrpcClient
        except ImportError as err:  # pragma: no cover - until the server exists
            raise LockgateError(f"the gRPC client is not available: {err}") from err
        return AsyncGrpcClient(url, **options)  # type: ignore[arg-type]
    raise LockgateError(f"unknown controller URL {url!r}: use 'embedded' or 'grpc://host:port'")


__all__ = [
    "TERMINAL_STATES",
    "WindowClock",
    "default_home",
    "is_terminal",
    "Aggregate",
    "AsyncClient",
    "CheckpointInfo",
    "CycleInfo",
    "CyclePage",
    "PlanInfo",
    "SuperstepInfo",
    "TransitionInfo",
    "Client",
    "CollectSink",
    "DeltaSink",
    "CompileError",
    "ControllerUnavailableError",
    "CompileResult",
    "FileSink",
    "FileSource",
    "FileTable",
    "Graph",
    "IcebergSink",
    "JobEvent",
    "JobInfo",
    "JobState",
    "JobNotFoundError",
    "LockgateError",
    "PipelineLoadError",
    "PipelineRefusedError",
    "NatsSource",
    "NexmarkSource",
    "Pipeline",
    "PostgresSink",
    "PostgresSource",
    "PostgresTable",
    "RunResult",
    "Session",
    "Sliding",
    "SnapshotError",
    "StateLayoutError",
    "Stream",
    "Tumbling",
    "Watermark",
    "WindowGapError",
    "approx_distinct",
    "check_catchup",
    "avg",
    "collect",
    "connect",
    "connect_async",
    "count",
    "count_distinct",
    "top_k",
    "load_pipeline",
    "pipeline_factory",
    "max",
    "min",
    "sum",
]
