"""``lockgate server``: the flags, and running the controller."""

from __future__ import annotations

import argparse
from typing import Any

from ..defaults import default_home, default_spark_master


def add_server_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``server`` subcommand to the ``lockgate`` parser."""
    s = sub.add_parser(
        "server",
        help="run a controller: a gRPC service that owns the catalog and runs jobs on worker processes",
        description="Run a Lockgate controller (gRPC). Workers are started as local processes, each with one "
        "SparkSession on --spark-master. Without a token it listens on loopback only.",
    )
    keep = argparse.SUPPRESS  # do not overwrite the global --home/--catalog/... given before "server"
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=50051, help="port (default 50051; 0 picks a free one)")
    s.add_argument("--home", default=keep, help="Lockgate's folder (default $LOCKGATE_HOME or ~/.lockgate)")
    s.add_argument("--catalog", default=keep, help="catalog URL: sqlite:////path/catalog.db (default, under the "
                   "home) or postgresql://user@host:5432/db")
    s.add_argument("--snapshots", default=keep, help="snapshot store URI (default <home>/snapshots)")
    s.add_argument("--spark-master", default=keep,
                   help="default Spark master of the workers: local[2] (default), spark://host:7077, sc://host:15002")
    s.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for every worker's session (repeatable)")
    s.add_argument("--token-file", default=None,
                   help="file holding the bearer token clients must send (default: $LOCKGATE_TOKEN; none: no auth, "
                   "loopback only)")
    s.add_argument("--tls-cert", default=None, help="PEM certificate: serve TLS (grpcs://)")
    s.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    s.add_argument("--tls-ca", default=None, help="CA the workers verify the server with (default: --tls-cert)")
    s.add_argument("--tls-server-name", default=None, help="name in the certificate, when workers connect by IP")
    s.add_argument("--advertise", default=None, help="with TLS and no --tls-server-name: the host name workers "
                   "verify the certificate with (default: --host; 127.0.0.1 for 0.0.0.0)")
    s.add_argument("--worker-port", type=int, default=None,
                   help="loopback port of the workers' own server (0: a free one; default: a Unix socket under "
                   "<home>/run). Workers never share the client-facing port")
    s.add_argument("--max-streams", type=int, default=64,
                   help="client streams (Watch, Run, ReadSink) open at once, in total (default 64); past it a new "
                   "stream gets RESOURCE_EXHAUSTED")
    s.add_argument("--max-streams-per-client", type=int, default=16,
                   help="streams open at once per client connection (default 16)")
    s.add_argument("--pipelines", action="append", default=[], metavar="DIR",
                   help="a folder pipeline files may be referenced from (repeatable); with neither --pipelines nor "
                   "--pipeline-modules every reference is refused (see --allow-any-pipeline)")
    s.add_argument("--pipeline-modules", action="append", default=[], metavar="PREFIX",
                   help="a module prefix module:attr references may name (repeatable): PREFIX allows PREFIX and "
                   "PREFIX.*")
    s.add_argument("--allow-any-pipeline", action="store_true",
                   help="development only: accept any pipeline reference, i.e. let whoever may call the controller "
                   "run any Python file or module as its user (loopback binds only)")
    s.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds between worker heartbeats")
    s.add_argument("--heartbeat-timeout", type=float, default=15.0,
                   help="a worker silent this long is lost: its job recovers on a new worker (default 15)")
    s.add_argument("--worker-start-timeout", type=float, default=180.0,
                   help="seconds a new worker may take to start Spark and connect")
    s.add_argument("--standby-workers", type=int, default=1,
                   help="idle workers kept warm on --spark-master for compiles and fast recovery (default 1; "
                   "0 on a shared cluster, where an idle session would hold executors)")
    s.add_argument("--max-workers", type=int, default=16)
    s.add_argument("--worker-idle-timeout", type=float, default=600.0,
                   help="idle workers beyond the standby ones are shut down after this many seconds")
    s.add_argument("--worker-keep", type=float, default=120.0,
                   help="seconds the worker of a run that ended cleanly waits for its job's next run (a "
                   "queued DAG run starts on it warm; it takes no other job's); 0 shuts it down at once")
    s.add_argument("--max-restarts", type=int, default=10,
                   help="restarts of a failing run before its job goes to FAILED (the count resets after "
                   "--restart-reset seconds of healthy running)")
    s.add_argument("--restart-backoff", type=float, default=0.5, help="first restart delay, doubled each time")
    s.add_argument("--restart-backoff-max", type=float, default=60.0)
    s.add_argument("--restart-reset", type=float, default=120.0)
    s.add_argument("--keep-checkpoints", type=int, default=10, help="complete checkpoints kept per job")
    s.add_argument("--orphan-grace", type=float, default=60.0,
                   help="seconds a worker outlives a controller that died (kill -9, a crash), keeping its Spark "
                   "session warm for the next controller to adopt (default 60; 0: workers exit with it)")
    s.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://--metrics-host:PORT/metrics (default: none; "
                   "0 picks a free port)")
    s.add_argument("--metrics-host", default="127.0.0.1",
                   help="address of the metrics endpoint (default 127.0.0.1; it has no authentication)")
    s.add_argument("--keep-lost-workers", action="store_true",
                   help="do not kill lost workers' processes (fencing still refuses them); for debugging")
    return s


def run_server(args: argparse.Namespace) -> int:
    from .. import logs
    from ..errors import LockgateError
    from .config import ServerConfig
    from .security import load_token
    from .service import serve

    logs.configure("DEBUG" if args.verbose >= 2 else "INFO")
    conf = {}
    for kv in args.spark_conf:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise SystemExit(f"lockgate server: --spark-conf {kv!r}: use KEY=VALUE")
        conf[key] = value
    try:
        config = _config(args, conf, load_token, ServerConfig)
    except ValueError as err:
        raise LockgateError(str(err)) from err
    return serve(config)


def _config(args: argparse.Namespace, conf: dict[str, str], load_token: Any, ServerConfig: Any) -> Any:
    return ServerConfig(
        home=getattr(args, "home", None) or default_home(),
        host=args.host,
        port=args.port,
        catalog_url=getattr(args, "catalog", None),
        snapshots=getattr(args, "snapshots", None),
        spark_master=getattr(args, "spark_master", None) or default_spark_master(),
        spark_conf=conf,
        token=load_token(args.token_file),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        tls_server_name=args.tls_server_name,
        advertise=args.advertise,
        heartbeat_interval_s=args.heartbeat_interval,
        heartbeat_timeout_s=args.heartbeat_timeout,
        worker_start_timeout_s=args.worker_start_timeout,
        standby_workers=max(0, args.standby_workers),
        max_workers=max(1, args.max_workers),
        worker_idle_timeout_s=args.worker_idle_timeout,
        worker_keep_s=max(0.0, args.worker_keep),
        max_restarts=max(0, args.max_restarts),
        restart_backoff_s=args.restart_backoff,
        restart_backoff_max_s=args.restart_backoff_max,
        restart_reset_s=args.restart_reset,
        keep_checkpoints=args.keep_checkpoints,
        kill_lost_workers=not args.keep_lost_workers,
        orphan_grace_s=max(0.0, args.orphan_grace),
        worker_port=args.worker_port,
        max_streams=args.max_streams,
        max_streams_per_client=args.max_streams_per_client,
        pipelines=list(args.pipelines),
        pipeline_modules=list(args.pipeline_modules),
        allow_any_pipeline=args.allow_any_pipeline,
        metrics_port=getattr(args, "metrics_port", None),
        metrics_host=getattr(args, "metrics_host", None) or "127.0.0.1",
    )
