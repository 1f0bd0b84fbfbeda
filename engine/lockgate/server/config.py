"""The settings of a controller (``lockgate server`` flags)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..defaults import DEFAULT_SPARK_MASTER


def keepalive_timeout_ms(heartbeat_timeout_s: float) -> int:
    """How long either end of the worker link waits for a keepalive ping's answer: the heartbeat
    timeout (at least gRPC's usual 5 s), so a worker starved of CPU for a few seconds (a loaded
    machine, a long GC) is judged by ``--heartbeat-timeout`` as documented, not lost to the link."""
    return int(1000 * max(5.0, heartbeat_timeout_s))


@dataclass
class ServerConfig:
    """Everything a controller needs; see ``lockgate server --help`` for each flag."""

    home: str
    host: str = "127.0.0.1"
    port: int = 50051
    catalog_url: str | None = None
    snapshots: str | None = None
    spark_master: str = DEFAULT_SPARK_MASTER
    spark_conf: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: the host name TLS workers verify the certificate with when --tls-server-name is not
    #: given (host[:port]; default: the bound host, or 127.0.0.1). Workers always reach the
    #: controller on its worker server (see worker_port), never on the client-facing port.
    advertise: str | None = None
    #: the CA workers verify the controller's certificate with (default: the certificate itself)
    tls_ca: str | None = None
    tls_server_name: str | None = None
    heartbeat_interval_s: float = 2.0
    heartbeat_timeout_s: float = 15.0
    worker_start_timeout_s: float = 180.0
    #: idle workers kept warm (a SparkSession started) for compiles and fast recovery
    standby_workers: int = 1
    max_workers: int = 16
    worker_idle_timeout_s: float = 600.0
    #: how long the worker of a run that ended cleanly waits for its job's next run (0: shut
    #: it down when the run ends)
    worker_keep_s: float = 120.0
    max_restarts: int = 10
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 60.0
    #: a run that stayed healthy this long gets its restart count reset
    restart_reset_s: float = 120.0
    #: how long a new run request waits for the job's previous run to wrap up once that run
    #: has committed every window of its range (a DAG's next task may ask before it ends)
    run_end_wait_s: float = 60.0
    keep_checkpoints: int = 10
    #: kill lost workers' process groups (off: leave them; fencing still refuses them)
    kill_lost_workers: bool = True
    #: how long a compile (or a job's assignment) may take on a worker
    compile_timeout_s: float = 300.0
    #: how long a worker outlives a dead controller, waiting to be adopted by the next one
    orphan_grace_s: float = 60.0
    #: the loopback TCP port of the workers' server; None: a Unix socket under <home>/run
    #: (a loopback port the system picks when the home's path is too long for a socket)
    worker_port: int | None = None
    #: client streams (Watch, Run, ReadSink) open at once, in total and per client connection
    max_streams: int = 64
    max_streams_per_client: int = 16
    #: folders pipeline files may be referenced from (empty and no module prefix: none, unless
    #: ``allow_any_pipeline``)
    pipelines: list[str] = field(default_factory=list)
    #: module prefixes ``module:attr`` references may name (``pkg`` allows ``pkg`` and ``pkg.*``)
    pipeline_modules: list[str] = field(default_factory=list)
    #: development only: accept any pipeline reference (loopback binds only)
    allow_any_pipeline: bool = False
    #: the port of the Prometheus endpoint (None: no metrics are recorded or served)
    metrics_port: int | None = None
    #: the address the Prometheus endpoint binds (loopback unless told otherwise)
    metrics_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.home = os.path.abspath(os.path.expanduser(self.home))
        if self.catalog_url is None:
            self.catalog_url = f"sqlite:///{os.path.join(self.home, 'catalog.db')}"
        if self.snapshots is None:
            self.snapshots = os.path.join(self.home, "snapshots")
        if self.heartbeat_interval_s <= 0 or self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError(
                f"heartbeat timeout ({self.heartbeat_timeout_s}s) must exceed the heartbeat interval "
                f"({self.heartbeat_interval_s}s), which must be positive"
            )

        if self.max_streams < 1 or self.max_streams_per_client < 1:
            raise ValueError("--max-streams and --max-streams-per-client must be at least 1")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"--metrics-port must be 0..65535, got {self.metrics_port}")
        if self.worker_port is not None and not 0 <= self.worker_port <= 65535:
            raise ValueError(f"--worker-port must be 0..65535, got {self.worker_port}")
        self.pipelines = [os.path.realpath(os.path.expanduser(p)) for p in self.pipelines]
        self.pipeline_modules = [m.strip().rstrip(".") for m in self.pipeline_modules if m.strip().rstrip(".")]
        for m in self.pipeline_modules:
            if not all(part.isidentifier() for part in m.split(".")):
                raise ValueError(f"--pipeline-modules {m!r}: give a dotted module name such as my_company.pipelines")

    @property
    def confined(self) -> bool:
        """Whether pipeline references are confined to folders and module prefixes (else
        refused, or with ``allow_any_pipeline`` all accepted)."""
        return bool(self.pipelines or self.pipeline_modules)

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def tls_name(self) -> str:
        """The name workers verify the controller's TLS certificate with."""
        if self.tls_server_name:
            return self.tls_server_name
        host = self.advertised(0).rsplit(":", 1)[0]
        return host.strip("[]")

    def advertised(self, bound_port: int) -> str:
        if self.advertise:
            return self.advertise
        host = self.host
        if host in ("0.0.0.0", "::", "[::]", ""):
            host = "127.0.0.1"
        host = host.strip("[]")
        return f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
