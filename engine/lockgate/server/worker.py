"""A Lockgate worker process: one SparkSession, the cycles of one job.

    python -m lockgate.server.worker --controller 127.0.0.1:50051 --worker-id ID \\
        --spark-master spark://host:7077 --home DIR --snapshots URI

The controller starts workers itself (``lockgate server``); this module is not meant to
be run by hand. A worker

1. heartbeats from its first second (``Heartbeat`` every ``--heartbeat-interval``), so a
   worker that hangs while Spark starts is caught too;
2. starts its SparkSession on the master it was given (``local[N]``, ``spark://``,
   ``sc://``), then connects (WorkerConnect: the ``Connect`` stream of tasks) with its
   address (the Spark driver's host:port) and its slots (Spark's default parallelism);
3. answers tasks: ``Compile`` (compile a pipeline, report its plan), ``Assign`` (become
   the worker of a job: compile its pipeline and keep it), ``ExecuteCycle`` (run one cycle
   round with :class:`~lockgate.runtime.cycle.CycleRunner`, report ``CycleDone`` with the
   CycleResult, or ``CycleFailed``), ``Cancel`` (cancel the running Spark jobs) and
   ``Shutdown``.

The generation of every ExecuteCycle is the worker's generation from then on; heartbeats
and reports carry it. The worker exits, its JVM with it, when the controller refuses it
(ABORTED: it was fenced), when its task stream ends, when the controller process is gone
or unreachable for longer than ``--heartbeat-timeout``.
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
from .generated import lockgate_worker_pb2 as wpb
from .generated import lockgate_worker_pb2_grpc as wgrpc

log = get_logger("server.worker")


def _die(reason: str, code: int = 3) -> None:
    """Leave now, the Spark JVM (same process group) included."""
    log_event(log, "worker_exit", reason=reason)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(code)


class Worker:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.id = args.worker_id
        self.token = os.environ.get(security.TOKEN_ENV) or None
        self.md = security.token_metadata(self.token)
        self.channel = security.channel(
            args.controller, tls=args.tls, tls_ca=args.tls_ca, server_name=args.tls_server_name,
            options=[("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000)],
        )
        self.stub = wgrpc.WorkerControlStub(self.channel)
        self.generation = 0
        self.status = "starting"
        self.window: int | None = None
        self.spark: Any = None
        self.runner: Any = None
        self.job: str | None = None
        self.tasks: queue.Queue[Any] = queue.Queue()
        self.cancelled = False
        self.interval = args.heartbeat_interval
        self.leaving = False

    # -- liveness ----------------------------------------------------------------------
    def heartbeat_loop(self) -> None:
        last_ok = time.monotonic()
        while not self.leaving:
            req = wpb.HeartbeatRequest(worker_id=self.id, generation=self.generation, status=self.status)
            if self.window is not None:
                req.window = self.window
            try:
                self.stub.Heartbeat(req, timeout=max(2.0, self.interval * 2), metadata=self.md)
                last_ok = time.monotonic()
            except grpc.RpcError as err:
                code = err.code()
                if code in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAUTHENTICATED):
                    _die(f"heartbeat refused ({code.name}): {err.details()}")
                if time.monotonic() - last_ok > self.args.heartbeat_timeout:
                    _die(f"the controller at {self.args.controller} is unreachable for "
                         f"{time.monotonic() - last_ok:.0f}s ({code.name}: {err.details()})")
            if self.args.parent_pid and os.getppid() != self.args.parent_pid:
                _die(f"the controller process {self.args.parent_pid} is gone")
            time.sleep(self.interval)

    # -- reports -----------------------------------------------------------------------
    def _report(self, method: str, req: Any) -> None:
        """Send a report; retried while the controller is briefly unreachable."""
        deadline = time.monotonic() + self.args.heartbeat_timeout
        while True:
            try:
                getattr(self.stub, method)(req, timeout=30, metadata=self.md)
                return
            except grpc.RpcError as err:
                code = err.code()
                if code in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAUTHENTICATED):
                    _die(f"{method} refused ({code.name}): {err.details()}")
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) \
                        or time.monotonic() > deadline:
                    _die(f"{method} failed ({code.name}): {err.details()}")
                time.sleep(0.5)

    @staticmethod
    def _error_fields(err: BaseException) -> dict[str, str]:
        from ..errors import LockgateError

        code = err.code if isinstance(err, LockgateError) else ""
        message = str(err) if isinstance(err, LockgateError) else f"{type(err).__name__}: {err}"
        return {"error_type": type(err).__name__, "error_code": code, "message": message}

    # -- tasks -------------------------------------------------------------------------
    def _compile(self, request_id: int, pipeline: str, job: str | None) -> None:
        from ..api.loader import load_pipeline
        from ..checkpoint.snapshots import SnapshotStore
        from ..plan.explain import explain
        from ..runtime.compiler import compile_pipeline
        from ..runtime.cycle import CycleRunner

        self.status = "compiling"
        try:
            plan = compile_pipeline(load_pipeline(pipeline), self.spark)
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
        self._report("CompileDone", done)

    def _execute(self, task: Any) -> None:
        from ..runtime.results import RestorePoint

        if task.generation < self.generation:
            log_event(log, "stale_task_ignored", generation=task.generation, mine=self.generation)
            return
        self.generation = task.generation
        self.window = task.window
        self.status = "running"
        self.cancelled = False
        try:
            if self.runner is None:
                raise RuntimeError("ExecuteCycle before Assign: this worker has no job")
            restore = None
            if task.HasField("restore"):
                r = task.restore
                restore = RestorePoint(
                    r.window, r.snapshot_uri if r.HasField("snapshot_uri") else None,
                    json.loads(r.snapshot_manifest_json or "{}"),
                )
            result = self.runner.run(task.window, task.attempt, restore)
            if self.cancelled:
                # the round's Spark jobs all finished between two cancellations: a cancelled
                # round still must not become a window (its staged output is garbage now)
                raise RuntimeError(f"round of window {task.window} cancelled")
            report: tuple[str, Any] = ("CycleDone", wpb.CycleDoneRequest(
                worker_id=self.id, generation=self.generation, request_id=task.request_id,
                result_json=json.dumps(asdict(result)),
            ))
        except Exception as err:
            log.info("cycle %s failed", task.window, exc_info=True)
            fields = self._error_fields(err)
            if not fields["error_code"]:
                fields["message"] += "\n" + "".join(traceback.format_exception(err)[-6:])
            report = ("CycleFailed", wpb.CycleFailedRequest(
                worker_id=self.id, generation=self.generation, request_id=task.request_id,
                cancelled=self.cancelled, **fields,
            ))
        finally:
            self.status = "assigned"
            self.window = None
        self._report(*report)

    def task_loop(self) -> None:
        while True:
            task = self.tasks.get()
            kind = task.WhichOneof("task")
            try:
                if kind == "compile":
                    self._compile(task.compile.request_id, task.compile.pipeline, None)
                elif kind == "assign":
                    self._compile(task.assign.request_id, task.assign.pipeline, task.assign.job)
                elif kind == "execute":
                    self._execute(task.execute)
            except BaseException as err:  # a worker that cannot answer must not linger
                _die(f"task {kind} crashed: {type(err).__name__}: {err}")

    def cancel(self, reason: str) -> None:
        """Cancel the running round: its Spark jobs now, and any it starts until it ends (a
        round runs several Spark jobs, with Python work between them)."""
        if self.status != "running" or self.spark is None or self.cancelled:
            return
        self.cancelled = True
        window = self.window
        log_event(log, "cancel", reason=reason, window=window)

        def keep_cancelling() -> None:
            deadline = time.monotonic() + 120
            while self.status == "running" and self.window == window and time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if getattr(self.spark, "_sc", None) is None and hasattr(self.spark, "interruptAll"):
                        self.spark.interruptAll()  # Spark Connect
                    else:
                        self.spark.sparkContext.cancelAllJobs()
                time.sleep(0.2)

        threading.Thread(target=keep_cancelling, name="lockgate-cancel", daemon=True).start()

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
        return wpb.WorkerHello(
            worker_id=self.id, address=address, slots=slots, pid=os.getpid(), spark_master=self.args.spark_master,
            spark_app_id=app, generation=self.generation, spark_version=str(spark.version),
        )

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
        try:
            for task in self.stub.Connect(self._hello(), metadata=self.md):
                kind = task.WhichOneof("task")
                if kind == "cancel":
                    self.cancel(task.cancel.reason)
                elif kind == "shutdown":
                    self.shutdown(task.shutdown.reason)
                else:
                    self.tasks.put(task)
        except grpc.RpcError as err:
            _die(f"the task stream failed ({err.code().name}): {err.details()}")
        _die("the controller closed the task stream")

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
    p.add_argument("--parent-pid", type=int, default=0, help="exit when this process (the controller) is gone")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--tls-ca", default=None)
    p.add_argument("--tls-server-name", default=None)
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--warm-up", action="store_true", help="run a few small queries before connecting (standby)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    configure(os.environ.get("LOCKGATE_LOG_LEVEL") or "INFO")
    worker = Worker(args)  # reads the token
    os.environ.pop(security.TOKEN_ENV, None)  # Spark's JVM and Python workers (user code) never see it
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
