"""The settings of a controller (``lockgate server`` flags)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..defaults import DEFAULT_SPARK_MASTER


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
    #: how workers reach the controller (host:port); default: the bound address, or 127.0.0.1
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
    max_restarts: int = 10
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 60.0
    #: a run that stayed healthy this long gets its restart count reset
    restart_reset_s: float = 120.0
    keep_checkpoints: int = 10
    #: kill lost workers' process groups (off: leave them; fencing still refuses them)
    kill_lost_workers: bool = True
    #: how long a compile (or a job's assignment) may take on a worker
    compile_timeout_s: float = 300.0

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

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def advertised(self, bound_port: int) -> str:
        if self.advertise:
            return self.advertise
        host = self.host
        if host in ("0.0.0.0", "::", "[::]", ""):
            host = "127.0.0.1"
        host = host.strip("[]")
        return f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
