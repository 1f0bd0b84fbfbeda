"""A Lockgate worker process: one SparkSession, the cycles of one job.

    python -m lockgate.server.worker --controller 127.0.0.1:50051 --worker-id ID \\
        --spark-master spark://host:7077 --home DIR --snapshots URI [--token-fd N]

The controller starts workers itself (``lockgate server``); this module is not meant to
be run by hand. A worker

1. reads the controller's token from the pipe ``--token-fd`` and closes it, before
   anything else: the token is never in its environment, so neither Spark's JVM nor the
   Python workers of Spark nor the pipeline's code can find it there or in an open file;
2. heartbeats from its first second (``Heartbeat`` every ``--heartbeat-interval``), so a
   worker that hangs while Spark starts is caught too;
3. starts its SparkSession on the master it was given (``local[N]``, ``spark://``,
   ``sc://``), then connects (WorkerConnect: the ``Connect`` stream of tasks, opened by a
   ``Welcome``) with its address (the Spark driver's host:port) and its slots (Spark's
   default parallelism);
4. answers tasks: ``Compile`` (compile a pipeline, report its plan), ``Assign`` (become
   the worker of a job: compile its pipeline and keep it), ``ExecuteCycle`` (run one cycle
   round with :class:`~lockgate.runtime.cycle.CycleRunner`, report ``CycleDone`` with the
   CycleResult, or ``CycleFailed``), ``Cancel`` (cancel the running Spark jobs) and
   ``Shutdown``.

The generation of every ExecuteCycle is the worker's generation from then on; heartbeats
and reports carry it. The worker exits, its JVM with it, when the controller refuses it
(ABORTED: it was fenced; UNAUTHENTICATED: a wrong token) or closes its task stream.

When the controller goes away (its process is gone, the task stream breaks, or it is
unreachable for longer than ``--heartbeat-timeout``) the worker becomes an **orphan** for
``--orphan-grace`` seconds: it cancels its round's Spark jobs, drops its job (its
generation is fenced by whoever resumes the job; the worker never commits anything, and
what it has not reported yet is dropped), keeps its SparkSession and calls ``Connect``
again at the same address, as an adopted worker. A controller started there adopts it as
an idle, warm worker; when none does within the grace period, or the one that answers
refuses it, the worker exits. ``--orphan-grace 0`` exits at once, as workers once did.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import asdict
from typing import Any

import grpc

from ..defaults import DEFAULT_SPARK_MASTER
from ..logs import configure, get_logger, log_event
from . import security
from .config import keepalive_timeout_ms
from .generated import lockgate_worker_pb2 as wpb
from .generated import lockgate_worker_pb2_grpc as wgrpc

log = get_logger("server.worker")

#: seconds between an orphan's attempts to reach a controller at its address
RECONNECT_INTERVAL_S = 0.25
_REFUSED = (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAUTHENTICATED)


def _die(reason: str, code: int = 3) -> None:
    """Leave now, the Spark JVM (same process group) included."""
    log_event(log, "worker_exit", reason=reason)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(code)


def is_deterministic(err: BaseException) -> bool:
    """Whether ``err`` says the round itself is wrong, so that running it again fails the
    same way: an out-of-range value (OverflowError), a ValueError or a TypeError (pyarrow's
    and PySpark's included). A Lockgate error says so with its code instead."""
    from ..errors import LockgateError

    return not isinstance(err, LockgateError) and isinstance(err, ArithmeticError | ValueError | TypeError)


def read_token(fd: int) -> str | None:
    """The token written to the pipe ``fd`` by the controller (read to its end, then closed)."""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    token = b"".join(chunks).decode().strip()
    return token or None


class Worker:
    """One worker process: its SparkSession, its controller connection and its job."""

    def __init__(self, args: argparse.Namespace, token: str | None):
        self.args = args
        self.id = args.worker_id
        self.md = security.token_metadata(token)
        self.channel = security.channel(
            args.controller, tls=args.tls, tls_ca=args.tls_ca, server_name=args.tls_server_name,
            options=[
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", keepalive_timeout_ms(args.heartbeat_timeout)),
                # an orphan calls every RECONNECT_INTERVAL_S: the channel must try to connect as
                # often (its default backoff grows to two minutes)
                ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1_000),
            ],
        )
        self.stub = wgrpc.WorkerControlStub(self.channel)
        self.grace = max(0.0, args.orphan_grace)
        self.parent_pid = args.parent_pid
        self.generation = 0
        self.status = "starting"
        self.window: int | None = None
        self.spark: Any = None
        self.runner: Any = None
        self.job: str | None = None
        self.last_job: str | None = None
        self.tasks: queue.Queue[tuple[int, Any]] = queue.Queue()
        self.cancelled = False
        self.interval = args.heartbeat_interval
        self.leaving = False
        #: guards epoch and busy: a task starts only in the epoch it was received in
        self.lock = threading.Lock()
        #: bumped each time the controller is lost: tasks and reports of older epochs are dropped
        self.epoch = 0
        #: the task thread is working on a task
        self.busy = False
        #: bumped by every round: a cancellation outlives neither its round nor its epoch
        self.round = 0
        #: the controller answered the current Connect (its Welcome came)
        self.registered = False
        #: when the worker lost its controller (None: it has one)
        self.orphaned_at: float | None = None
        #: why the worker gave up on its controller, when another thread found out
        self.lost: str | None = None
        self.call: Any = None  # the Connect call in progress
        self.last_ok = time.monotonic()

    # -- liveness ----------------------------------------------------------------------
    def heartbeat_loop(self) -> None:
        while not self.leaving:
            orphaned_at = self.orphaned_at
            if orphaned_at is not None:  # nobody to heartbeat to until a controller adopts it
                if time.monotonic() - orphaned_at > self.grace:
                    _die(f"no controller at {self.args.controller} adopted this orphan within "
                         f"--orphan-grace {self.grace:g}s")
                time.sleep(min(self.interval, 0.5))
                continue
            req = wpb.HeartbeatRequest(worker_id=self.id, generation=self.generation, status=self.status)
            if self.window is not None:
                req.window = self.window
            try:
                self.stub.Heartbeat(req, timeout=max(2.0, self.interval * 2), metadata=self.md)
                self.last_ok = time.monotonic()
            except grpc.RpcError as err:
                code = err.code()
                if code in _REFUSED and self.orphaned_at is None:
                    _die(f"heartbeat refused ({code.name}): {err.details()}")
                if time.monotonic() - self.last_ok > self.args.heartbeat_timeout:
                    self.lose_controller(
                        f"the controller at {self.args.controller} is unreachable for "
                        f"{time.monotonic() - self.last_ok:.0f}s ({code.name}: {err.details()})")
            if self.parent_pid and os.getppid() != self.parent_pid:
                self.lose_controller(f"the controller process {self.parent_pid} is gone")
            time.sleep(self.interval)

    def lose_controller(self, reason: str) -> None:
        """The controller is gone (found by a thread other than the task stream's): become an
        orphan (the stream is cancelled; the main thread does the rest), or exit without a
        grace period."""
        if self.grace <= 0:
            _die(reason)
        with self.lock:
            if self.orphaned_at is not None and not self.registered:
                return  # an orphan already: its calls to the address must go on
            if self.orphaned_at is None:
                self.orphaned_at = time.monotonic()
            self.lost = self.lost or reason
            call = self.call
        if call is not None:
            call.cancel()

    # -- reports -----------------------------------------------------------------------
    def _report(self, method: str, req: Any, epoch: int) -> None:
        """Send a report; retried while the controller is briefly unreachable. A report for a
        controller that is gone (an older epoch) is dropped: its job's generation is fenced."""
        deadline = time.monotonic() + self.args.heartbeat_timeout
        while True:
            if epoch != self.epoch:
                log_event(log, "report_dropped", method=method, reason="the controller that asked for it is gone")
                return
            try:
                getattr(self.stub, method)(req, timeout=30, metadata=self.md)
                return
            except grpc.RpcError as err:
                code = err.code()
                if epoch != self.epoch:
                    continue
                if code in _REFUSED:
                    _die(f"{method} refused ({code.name}): {err.details()}")
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) \
                        or time.monotonic() > deadline:
                    self.lose_controller(f"{method} failed ({code.name}): {err.details()}")
                    log_event(log, "report_dropped", method=method, reason=f"{code.name}: {err.details()}")
                    return
                time.sleep(0.5)

    @staticmethod
    def _error_fields(err: BaseException) -> dict[str, str]:
        from ..errors import DETAIL_MARKER, LockgateError

        code = err.code if isinstance(err, LockgateError) else ""
        message = str(err) if isinstance(err, LockgateError) else f"{type(err).__name__}: {err}"
        detail = getattr(err, "detail", None) if isinstance(err, LockgateError) else None
        if detail:  # Spark's full text travels after the marker (CycleFailedError splits it off)
            message += f"\n\n{DETAIL_MARKER}\n{detail}"
        return {"error_type": type(err).__name__, "error_code": code, "message": message}

    # -- tasks -------------------------------------------------------------------------
    def _compile(self, request_id: int, pipeline: str, job: str | None, epoch: int) -> None:
        from ..api.loader import ReferencePolicy, load_pipeline
        from ..checkpoint.snapshots import SnapshotStore
        from ..plan.explain import explain
        from ..runtime.compiler import compile_pipeline
        from ..runtime.cycle import CycleRunner

        self.status = "compiling"
        try:
            policy = ReferencePolicy.of(self.args.pipelines, self.args.pipeline_modules, base=os.getcwd(),
                                        unrestricted=self.args.allow_any_pipeline)
            plan = compile_pipeline(load_pipeline(pipeline, policy=policy, strict=True), self.spark)
            text = explain(plan)
            if job is not None:
                job = job or plan.name  # a run without a job name runs as the pipeline's name
                parallelism = max(v.parallelism for v in plan.graph.vertices.values())
                self.spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
                self.runner = CycleRunner(self.spark, plan, job, self.args.home, SnapshotStore(self.args.snapshots))
                self.job = job
            done = wpb.CompileDoneRequest(
                worker_id=self.id, generation=self.generation, request_id=request_id, ok=True,
                plan_json=plan.graph.to_json(), plan_version=plan.version, explain=text,
            )
        except Exception as err:
            log.info("compile of %s failed", pipeline, exc_info=True)
            done = wpb.CompileDoneRequest(
                worker_id=self.id, generation=self.generation, request_id=request_id, ok=False,
                **self._error_fields(err),
            )
        self.status = "idle" if self.job is None else "assigned"
        self._report("CompileDone", done, epoch)

    def _execute(self, task: Any, epoch: int) -> None:
        from ..runtime.results import RestorePoint

        if task.generation < self.generation:
            log_event(log, "stale_task_ignored", generation=task.generation, mine=self.generation)
            return
        self.generation = task.generation
        self.window = task.window
        self.cancelled = False
        self.round += 1
        self.status = "running"
        try:
            if self.runner is None:
                raise RuntimeError("ExecuteCycle before Assign: this worker has no job")
            restore = None
            if task.HasField("restore"):
                r = task.restore
                restore = RestorePoint(
                    r.window, r.snapshot_uri if r.HasField("snapshot_uri") else None,
                    json.loads(r.snapshot_manifest_json or "{}"), json.loads(r.positions_json or "{}"),
                )
            from ..runtime.spark_failures import mapped_failures

            if task.group_windows:
                with mapped_failures(self.runner, list(task.group_windows)):  # Spark's failures as one line
                    results = self.runner.run_group(list(task.group_windows), list(task.group_attempts), restore)
                body = json.dumps({"results": [asdict(r) for r in results]})
            else:
                with mapped_failures(self.runner, [task.window]):
                    body = json.dumps(asdict(self.runner.run(task.window, task.attempt, restore)))
            if self.cancelled:
                # the round's Spark jobs all finished between two cancellations: a cancelled
                # round still must not become a window (its staged output is garbage now)
                raise RuntimeError(f"round of window {task.window} cancelled")
            report: tuple[str, Any] = ("CycleDone", wpb.CycleDoneRequest(
                worker_id=self.id, generation=self.generation, request_id=task.request_id, result_json=body,
            ))
        except Exception as err:
            log.info("cycle %s failed", task.window, exc_info=True)
            fields = self._error_fields(err)
            if not fields["error_code"]:
                fields["message"] += "\n" + "".join(traceback.format_exception(err)[-6:])
            report = ("CycleFailed", wpb.CycleFailedRequest(
                worker_id=self.id, generation=self.generation, request_id=task.request_id,
                cancelled=self.cancelled, deterministic=not self.cancelled and is_deterministic(err), **fields,
            ))
        finally:
            self.status = "assigned"
            self.window = None
        self._report(*report, epoch)

    def task_loop(self) -> None:
        while True:
            epoch, task = self.tasks.get()
            with self.lock:
                if epoch != self.epoch:
                    continue  # sent by a controller that is gone
                self.busy = True
            kind = task.WhichOneof("task")
            try:
                if kind == "compile":
                    self._compile(task.compile.request_id, task.compile.pipeline, None, epoch)
                elif kind == "assign":
                    self._compile(task.assign.request_id, task.assign.pipeline, task.assign.job, epoch)
                elif kind == "execute":
                    self._execute(task.execute, epoch)
            except BaseException as err:  # a worker that cannot answer must not linger
                _die(f"task {kind} crashed: {type(err).__name__}: {err}")
            finally:
                self.busy = False

    def cancel(self, reason: str) -> None:
        """Cancel the running round: its Spark jobs now, and any it starts until it ends (a
        round runs several Spark jobs, with Python work between them)."""
        if self.status != "running" or self.spark is None or self.cancelled:
            return
        self.cancelled = True
        rnd = self.round
        log_event(log, "cancel", reason=reason, window=self.window)

        def keep_cancelling() -> None:
            deadline = time.monotonic() + 120
            while self.status == "running" and self.round == rnd and time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if getattr(self.spark, "_sc", None) is None and hasattr(self.spark, "interruptAll"):
                        self.spark.interruptAll()  # Spark Connect
                    else:
                        self.spark.sparkContext.cancelAllJobs()
                time.sleep(0.2)

        threading.Thread(target=keep_cancelling, name="lockgate-cancel", daemon=True).start()

    # -- orphans -------------------------------------------------------------------------
    def orphan(self, reason: str) -> None:
        """The controller is gone: cancel the round, wait for the task thread, drop the job
        and keep the SparkSession for a controller that adopts this worker (exits when there
        is no grace period, or when the round does not end within it)."""
        if self.grace <= 0:
            _die(reason)
        with self.lock:
            self.epoch += 1
            self.registered = False
            if self.orphaned_at is None:
                self.orphaned_at = time.monotonic()
            orphaned_at = self.orphaned_at
        self.parent_pid = 0  # an adopting controller is not this process's parent
        log_event(log, "orphaned", reason=reason, job=self.job, generation=self.generation, window=self.window,
                  grace_s=self.grace)
        with contextlib.suppress(queue.Empty):
            while True:
                self.tasks.get_nowait()
        self.cancel("the controller is gone")
        while self.busy:
            if time.monotonic() - orphaned_at > self.grace:
                _die(f"the round did not end within --orphan-grace {self.grace:g}s after the controller went away")
            time.sleep(0.05)
        self._drop_job()
        self.lost = None

    def _drop_job(self) -> None:
        """Forget the job (its generation is fenced anyway) and what its rounds left in the session."""
        if self.job is not None:
            self.last_job = self.job
        self.runner = None
        self.job = None
        self.generation = 0
        self.window = None
        self.cancelled = False
        spark = self.spark
        with contextlib.suppress(Exception):
            spark.catalog.clearCache()
            for table in spark.catalog.listTables():
                if table.isTemporary:
                    spark.catalog.dropTempView(table.name)
        self.status = "idle"

    # -- main ----------------------------------------------------------------------------
    def _hello(self) -> Any:
        spark = self.spark
        address, slots, app = "", 0, ""
        try:
            sc = spark.sparkContext
            address = f"{sc.getConf().get('spark.driver.host', '')}:{sc.getConf().get('spark.driver.port', '')}"
            slots = int(sc.defaultParallelism)
            app = sc.applicationId
        except Exception:  # Spark Connect: no SparkContext here
            address = self.args.spark_master
            with contextlib.suppress(Exception):
                app = spark.session_id
        hello = wpb.WorkerHello(
            worker_id=self.id, address=address, slots=slots, pid=os.getpid(), spark_master=self.args.spark_master,
            spark_app_id=app, generation=self.generation, spark_version=str(spark.version),
            pgid=os.getpgid(0), settings=self.args.settings, adopted=self.epoch > 0, last_job=self.last_job or "",
        )
        if self.orphaned_at is not None:
            hello.orphaned_s = round(time.monotonic() - self.orphaned_at, 3)
        return hello

    def warm_up(self) -> None:
        """Run the kinds of query a cycle runs once, so that Spark's first-query costs (class
        loading, code generation) are paid before this standby worker is needed."""
        import tempfile

        import pyarrow as pa
        from pyspark.sql import functions as F

        t0 = time.monotonic()
        spark = self.spark
        try:
            n = 2000
            table = pa.table({"k": [i % 17 for i in range(n)], "v": list(range(n)),
                              "ts": pa.array([i * 1_000_000 for i in range(n)], pa.timestamp("us", tz="UTC"))})
            df = spark.createDataFrame(table)
            agg = df.groupBy("k", F.window("ts", "10 seconds")).agg(F.count(F.lit(1)).alias("n"), F.sum("v"),
                                                                      F.max("v"))
            flat = agg.select("k", "n", F.col("window.end").alias("we"))
            joined = flat.unionByName(flat).join(df.select("k").distinct(), "k", "left_anti")
            joined.count()
            if getattr(spark, "_sc", None) is not None:  # classic sessions: the Parquet path of snapshots
                with tempfile.TemporaryDirectory(dir=self.args.home, prefix=".warmup-") as tmp:
                    agg.write.mode("overwrite").parquet(tmp + "/agg")
                    spark.read.parquet(tmp + "/agg").groupBy("k").agg(F.sum("n")).collect()
            log_event(log, "warmed_up", seconds=round(time.monotonic() - t0, 2))
        except Exception as err:  # a warm-up is an optimisation only
            log_event(log, "warm_up_failed", error=f"{type(err).__name__}: {err}")

    def run(self) -> None:
        threading.Thread(target=self.heartbeat_loop, name="lockgate-heartbeat", daemon=True).start()
        from ..runtime.session import get_spark

        conf = dict(kv.split("=", 1) for kv in self.args.spark_conf)
        t0 = time.monotonic()
        self.spark = get_spark(self.args.spark_master, app_name=f"lockgate-{self.id}", conf=conf)
        log_event(log, "spark_started", master=self.args.spark_master, seconds=round(time.monotonic() - t0, 2))
        if self.args.warm_up:
            self.warm_up()
        self.status = "idle"
        threading.Thread(target=self.task_loop, name="lockgate-tasks", daemon=True).start()
        reason = self.connect()
        while True:
            self.orphan(reason)
            while True:  # an orphan: call the controller's address until one adopts this worker
                assert self.orphaned_at is not None
                if time.monotonic() - self.orphaned_at > self.grace:
                    _die(f"no controller at {self.args.controller} adopted this orphan within "
                         f"--orphan-grace {self.grace:g}s")
                reason = self.connect()
                if self.registered:
                    break  # adopted, then lost again
                time.sleep(RECONNECT_INTERVAL_S)

    def connect(self) -> str:
        """One Connect stream: registers (Welcome), then runs its tasks until it breaks.
        Returns why it broke; exits when the controller refuses the worker or ends the stream."""
        epoch = self.epoch
        self.registered = False
        call = self.stub.Connect(self._hello(), metadata=self.md)
        with self.lock:
            self.call = call
            gave_up = self.lost is not None  # found before this call could be cancelled
        if gave_up:
            call.cancel()
        try:
            for task in call:
                kind = task.WhichOneof("task")
                if kind == "welcome":
                    with self.lock:
                        self.registered = True
                        self.orphaned_at = None
                        self.lost = None
                    self.last_ok = time.monotonic()
                    if task.welcome.adopted:
                        log_event(log, "adopted", controller=self.args.controller, last_job=self.last_job)
                elif kind == "cancel":
                    self.cancel(task.cancel.reason)
                elif kind == "shutdown":
                    self.shutdown(task.shutdown.reason)
                else:
                    self.tasks.put((epoch, task))
        except grpc.RpcError as err:
            code = err.code()
            if code in _REFUSED:
                _die(f"the controller at {self.args.controller} refused this worker ({code.name}): {err.details()}")
            return self.lost or f"the task stream failed ({code.name}: {err.details()})"
        finally:
            with self.lock:
                self.call = None
        _die("the controller closed the task stream")
        return ""

    def shutdown(self, reason: str) -> None:
        self.leaving = True
        log_event(log, "shutdown", reason=reason)
        threading.Timer(15, _die, args=("shutdown took too long",)).start()
        with contextlib.suppress(Exception):
            self.spark.stop()
        _die(f"shut down: {reason}", code=0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lockgate.server.worker", description=__doc__.splitlines()[0])
    p.add_argument("--controller", required=True, help="host:port of the controller")
    p.add_argument("--worker-id", required=True)
    p.add_argument("--spark-master", default=DEFAULT_SPARK_MASTER)
    p.add_argument("--home", required=True)
    p.add_argument("--snapshots", required=True)
    p.add_argument("--heartbeat-interval", type=float, default=2.0)
    p.add_argument("--heartbeat-timeout", type=float, default=15.0)
    p.add_argument("--parent-pid", type=int, default=0, help="the controller's pid: an orphan when it is gone")
    p.add_argument("--orphan-grace", type=float, default=0.0,
                   help="seconds an orphan waits for a controller at --controller to adopt it (0: exit at once)")
    p.add_argument("--token-fd", type=int, default=-1, help="a pipe holding the controller's token (read, closed)")
    p.add_argument("--settings", default="", help="digest of the settings, for an adopting controller to check")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--tls-ca", default=None)
    p.add_argument("--tls-server-name", default=None)
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--pipelines", action="append", default=[], metavar="DIR",
                   help="a folder pipeline files may come from (repeatable)")
    p.add_argument("--pipeline-modules", action="append", default=[], metavar="PREFIX")
    p.add_argument("--allow-any-pipeline", action="store_true", help="accept any reference (development)")
    p.add_argument("--warm-up", action="store_true", help="run a few small queries before connecting (standby)")
    args = p.parse_args(argv)
    # first of all, before Spark or any pipeline code: the token's pipe is read and closed
    token = read_token(args.token_fd) if args.token_fd >= 0 else None
    os.environ.pop(security.TOKEN_ENV, None)  # never passed this way; Spark's children inherit the environment
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    configure(os.environ.get("LOCKGATE_LOG_LEVEL") or "INFO")
    Worker(args, token).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
