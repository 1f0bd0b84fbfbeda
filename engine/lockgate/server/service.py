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
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..errors import LockgateError
from ..logs import get_logger, log_event
from . import convert, security
from .config import ServerConfig
from .controller import Controller
from .errors import ERROR_CLASS_KEY, message_of, status_of
from .generated import lockgate_controller_pb2 as pb
from .generated import lockgate_controller_pb2_grpc as pb_grpc
from .generated import lockgate_worker_pb2 as wpb
from .generated import lockgate_worker_pb2_grpc as wpb_grpc
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


class ControllerService(pb_grpc.ControllerServicer):
    def __init__(self, ctl: Controller):
        self.ctl = ctl

    @handles_errors
    def Compile(self, request: pb.CompileRequest, context: grpc.ServicerContext) -> pb.CompileResponse:
        result, plan_json = self.ctl.compile(request.pipeline)
        return convert.compile_to_pb(result, plan_json)

    @handles_errors
    def Submit(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Job:
        return convert.job_to_pb(self.ctl.submit(request.pipeline, request.job or None))

    @handles_errors
    def WindowsFor(self, request: pb.WindowsForRequest, context: grpc.ServicerContext) -> pb.WindowsForResponse:
        first, last = self.ctl.windows_for(request.pipeline, request.start_us, request.end_us)
        return pb.WindowsForResponse(first=first, last=last)

    @staticmethod
    def _spec(request: pb.RunRequest) -> RunSpec:
        return RunSpec(
            mode="range", first=_opt(request, "first"), last=_opt(request, "last"),
            until_caught_up=request.until_caught_up, reset_state=request.reset_state,
            spark_master=request.spark_master or None,
        )

    @handles_errors
    def Run(self, request: pb.RunRequest, context: grpc.ServicerContext) -> Any:
        q: queue.Queue[Any] = queue.Queue()
        runner = self.ctl.begin(request.pipeline, request.job or None, self._spec(request), listener=q)
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
        runner = self.ctl.begin(request.pipeline, request.job or None, self._spec(request))
        return convert.job_to_pb(self.ctl.get_job(runner.job or ""))

    @handles_errors
    def Start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> pb.Job:
        spec = RunSpec(mode="continuous", reset_state=request.reset_state, spark_master=request.spark_master or None)
        runner = self.ctl.begin(request.pipeline, request.job or None, spec)
        return convert.job_to_pb(self.ctl.get_job(runner.job or ""))

    @handles_errors
    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.Job:
        return convert.job_to_pb(self.ctl.stop(request.job, request.drain, _opt(request, "timeout_s")))

    @handles_errors
    def Restore(self, request: pb.RestoreRequest, context: grpc.ServicerContext) -> pb.Job:
        return convert.job_to_pb(self.ctl.restore(request.job, request.window, request.reset_state))

    @handles_errors
    def GetJob(self, request: pb.JobRequest, context: grpc.ServicerContext) -> pb.Job:
        return convert.job_to_pb(self.ctl.get_job(request.job))

    @handles_errors
    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsResponse:
        return pb.ListJobsResponse(jobs=[convert.job_to_pb(j) for j in self.ctl.list_jobs()])

    @handles_errors
    def ListCheckpoints(self, request: pb.JobRequest, context: grpc.ServicerContext) -> pb.ListCheckpointsResponse:
        cps = self.ctl.list_checkpoints(request.job)
        return pb.ListCheckpointsResponse(checkpoints=[convert.checkpoint_to_pb(c) for c in cps])

    @handles_errors
    def Watch(self, request: pb.WatchRequest, context: grpc.ServicerContext) -> Any:
        for event in self.ctl.watch(request.job, _opt(request, "timeout_s"), context.is_active):
            yield convert.event_to_pb(event)

    @handles_errors
    def ReadSink(self, request: pb.ReadSinkRequest, context: grpc.ServicerContext) -> Any:
        import pyarrow as pa

        table = self.ctl.read_sink(request.job, request.sink)
        buf = io.BytesIO()
        with pa.ipc.new_stream(buf, table.schema) as writer:
            writer.write_table(table)
        data = buf.getvalue()
        for i in range(0, len(data), CHUNK):
            yield pb.DataChunk(data=data[i : i + CHUNK])


    @handles_errors
    def ListWorkers(self, request: pb.ListWorkersRequest, context: grpc.ServicerContext) -> pb.ListWorkersResponse:
        out = []
        now = time.monotonic()
        for h in self.ctl.pool.workers() if self.ctl.pool else []:
            w = pb.Worker(
                id=h.id, pid=h.pid or 0, state=h.state.value, job=h.job or "", generation=h.generation,
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


class Server:
    """A running controller: the gRPC server, its services and the Controller."""

    def __init__(self, config: ServerConfig):
        security.check_bind(config.host, config.token)
        if bool(config.tls_cert) != bool(config.tls_key):
            raise LockgateError("TLS needs both --tls-cert and --tls-key")
        self.config = config
        self.controller = Controller(config)
        interceptors = []
        if config.token:
            interceptors.append(security.TokenInterceptor(
                config.token,
                on_refused=lambda method, why: log_event(log, "unauthenticated", method=method, reason=why),
            ))
        self.grpc = grpc.server(
            ThreadPoolExecutor(max_workers=256, thread_name_prefix="lockgate-rpc"),
            interceptors=interceptors,
            options=[
                ("grpc.so_reuseport", 0),  # a second controller on the same port must fail, not share it
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ],
            maximum_concurrent_rpcs=1000,
        )
        pb_grpc.add_ControllerServicer_to_server(ControllerService(self.controller), self.grpc)
        wpb_grpc.add_WorkerControlServicer_to_server(WorkerService(self.controller), self.grpc)
        self.health = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        address = security.bind_address(config.host, config.port)
        try:
            if config.tls:
                creds = security.server_credentials(str(config.tls_cert), str(config.tls_key))
                self.port = self.grpc.add_secure_port(address, creds)
            else:
                self.port = self.grpc.add_insecure_port(address)
        except RuntimeError as err:
            raise LockgateError(f"cannot listen on {address}: {err} (is another server using the port?)") from err
        if not self.port:
            raise LockgateError(f"cannot listen on {address} (is another server using the port?)")
        self._stopped = threading.Event()
        self._closed = threading.Event()

    @property
    def address(self) -> str:
        return security.bind_address(self.config.host, self.port)

    def start(self) -> None:
        self.grpc.start()
        self.controller.start(self.config.advertised(self.port))
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log_event(log, "server_started", address=self.address, catalog=self.controller.catalog.url,
                  spark_master=self.config.spark_master, tls=self.config.tls, token=bool(self.config.token))

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving. Runs are not stopped: their jobs stay as they are in the catalog and
        the next controller started over it resumes them."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        self.controller.shutting_down = True
        self.grpc.stop(grace)
        try:
            self.controller.close()
        finally:
            self._closed.set()

    def wait(self) -> None:
        self.grpc.wait_for_termination()


def serve(config: ServerConfig) -> int:
    """Run a controller until SIGTERM or SIGINT (what ``lockgate server`` does)."""
    server = Server(config)
    server.start()
    scheme = "grpcs" if config.tls else "grpc"
    print(f"lockgate server listening on {scheme}://{server.address} (catalog {server.controller.catalog.url}, "
          f"spark master {config.spark_master})", flush=True)

    def on_signal(signum: int, _frame: Any) -> None:
        threading.Thread(target=server.stop, name="lockgate-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.wait()
    server._closed.wait(60)
    print("lockgate server stopped", file=sys.stderr, flush=True)
    return 0
