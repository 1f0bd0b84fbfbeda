"""The gRPC services of a controller: ``lockgate.v1.Controller`` (the public API),
``lockgate.v1.WorkerControl`` (what workers call) and the standard health service.

Every handler maps Lockgate errors to status codes (:mod:`lockgate.server.errors`):
NOT_FOUND for an unknown job, INVALID_ARGUMENT for an invalid plan (with the compile
error) or a bad argument, FAILED_PRECONDITION for a window gap, a job already running or a
restore to a window with no checkpoint, ABORTED for a fenced worker.
"""

from __future__ import annotations

import functools
import inspect
import io
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..control.catchup import GroupSizer
from ..errors import LockgateError
from ..logs import get_logger, log_event
from ..metrics import MetricsExporter, PrometheusMetrics
from ..names import check_labels
from . import convert, security
from .config import ServerConfig, keepalive_timeout_ms
from .controller import Controller
from .errors import ERROR_CLASS_KEY, message_of, status_of
from .generated import lockgate_controller_pb2 as pb
from .generated import lockgate_controller_pb2_grpc as pb_grpc
from .generated import lockgate_worker_pb2 as wpb
from .generated import lockgate_worker_pb2_grpc as wpb_grpc
from .limits import (
    MalformedRequestInterceptor,
    StreamLimiter,
    check_instant_us,
    check_name,
    check_text,
    check_timeout,
    check_window,
)
from .metrics import RequestMetricsInterceptor
from .runner import RunSpec

log = get_logger("server.service")

SERVICE_NAME = "lockgate.v1.Controller"
CHUNK = 1 << 20


def _abort(context: grpc.ServicerContext, err: BaseException, method: str) -> None:
    code = status_of(err)
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        log.error("%s failed", method, exc_info=err)
    else:
        log_event(log, "request_refused", method=method, status=code.name, error=type(err).__name__,
                  message=str(err)[:300])
    context.set_trailing_metadata(((ERROR_CLASS_KEY, type(err).__name__),))
    context.abort(code, message_of(err))


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn exceptions into status codes, for unary and server-streaming handlers alike."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                yield from fn(self, request, context)
            except Exception as err:
                _abort(context, err, fn.__name__)
        return stream

    @functools.wraps(fn)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except Exception as err:
            _abort(context, err, fn.__name__)
    return unary


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _job(request: Any, new: bool = False) -> str:
    """The request's job name, checked (``new``: a name a run or a submit may create)."""
    return check_name("the job name", request.job, new=new and bool(request.job))


class ControllerService(pb_grpc.ControllerServicer):
    def __init__(self, ctl: Controller, limiter: StreamLimiter | None = None):
        self.ctl = ctl
        self.limiter = limiter or StreamLimiter(ctl.config.max_streams, ctl.config.max_streams_per_client)

    def _stream_slot(self, context: grpc.ServicerContext, method: str) -> Any:
        """One of the client's stream slots (RESOURCE_EXHAUSTED past --max-streams[-per-client]).
        A client is one connection: its peer address and port."""
        return self.limiter.stream(context.peer() or "?", method)

    @handles_errors
    def Compile(self, request: pb.CompileRequest, context: grpc.ServicerContext) -> pb.CompileResponse:
        result, plan_json = self.ctl.compile(request.pipeline)
        return convert.compile_to_pb(result, plan_json)

    @handles_errors
    def Submit(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Job:
        labels = check_labels(request.labels)
        return convert.job_to_pb(self.ctl.submit(request.pipeline, _job(request, new=True) or None, labels))

    @handles_errors
    def WindowsFor(self, request: pb.WindowsForRequest, context: grpc.ServicerContext) -> pb.WindowsForResponse:
        start = check_instant_us("start_us", request.start_us)
        end = check_instant_us("end_us", request.end_us)
        first, last = self.ctl.windows_for(request.pipeline, start, end)
        return pb.WindowsForResponse(first=first, last=last)

    @staticmethod
    def _spec(request: pb.RunRequest) -> RunSpec:
        first, last = _opt(request, "first"), _opt(request, "last")
        for name, w in (("the first", first), ("the last", last)):
            if w is not None:
                check_window(name, w)
        _job(request, new=True)
        check_text("the Spark master", request.spark_master)
        check_text("catchup", request.catchup)
        if request.catchup:
            GroupSizer.parse(request.catchup)  # INVALID_ARGUMENT before anything runs
        return RunSpec(
            mode="range", first=first, last=last,
            until_caught_up=request.until_caught_up, reset_state=request.reset_state,
            spark_master=request.spark_master or None, catchup=request.catchup or None,
        )

    @handles_errors
    def Run(self, request: pb.RunRequest, context: grpc.ServicerContext) -> Any:
        with self._stream_slot(context, "Run"):
            yield from self._run(request, context)

    def _run(self, request: pb.RunRequest, context: grpc.ServicerContext) -> Any:
        q: queue.Queue[Any] = queue.Queue()
        runner = self.ctl.begin(request.pipeline, request.job or None, self._spec(request), listener=q,
                                labels=check_labels(request.labels))
        yield pb.RunUpdate(started=convert.job_to_pb(self.ctl.get_job(runner.job or "")))
        while True:
            try:
                event = q.get(timeout=0.5)
            except queue.Empty:
                if runner.done.is_set() and q.empty():
                    break
                if not context.is_active():
                    return  # the caller went away; the run goes on
                continue
            yield pb.RunUpdate(event=convert.event_to_pb(event))
        if runner.error is not None:
            raise runner.error
        yield pb.RunUpdate(result=convert.result_to_pb(runner.run_result()))

    @handles_errors
    def StartRun(self, request: pb.RunRequest, context: grpc.ServicerContext) -> pb.Job:
        runner = self.ctl.begin(request.pipeline, request.job or None, self._spec(request),
                                labels=check_labels(request.labels))
        return convert.job_to_pb(self.ctl.get_job(runner.job or ""))

    @handles_errors
    def Start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> pb.Job:
        _job(request, new=True)
        check_text("the Spark master", request.spark_master)
        spec = RunSpec(mode="continuous", reset_state=request.reset_state, spark_master=request.spark_master or None)
        runner = self.ctl.begin(request.pipeline, request.job or None, spec, labels=check_labels(request.labels))
        return convert.job_to_pb(self.ctl.get_job(runner.job or ""))

    @handles_errors
    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.Job:
        timeout = check_timeout("timeout_s", _opt(request, "timeout_s"))
        return convert.job_to_pb(self.ctl.stop(_job(request), request.drain, timeout))

    @handles_errors
    def Restore(self, request: pb.RestoreRequest, context: grpc.ServicerContext) -> pb.Job:
        window = check_window("the", request.window)
        return convert.job_to_pb(self.ctl.restore(_job(request), window, request.reset_state))

    @handles_errors
    def GetJob(self, request: pb.JobRequest, context: grpc.ServicerContext) -> pb.Job:
        return convert.job_to_pb(self.ctl.get_job(_job(request)))

    @handles_errors
    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsResponse:
        return pb.ListJobsResponse(jobs=[convert.job_to_pb(j) for j in self.ctl.list_jobs()])

    @handles_errors
    def ListCheckpoints(self, request: pb.JobRequest, context: grpc.ServicerContext) -> pb.ListCheckpointsResponse:
        cps = self.ctl.list_checkpoints(_job(request))
        return pb.ListCheckpointsResponse(checkpoints=[convert.checkpoint_to_pb(c) for c in cps])

    @handles_errors
    def ListCycles(self, request: pb.ListCyclesRequest, context: grpc.ServicerContext) -> pb.ListCyclesResponse:
        page = self.ctl.list_cycles(_job(request), request.limit or 100, _opt(request, "before"))
        return convert.cycle_page_to_pb(page)

    @handles_errors
    def ListSupersteps(
        self, request: pb.ListSuperstepsRequest, context: grpc.ServicerContext
    ) -> pb.ListSuperstepsResponse:
        window = request.window if request.HasField("window") else None
        steps = self.ctl.list_supersteps(_job(request), window)
        return pb.ListSuperstepsResponse(supersteps=[convert.superstep_to_pb(s) for s in steps])

    @handles_errors
    def ListTransitions(self, request: pb.JobRequest, context: grpc.ServicerContext) -> pb.ListTransitionsResponse:
        moves = self.ctl.list_transitions(_job(request))
        return pb.ListTransitionsResponse(transitions=[convert.transition_to_pb(t) for t in moves])

    @handles_errors
    def GetPlan(self, request: pb.GetPlanRequest, context: grpc.ServicerContext) -> pb.Plan:
        check_text("the plan version", request.plan_version)
        return convert.plan_to_pb(self.ctl.get_plan(_job(request), request.plan_version or None))

    @handles_errors
    def Watch(self, request: pb.WatchRequest, context: grpc.ServicerContext) -> Any:
        job, timeout = _job(request), check_timeout("timeout_s", _opt(request, "timeout_s"))
        with self._stream_slot(context, "Watch"):
            for event in self.ctl.watch(job, timeout, context.is_active):
                yield convert.event_to_pb(event)

    @handles_errors
    def ReadSink(self, request: pb.ReadSinkRequest, context: grpc.ServicerContext) -> Any:
        job = _job(request)
        with self._stream_slot(context, "ReadSink"):
            yield from _chunks(self.ctl.read_sink(job, request.sink))

    @handles_errors
    def ReadState(self, request: pb.ReadStateRequest, context: grpc.ServicerContext) -> Any:
        job = _job(request)
        operator = check_name("the operator name", request.operator) if request.operator else None
        table = check_name("the state table name", request.table) if request.table else None
        window = check_window("the", request.window) if request.HasField("window") else None
        with self._stream_slot(context, "ReadState"):
            yield from _chunks(self.ctl.read_state(job, operator, window, table))


    @handles_errors
    def ListWorkers(self, request: pb.ListWorkersRequest, context: grpc.ServicerContext) -> pb.ListWorkersResponse:
        out = []
        now = time.monotonic()
        for h in self.ctl.pool.workers() if self.ctl.pool else []:
            w = pb.Worker(
                id=h.id, pid=h.pid or 0, state=h.state.value, job=h.job or h.kept_for or "", generation=h.generation,
                spark_master=h.master, address=h.hello.address if h.hello else "",
                slots=h.hello.slots if h.hello else 0, status=h.status, lost_reason=h.lost_reason or "",
            )
            if h.last_seen is not None:
                w.heartbeat_age_s = round(now - h.last_seen, 3)
            out.append(w)
        return pb.ListWorkersResponse(workers=out)


class WorkerService(wpb_grpc.WorkerControlServicer):
    def __init__(self, ctl: Controller):
        self.ctl = ctl

    @property
    def pool(self) -> Any:
        return self.ctl.pool

    @handles_errors
    def Connect(self, request: wpb.WorkerHello, context: grpc.ServicerContext) -> Any:
        h = self.pool.register_connection(request)
        context.add_callback(lambda: self.pool.stream_closed(h.id))
        yield from self.pool.tasks_of(h, context.is_active)

    @handles_errors
    def Heartbeat(self, request: wpb.HeartbeatRequest, context: grpc.ServicerContext) -> wpb.HeartbeatResponse:
        self.pool.heartbeat(request)
        return wpb.HeartbeatResponse(interval_s=self.ctl.config.heartbeat_interval_s)

    @handles_errors
    def CycleDone(self, request: wpb.CycleDoneRequest, context: grpc.ServicerContext) -> wpb.ReportAck:
        self.pool.report(request, "CycleDone")
        return wpb.ReportAck()

    @handles_errors
    def CycleFailed(self, request: wpb.CycleFailedRequest, context: grpc.ServicerContext) -> wpb.ReportAck:
        self.pool.report(request, "CycleFailed")
        return wpb.ReportAck()

    @handles_errors
    def CompileDone(self, request: wpb.CompileDoneRequest, context: grpc.ServicerContext) -> wpb.ReportAck:
        self.pool.report(request, "CompileDone")
        return wpb.ReportAck()


#: the largest request a client may send (a pipeline reference, a job name...); past it: RESOURCE_EXHAUSTED
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: threads of the client-facing server beyond --max-streams: unary calls never wait for streams
UNARY_THREADS = 32
#: a Unix socket path longer than this does not fit sockaddr_un on every system
MAX_SOCKET_PATH = 107  # Linux's sun_path holds 108 bytes with the closing NUL
_KEEPALIVE = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


def worker_keepalive(heartbeat_timeout_s: float) -> list[tuple[str, int]]:
    """Keepalive of the workers' server: an unanswered ping breaks a worker's link only after
    :func:`~lockgate.server.config.keepalive_timeout_ms` (the worker's channel uses the same)."""
    timeout_ms = keepalive_timeout_ms(heartbeat_timeout_s)
    return [(k, timeout_ms if k == "grpc.keepalive_timeout_ms" else v) for k, v in _KEEPALIVE]


def worker_socket(home: str) -> str:
    """The Unix socket a controller over ``home`` serves its workers on."""
    return os.path.join(home, "run", "controller.sock")


def _check_socket_free(path: str) -> None:
    """Refuse to take over the worker socket of a live controller over the same home (a
    stale socket left by a controller that died is fine: gRPC replaces it)."""
    if not os.path.exists(path):
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(path)
        except OSError:
            return
    raise LockgateError(
        f"another controller serves this home's workers (its socket {path} answers): one controller per "
        "home; stop the other one, or give this one another --home"
    )


class Server:
    """A running controller: two gRPC servers, their services and the Controller.

    Clients call the client-facing server (``--host``/``--port``): a thread pool of
    ``--max-streams`` plus ``UNARY_THREADS`` threads, streams bounded per client and in total,
    so that unary calls always find a thread. Workers call a server of their own (its own
    threads, on a Unix socket under ``<home>/run``, or ``--worker-port`` on loopback), so no
    number of clients can delay a heartbeat or a report.
    """

    def __init__(self, config: ServerConfig):
        security.check_bind(config.host, config.token)
        security.check_confinement(config.host, config.confined or not config.allow_any_pipeline)
        if bool(config.tls_cert) != bool(config.tls_key):
            raise LockgateError("TLS needs both --tls-cert and --tls-key")
        self.config = config
        self.controller = Controller(config)
        self.limiter = StreamLimiter(config.max_streams, config.max_streams_per_client)
        threads = config.max_streams + UNARY_THREADS
        self.grpc = grpc.server(
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lockgate-rpc"),
            interceptors=[*self._counted(), *self._interceptors("client"), MalformedRequestInterceptor()],
            options=[
                ("grpc.so_reuseport", 0),  # a second controller on the same port must fail, not share it
                *_KEEPALIVE,
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
            ],
            # calls beyond the threads wait in gRPC's queue, up to this many; past it RESOURCE_EXHAUSTED
            maximum_concurrent_rpcs=max(1000, 4 * threads),
        )
        pb_grpc.add_ControllerServicer_to_server(ControllerService(self.controller, self.limiter), self.grpc)
        self.health = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        address = security.bind_address(config.host, config.port)
        self.port = self._listen(self.grpc, address, config.tls)
        self.workers_grpc = grpc.server(
            ThreadPoolExecutor(max_workers=4 * config.max_workers + 16, thread_name_prefix="lockgate-workers"),
            interceptors=[*self._counted(), *self._interceptors("worker")],
            options=[*worker_keepalive(config.heartbeat_timeout_s), ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        wpb_grpc.add_WorkerControlServicer_to_server(WorkerService(self.controller), self.workers_grpc)
        self.worker_address = self._listen_workers()
        self._stopped = threading.Event()
        self._closed = threading.Event()
        self.exporter: MetricsExporter | None = None

    def _counted(self) -> list[grpc.ServerInterceptor]:
        """The interceptor counting requests for Prometheus (none without --metrics-port)."""
        metrics = self.controller.metrics
        return [RequestMetricsInterceptor(metrics)] if metrics.enabled else []

    def _interceptors(self, side: str) -> list[grpc.ServerInterceptor]:
        if not self.config.token:
            return []
        return [security.TokenInterceptor(
            self.config.token,
            on_refused=lambda method, why: log_event(log, "unauthenticated", method=method, reason=why, side=side),
        )]

    def _listen(self, server: grpc.Server, address: str, tls: bool) -> int:
        try:
            if tls:
                creds = security.server_credentials(str(self.config.tls_cert), str(self.config.tls_key))
                port = server.add_secure_port(address, creds)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as err:
            raise LockgateError(f"cannot listen on {address}: {err} (is another server using the port?)") from err
        if not port:
            raise LockgateError(f"cannot listen on {address} (is another server using the port?)")
        return port

    def _listen_workers(self) -> str:
        """Bind the workers' server; returns the address workers call (``unix:PATH`` or host:port)."""
        cfg = self.config
        run = os.path.join(cfg.home, "run")
        os.makedirs(run, mode=0o700, exist_ok=True)
        os.chmod(run, 0o700)  # the socket is for this user's processes only (the token guards it too)
        path = worker_socket(cfg.home)
        if cfg.worker_port is None and len(path) <= MAX_SOCKET_PATH:
            _check_socket_free(path)
            self._listen(self.workers_grpc, f"unix:{path}", cfg.tls)
            return f"unix:{path}"
        port = self._listen(self.workers_grpc, f"127.0.0.1:{cfg.worker_port or 0}", cfg.tls)
        if cfg.worker_port is None:
            log_event(log, "worker_port_picked", port=port, reason=f"the socket path {path} is too long; orphans "
                      "of this controller are adopted by a next one only with a fixed --worker-port")
        return f"127.0.0.1:{port}"

    @property
    def address(self) -> str:
        return security.bind_address(self.config.host, self.port)

    def start(self) -> None:
        self.workers_grpc.start()
        self.grpc.start()
        self.controller.start(self.worker_address)
        if isinstance(self.controller.metrics, PrometheusMetrics) and self.config.metrics_port is not None:
            # a port that cannot be bound is logged: the controller serves its jobs without it
            self.exporter = MetricsExporter(self.controller.metrics, self.config.metrics_port, self.config.metrics_host)
            self.exporter.start()
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        cfg = self.config
        log_event(log, "server_started", address=self.address, workers=self.worker_address,
                  catalog=self.controller.catalog.url, spark_master=cfg.spark_master, tls=cfg.tls,
                  token=bool(cfg.token), max_streams=cfg.max_streams,
                  max_streams_per_client=cfg.max_streams_per_client,
                  pipelines=cfg.pipelines or None, pipeline_modules=cfg.pipeline_modules or None)
        if not cfg.confined and cfg.allow_any_pipeline:
            log.warning("pipeline references are not confined (--allow-any-pipeline): whoever may call this "
                        "controller can run any Python file or module as its user")

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving. Runs are not stopped: their jobs stay as they are in the catalog and
        the next controller started over it resumes them."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if self.exporter is not None:
            self.exporter.stop()
        self.controller.shutting_down = True
        self.grpc.stop(grace)
        try:
            self.controller.close()
        finally:
            self.workers_grpc.stop(1)
            self._closed.set()

    def wait(self) -> None:
        self.grpc.wait_for_termination()


def serve(config: ServerConfig) -> int:
    """Run a controller until SIGTERM or SIGINT (what ``lockgate server`` does)."""
    server = Server(config)
    server.start()
    scheme = "grpcs" if config.tls else "grpc"
    print(f"lockgate server listening on {scheme}://{server.address} (catalog {server.controller.catalog.url}, "
          f"spark master {config.spark_master}; workers at {server.worker_address})", flush=True)
    if server.exporter is not None:
        if server.exporter.serving:
            print(f"lockgate server: Prometheus metrics at {server.exporter.url}", flush=True)
        else:
            print(f"lockgate server: no metrics endpoint: {server.exporter.error}", file=sys.stderr, flush=True)
    if not config.confined:
        if config.allow_any_pipeline:
            print("lockgate server: --allow-any-pipeline: whoever may call this controller can run any Python file "
                  "or module as this user; give --pipelines DIR (and --pipeline-modules PREFIX) instead",
                  file=sys.stderr, flush=True)
        else:
            print("lockgate server: no --pipelines or --pipeline-modules: every pipeline reference is refused "
                  "until the controller is started with them", file=sys.stderr, flush=True)

    def on_signal(signum: int, _frame: Any) -> None:
        threading.Thread(target=server.stop, name="lockgate-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.wait()
    server._closed.wait(60)
    print("lockgate server stopped", file=sys.stderr, flush=True)
    return 0


def _chunks(table: Any) -> Any:
    """A pyarrow Table as Arrow IPC stream bytes, in DataChunks."""
    import pyarrow as pa

    buf = io.BytesIO()
    with pa.ipc.new_stream(buf, table.schema) as writer:
        writer.write_table(table)
    data = buf.getvalue()
    for i in range(0, len(data), CHUNK):
        yield pb.DataChunk(data=data[i : i + CHUNK])
