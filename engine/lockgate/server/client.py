"""The gRPC client of a controller: the :class:`~lockgate.client.base.Client` and
:class:`~lockgate.client.base.AsyncClient` interfaces over ``lockgate.v1.Controller``.

>>> import lockgate
>>> client = lockgate.connect("grpc://127.0.0.1:50051", token="...")
>>> client.run("/srv/pipelines/bids.py:pipeline", until_caught_up=True).state
'FINISHED'

Options: ``token`` (bearer token; default ``$LOCKGATE_TOKEN``), ``tls_ca`` (PEM file of
the CA or self-signed certificate, default ``$LOCKGATE_TLS_CA``; ``grpcs://`` URLs use
TLS, with the system roots when no CA is given), ``server_name`` (the name the certificate was issued to, when it differs
from the host), ``timeout`` (seconds, for the quick calls; default 60) and
``long_timeout`` (compiles and starts, which may wait for a worker's Spark to start;
default none). Errors come back as the Lockgate exception the controller raised
(JobNotFoundError, CompileError, WindowGapError, ...). A controller that goes away while
:meth:`GrpcClient.run` follows a run that has begun raises :class:`RunDetachedError`: the
run is not lost (a controller restarted over the same catalog resumes it), and the error
says which job to follow again.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import datetime
from typing import Any

import grpc

from ..client.base import (
    AsyncClient,
    CheckpointInfo,
    Client,
    CompileResult,
    CyclePage,
    EventHandler,
    JobEvent,
    JobInfo,
    PlanInfo,
    RunResult,
    SuperstepInfo,
    TransitionInfo,
)
from ..clock import to_micros
from ..errors import InvalidArgumentError, LockgateError
from . import convert, security
from .errors import ERROR_CLASS_KEY, ControllerUnavailableError, rebuild
from .generated import lockgate_controller_pb2 as pb
from .generated import lockgate_controller_pb2_grpc as pb_grpc


def parse_url(url: str) -> tuple[str, bool]:
    """``grpc://host:port`` -> ``("host:port", False)``; ``grpcs://`` -> TLS."""
    for scheme, tls in (("grpcs://", True), ("grpc://", False)):
        if url.startswith(scheme):
            target = url[len(scheme):].rstrip("/")
            if not target or ":" not in target:
                raise InvalidArgumentError(f"controller URL {url!r} needs a host and a port: {scheme}host:port")
            return target, tls
    raise InvalidArgumentError(f"controller URL {url!r}: use grpc://host:port or grpcs://host:port")


def _error(err: grpc.RpcError, url: str) -> LockgateError:
    code = err.code()
    details = err.details() or ""
    name = None
    with contextlib.suppress(Exception):
        for key, value in err.trailing_metadata() or ():
            if key == ERROR_CLASS_KEY:
                name = value
    err_out: LockgateError
    if name is None and code == grpc.StatusCode.UNAVAILABLE:
        err_out = ControllerUnavailableError(
            f"cannot reach the Lockgate controller at {url} ({details}); is `lockgate server` running there, "
            "and does the URL's scheme (grpc:// or grpcs://) match its TLS setting?"
        )
    elif name is None and code == grpc.StatusCode.DEADLINE_EXCEEDED:
        err_out = ControllerUnavailableError(f"the controller at {url} did not answer in time ({details})")
    else:
        return rebuild(name, code, details)
    err_out.details = details  # type: ignore[attr-defined]  # what gRPC said, for a short message
    return err_out


def _deadline(timeout: float | None) -> float | None:
    """The call's deadline for a server-side ``timeout``: 30 s more. A timeout the server
    will refuse (NaN, infinite, negative) gets no deadline here, so the server's
    INVALID_ARGUMENT is what the caller sees."""
    if timeout is None or not math.isfinite(timeout) or timeout < 0:
        return None
    return timeout + 30


class RunDetachedError(ControllerUnavailableError):
    """The controller went away while a run it had begun was being followed.

    The run is not lost: the job stays under way in the catalog, and a controller started
    again over the same catalog resumes it from its last complete window. Follow it again
    with :meth:`~lockgate.client.base.Client.watch` / ``get_job`` once one answers.

    ``job`` is the run's job; ``first`` its first window when the controller had said it;
    ``last_before`` the job's last complete window when the run began.
    """

    def __init__(self, message: str, job: str, first: int | None = None, last_before: int | None = None):
        super().__init__(message)
        self.job = job
        self.first = first
        self.last_before = last_before


class _Base:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        tls_ca: str | None = None,
        server_name: str | None = None,
        timeout: float | None = 60.0,
        long_timeout: float | None = None,
    ):
        self.url = url
        self.target, self.tls = parse_url(url)
        self.token = token if token is not None else (os.environ.get(security.TOKEN_ENV) or None)
        self.tls_ca = tls_ca or os.environ.get("LOCKGATE_TLS_CA") or None
        self.server_name = server_name
        self.timeout = timeout
        self.long_timeout = long_timeout
        self.metadata = security.token_metadata(self.token)


class GrpcClient(_Base, Client):
    """A controller's client (blocking calls)."""

    def __init__(self, url: str, **options: Any):
        super().__init__(url, **options)
        self.channel = security.channel(self.target, tls=self.tls, tls_ca=self.tls_ca, server_name=self.server_name)
        self.stub = pb_grpc.ControllerStub(self.channel)

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as err:
            raise _error(err, self.url) from None

    def _stream(self, method: str, request: Any, timeout: float | None = None) -> Iterator[Any]:
        call = getattr(self.stub, method)(request, timeout=timeout, metadata=self.metadata)
        try:
            yield from call
        except grpc.RpcError as err:
            raise _error(err, self.url) from None
        finally:
            call.cancel()

    # -- Client ------------------------------------------------------------------------
    def compile(self, pipeline: str) -> CompileResult:
        return convert.compile_from_pb(self._call("Compile", pb.CompileRequest(pipeline=pipeline), self.long_timeout))

    def submit(self, pipeline: str, job: str | None = None, *, labels: Mapping[str, str] | None = None) -> JobInfo:
        req = pb.SubmitRequest(pipeline=pipeline, job=job or "", labels=dict(labels or {}))
        m = self._call("Submit", req, self.long_timeout)
        return convert.job_from_pb(m)

    def windows_for(self, pipeline: str, start: datetime, end: datetime) -> tuple[int, int]:
        req = pb.WindowsForRequest(pipeline=pipeline, start_us=to_micros(start), end_us=to_micros(end))
        m = self._call("WindowsFor", req, self.long_timeout)
        return m.first, m.last

    @staticmethod
    def _run_request(pipeline: str, job: str | None, first: int | None, last: int | None, until_caught_up: bool,
                     reset_state: bool, spark_master: str | None, catchup: str | int | None,
                     labels: Mapping[str, str] | None) -> pb.RunRequest:
        req = pb.RunRequest(pipeline=pipeline, job=job or "", until_caught_up=until_caught_up,
                            reset_state=reset_state, spark_master=spark_master or "",
                            catchup="" if catchup is None else str(catchup), labels=dict(labels or {}))
        if first is not None:
            req.first = first
        if last is not None:
            req.last = last
        return req

    def run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        on_event: EventHandler | None = None,
        spark_master: str | None = None,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RunResult:
        req = self._run_request(pipeline, job, first, last, until_caught_up, reset_state, spark_master, catchup,
                                labels)
        result = None
        started: JobInfo | None = None
        planned: int | None = None
        try:
            for update in self._stream("Run", req):
                kind = update.WhichOneof("update")
                if kind == "started":
                    started = convert.job_from_pb(update.started)
                elif kind == "event":
                    event = convert.event_from_pb(update.event)
                    if event.kind == "run_planned":
                        planned = event.window
                    if on_event is not None:
                        on_event(event)
                elif kind == "result":
                    result = convert.result_from_pb(update.result)
            if result is None:
                raise ControllerUnavailableError(
                    f"the controller at {self.url} ended the run's stream without a result")
        except ControllerUnavailableError as err:
            if started is None or isinstance(err, RunDetachedError):
                raise
            detached = RunDetachedError(str(err), started.name, first if first is not None else planned,
                                        started.last_window)
            detached.details = getattr(err, "details", None)  # type: ignore[attr-defined]
            raise detached from None
        return result

    def start_run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        spark_master: str | None = None,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        req = self._run_request(pipeline, job, first, last, until_caught_up, reset_state, spark_master, catchup,
                                labels)
        return convert.job_from_pb(self._call("StartRun", req, self.long_timeout))

    def start(self, pipeline: str, *, job: str | None = None, reset_state: bool = False,
              spark_master: str | None = None, labels: Mapping[str, str] | None = None) -> JobInfo:
        req = pb.StartRequest(pipeline=pipeline, job=job or "", reset_state=reset_state,
                              spark_master=spark_master or "", labels=dict(labels or {}))
        return convert.job_from_pb(self._call("Start", req, self.long_timeout))

    def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        req = pb.StopRequest(job=job, drain=drain)
        if timeout is not None:
            req.timeout_s = timeout
        deadline = _deadline(timeout)
        return convert.job_from_pb(self._call("Stop", req, deadline))

    def get_job(self, job: str) -> JobInfo:
        return convert.job_from_pb(self._call("GetJob", pb.JobRequest(job=job), self.timeout))

    def list_jobs(self) -> list[JobInfo]:
        return [convert.job_from_pb(j) for j in self._call("ListJobs", pb.ListJobsRequest(), self.timeout).jobs]

    def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        m = self._call("ListCheckpoints", pb.JobRequest(job=job), self.timeout)
        return [convert.checkpoint_from_pb(c) for c in m.checkpoints]

    def list_cycles(self, job: str, *, limit: int = 100, before: int | None = None) -> CyclePage:
        req = pb.ListCyclesRequest(job=job, limit=limit)
        if before is not None:
            req.before = before
        return convert.cycle_page_from_pb(self._call("ListCycles", req, self.timeout))

    def list_transitions(self, job: str) -> list[TransitionInfo]:
        m = self._call("ListTransitions", pb.JobRequest(job=job), self.timeout)
        return [convert.transition_from_pb(t) for t in m.transitions]

    def list_supersteps(self, job: str, window: int | None = None) -> list[SuperstepInfo]:
        req = pb.ListSuperstepsRequest(job=job)
        if window is not None:
            req.window = window
        m = self._call("ListSupersteps", req, self.timeout)
        return [convert.superstep_from_pb(s) for s in m.supersteps]

    def get_plan(self, job: str, plan_version: str | None = None) -> PlanInfo:
        req = pb.GetPlanRequest(job=job, plan_version=plan_version or "")
        return convert.plan_from_pb(self._call("GetPlan", req, self.timeout))

    def restore(self, job: str, window: int, *, reset_state: bool = False) -> JobInfo:
        req = pb.RestoreRequest(job=job, window=window, reset_state=reset_state)
        return convert.job_from_pb(self._call("Restore", req, self.long_timeout))

    def watch(self, job: str, *, timeout: float | None = None) -> Iterator[JobEvent]:
        req = pb.WatchRequest(job=job)
        if timeout is not None:
            req.timeout_s = timeout
        for m in self._stream("Watch", req, _deadline(timeout)):
            yield convert.event_from_pb(m)

    def read_sink(self, job: str, sink: str) -> Any:
        import pyarrow as pa

        data = b"".join(c.data for c in self._stream("ReadSink", pb.ReadSinkRequest(job=job, sink=sink),
                                                      self.long_timeout))
        return pa.ipc.open_stream(data).read_all()

    def read_state(
        self, job: str, operator: str | None = None, *, window: int | None = None, table: str | None = None
    ) -> Any:
        import pyarrow as pa

        req = pb.ReadStateRequest(job=job, operator=operator or "", table=table or "")
        if window is not None:
            req.window = window
        data = b"".join(c.data for c in self._stream("ReadState", req, self.long_timeout))
        return pa.ipc.open_stream(data).read_all()

    def list_workers(self) -> list[dict[str, Any]]:
        """The controller's worker processes (not part of the Client interface)."""
        m = self._call("ListWorkers", pb.ListWorkersRequest(), self.timeout)
        fields = ("id", "pid", "state", "job", "generation", "spark_master", "address", "slots", "status",
                  "lost_reason")
        return [{**{f: getattr(w, f) for f in fields},
                 "heartbeat_age_s": w.heartbeat_age_s if w.HasField("heartbeat_age_s") else None}
                for w in m.workers]

    def close(self) -> None:
        self.channel.close()


class AsyncGrpcClient(_Base, AsyncClient):
    """A controller's asyncio client (what Airflow triggers use). The channel is opened on
    first use, inside the caller's event loop."""

    def __init__(self, url: str, **options: Any):
        super().__init__(url, **options)
        self._channel: Any = None
        self._stub: Any = None

    @property
    def stub(self) -> Any:
        if self._stub is None:
            self._channel = security.channel(
                self.target, tls=self.tls, tls_ca=self.tls_ca, server_name=self.server_name, aio=True
            )
            self._stub = pb_grpc.ControllerStub(self._channel)
        return self._stub

    async def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return await getattr(self.stub, method)(request, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as err:
            raise _error(err, self.url) from None

    async def get_job(self, job: str) -> JobInfo:
        return convert.job_from_pb(await self._call("GetJob", pb.JobRequest(job=job), self.timeout))

    async def list_jobs(self) -> list[JobInfo]:
        m = await self._call("ListJobs", pb.ListJobsRequest(), self.timeout)
        return [convert.job_from_pb(j) for j in m.jobs]

    async def list_checkpoints(self, job: str) -> list[CheckpointInfo]:
        m = await self._call("ListCheckpoints", pb.JobRequest(job=job), self.timeout)
        return [convert.checkpoint_from_pb(c) for c in m.checkpoints]

    async def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        req = pb.StopRequest(job=job, drain=drain)
        if timeout is not None:
            req.timeout_s = timeout
        return convert.job_from_pb(await self._call("Stop", req, _deadline(timeout)))

    async def watch(self, job: str, *, timeout: float | None = None) -> AsyncIterator[JobEvent]:
        req = pb.WatchRequest(job=job)
        if timeout is not None:
            req.timeout_s = timeout
        call = self.stub.Watch(req, timeout=_deadline(timeout), metadata=self.metadata)
        try:
            async for m in call:
                yield convert.event_from_pb(m)
        except grpc.RpcError as err:
            raise _error(err, self.url) from None
        finally:
            call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None
