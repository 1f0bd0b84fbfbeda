"""Worker processes as the controller sees them: spawn, connect, heartbeats, loss, fencing.

A worker is a ``python -m lockgate.server.worker`` process in its own process group
(its Spark driver JVM included), holding one SparkSession. It connects back
(WorkerConnect: the ``Connect`` stream of tasks), heartbeats, and answers the tasks it is
sent (compile, assign to a job, execute a cycle). Idle workers wait in the pool: the
controller keeps ``standby_workers`` of them warm on its default Spark master, so a compile
or a recovery does not wait for a JVM to start.

A worker is **lost** when its process exits, its task stream closes, it misses the
heartbeat deadline, or it does not connect in time. A lost worker is fenced (every later
heartbeat or report of it is refused with ABORTED) and, by default, its process group is
killed. A worker assigned to a job never goes back to the pool for other jobs: when its run
ends cleanly it waits ``worker_keep_s`` for the same job's next run (a queued DAG run starts on
it warm), and is shut down then, or at once when the run failed.

Workers outlive a controller that dies (``kill -9``) by a grace period (``orphan_grace_s``):
they cancel their round, drop their job and call the same address again. The next
controller adopts them as warm, idle workers (their process groups become its own to kill),
so the jobs it resumes do not wait for Spark to start. Every spawned worker is recorded
under ``<home>/run/workers/``; a starting pool waits a few seconds (``ADOPT_WAIT_S`` at
most) for the live ones that call its address before it starts new workers.

The controller's token reaches a worker through a pipe (``--token-fd``) that the worker
reads and closes before anything else; it is never in a worker's environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..errors import FencedError, InvalidArgumentError, PipelineLoadError
from ..logs import get_logger, log_event
from ..metrics import NO_METRICS, MetricsRecorder
from .config import ServerConfig
from .errors import ResourceExhaustedError, WorkerLostError, WorkerStartError
from .generated import lockgate_worker_pb2 as wpb

log = get_logger("server.pool")

#: at most this long a starting pool waits for the orphans of the previous controller
ADOPT_WAIT_S = 10.0
#: at most this long a resumed job waits for the orphan that ran it, while that process lives:
#: the orphan calls only once its cancelled round has ended, which on a busy machine can take
#: longer than ``ADOPT_WAIT_S`` (an orphan whose round outlasts its own grace period exits)
ADOPT_JOB_WAIT_S = 60.0
_PROC = os.path.isdir("/proc/self")


def holds_cluster_cores(master: str) -> bool:
    """Whether a worker's Spark application on ``master`` holds executors (cores) of a shared
    cluster for as long as it lives: a standalone, YARN or Kubernetes master, not ``local[...]``
    (the worker's own process) nor Spark Connect (a server's session)."""
    return master.startswith(("spark://", "yarn", "k8s://"))


def worker_env() -> dict[str, str]:
    """The environment of a worker process: this one's, less the token and an armed fault.

    The token never goes into the environment (Spark's JVM and its Python workers, hence the
    pipeline's code, inherit it; ``/proc/<pid>/environ`` keeps it): the worker reads it from a pipe.
    gRPC's fork support is off: grpcio's fork handlers run in the child that PySpark forks (with
    a ``preexec_fn``) to start the worker's JVM while its heartbeat channel is live, and now and
    then killed that child before its ``exec`` (the JVM never started).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_FAULT")}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    return env


class WState(StrEnum):
    STARTING = "STARTING"  # spawned, not connected yet
    IDLE = "IDLE"  # connected, in the pool
    BUSY = "BUSY"  # compiling for someone, or assigned to a job
    LOST = "LOST"  # died / missed its heartbeat deadline: fenced
    CLOSED = "CLOSED"  # shut down on purpose


_ALIVE = (WState.STARTING, WState.IDLE, WState.BUSY)


#: how long a closed task stream waits for its worker process to exit (to say how it ended)
STREAM_CLOSE_GRACE_S = 2.0


def tail(path: Path | None, lines: int = 15) -> str:
    """The last lines of a worker's log (for error messages)."""
    if path is None or not path.exists():
        return ""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def exit_reason(code: int) -> str:
    """Why a worker process ended, from its exit status (negative: the signal that ended it)."""
    if code >= 0:
        return f"the worker process exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = " (kill -9, or the kernel's out-of-memory killer)" if -code == signal.SIGKILL else ""
    return f"the worker process was killed by {name}{hint}"


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _PROC:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _runs_worker(pid: int | None, worker_id: str) -> bool:
    """Whether ``pid`` is the live worker process ``worker_id`` (trusted where there is no /proc)."""
    if not _alive(pid):
        return False
    if not _PROC:
        return True
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"lockgate.server.worker" in args and worker_id.encode() in args


class WorkerHandle:
    """One worker process."""

    def __init__(self, worker_id: str, master: str, log_path: Path | None):
        self.id = worker_id
        self.master = master
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.state = WState.STARTING
        self.reserved_for: str | None = None  # who waits for this starting worker
        self.job: str | None = None
        self.generation = 0
        self.spawned = time.monotonic()
        self.connected = False
        self.last_seen: float | None = None
        self.idle_since = time.monotonic()
        self.status = "starting"
        self.hello: Any = None
        self.lost_reason: str | None = None
        self.lost_at: float | None = None
        self.tasks: queue.Queue[Any] = queue.Queue()
        self.pending: dict[int, Any] = {}
        self.cycles_sent = 0  # a worker that never ran a cycle can go back to the pool
        #: adopted from a controller that went away (no Popen here: pid and group come from its hello)
        self.adopted = False
        self.pgid: int | None = None
        #: the job an adopted worker ran before (a recovery of that job prefers it), or the job
        #: whose run a kept worker ended
        self.last_job: str | None = None
        self.forgotten = False  # its record under <home>/run/workers is removed

    @property
    def kept_for(self) -> str | None:
        """The job an idle worker that ran cycles waits for (see :meth:`WorkerPool.give_back`):
        it takes that job's next run and no other job's. None for any other worker."""
        return self.last_job if self.state == WState.IDLE and self.cycles_sent > 0 else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else (self.hello.pid if self.hello else None)

    def describe(self) -> str:
        adopted = ", adopted" if self.adopted else ""
        return f"worker {self.id} (pid {self.pid}, generation {self.generation}{adopted})"

    def ended(self) -> str | None:
        """How the worker process ended (:func:`exit_reason`); None while it runs."""
        code = self.proc.poll() if self.proc is not None else None
        if code is not None:
            return exit_reason(code)
        if self.adopted and self.gone():
            return "the adopted worker process exited"
        return None

    def gone(self) -> bool:
        """Whether the worker process has exited."""
        if self.proc is not None:
            return self.proc.poll() is not None
        return not _alive(self.pid)


class WorkerPool:
    """All workers of a controller."""

    def __init__(self, config: ServerConfig, advertise: str | None = None,
                 on_lost: Callable[[WorkerHandle], None] | None = None):
        self.config = config
        self.advertise = advertise or ""
        self.on_lost = on_lost or (lambda h: None)
        self.handles: dict[str, WorkerHandle] = {}
        self.cond = threading.Condition(threading.RLock())
        self._ids = itertools.count(1)
        self._requests = itertools.count(1)
        self._closing = False
        self._spawn_failures = 0
        self._next_standby_spawn = 0.0
        self.log_dir = Path(config.home) / "logs" / "workers"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(config.home) / "run" / "workers"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.orphan_grace_s = float(config.orphan_grace_s)
        self.settings = self._settings_digest()
        #: orphans of the previous controller that may call: worker id -> (pid, master, job it ran)
        self._expected: dict[str, tuple[int, str, str]] = {}
        self._adopt_until = 0.0
        self._adopt_job_until = 0.0
        self._monitor = threading.Thread(target=self._watch, name="lockgate-worker-monitor", daemon=True)
        #: the controller's metrics (set by it; a no-op without --metrics-port)
        self.metrics: MetricsRecorder = NO_METRICS
        if advertise:
            self.start(advertise)

    def start(self, advertise: str) -> None:
        """Serve workers at ``advertise`` (``unix:PATH`` or host:port): start the monitor and wait a few seconds
        for the previous controller's live orphans that call this address (a resumed job waits up to
        ``ADOPT_JOB_WAIT_S`` for the one that ran it)."""
        self.advertise = advertise
        expected = {}
        for path in self.run_dir.glob("*.json"):
            wid = path.stem
            try:
                info = json.loads(path.read_text())
                pid, controller, master = int(info["pid"]), str(info["controller"]), str(info["master"])
                job = str(info.get("job") or "")
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
                continue
            if not _runs_worker(pid, wid):
                path.unlink(missing_ok=True)  # gone long ago
            elif controller == advertise:
                expected[wid] = (pid, master, job)
        with self.cond:
            for h in self.handles.values():
                if h.adopted:
                    self._record(h)  # adopted before the address was known
            self._expected = {w: v for w, v in expected.items() if w not in self.handles}
            now = time.monotonic()
            self._adopt_until = now + ADOPT_WAIT_S if self._expected else 0.0
            self._adopt_job_until = now + ADOPT_JOB_WAIT_S if self._expected else 0.0
        if expected:
            jobs = {wid: job for wid, (_, _, job) in sorted(expected.items()) if job}
            log_event(log, "orphans_expected", workers=sorted(expected), wait_s=ADOPT_WAIT_S,
                      jobs=json.dumps(jobs), job_wait_s=ADOPT_JOB_WAIT_S)
        self._monitor.start()

    def _settings_digest(self) -> str:
        """What an adopted worker must share with this controller: the settings it was started with."""
        from ..version import __version__

        cfg = self.config
        parts = [
            sys.executable, __version__, cfg.home, str(cfg.snapshots), repr(cfg.heartbeat_interval_s),
            repr(cfg.heartbeat_timeout_s), str(cfg.tls), str(cfg.tls_ca or cfg.tls_cert or ""),
            cfg.tls_server_name or "", json.dumps(sorted(cfg.spark_conf.items())),
            json.dumps([sorted(cfg.pipelines), sorted(cfg.pipeline_modules), cfg.allow_any_pipeline]),
        ]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]

    def _record(self, h: WorkerHandle) -> None:
        """Note a live worker under <home>/run/workers, for the next controller to expect it."""
        path = self.run_dir / f"{h.id}.json"
        with contextlib.suppress(OSError):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": h.pid, "controller": self.advertise, "master": h.master,
                                       "job": h.job or h.last_job or ""}))
            tmp.replace(path)

    def _forget(self, h: WorkerHandle) -> None:
        """The worker process is gone: no controller is to expect it."""
        if h.forgotten:
            return
        h.forgotten = True
        with contextlib.suppress(OSError):
            (self.run_dir / f"{h.id}.json").unlink(missing_ok=True)

    # -- spawning ----------------------------------------------------------------------
    def _spawn(self, master: str, reserved_for: str | None, for_job: bool = False) -> WorkerHandle:
        """A new worker process on ``master`` (``for_job``: a job's run needs it now)."""
        with self.cond:
            if self._closing:
                raise WorkerStartError("the controller is shutting down")
            alive = [h for h in self.handles.values() if h.state in _ALIVE]
            kept = [h for h in alive if h.state == WState.IDLE and h.kept_for is not None]
            freed_here = False
            if len(alive) >= self.config.max_workers and kept:
                # a worker kept for some job's next run makes room for a run that needs one now
                oldest = min(kept, key=lambda h: h.idle_since)
                self.release(oldest, "its place is needed (--max-workers)")
                alive.remove(oldest)
                kept.remove(oldest)
                freed_here = oldest.master == master
            on_cluster = [h for h in kept if h.master == master]
            if for_job and not freed_here and on_cluster and holds_cluster_cores(master):
                # its application holds executors on the cluster until it ends, and a cluster that
                # is full would keep the new worker's application waiting for cores until then (a
                # compile or a standby does not count: a job's next run would lose its kept worker)
                oldest = min(on_cluster, key=lambda h: h.idle_since)
                self.release(oldest, f"a new worker needs the cores its application holds on {master}")
                alive.remove(oldest)
            if len(alive) >= self.config.max_workers:
                raise ResourceExhaustedError(
                    f"the controller runs {len(alive)} workers, its limit (--max-workers "
                    f"{self.config.max_workers}); stop a job or raise the limit"
                )
            wid = f"w{next(self._ids)}-{uuid.uuid4().hex[:8]}"
            h = WorkerHandle(wid, master, self.log_dir / f"{wid}.log")
            h.reserved_for = reserved_for
            self.handles[wid] = h
        cfg = self.config
        cmd = [
            sys.executable, "-m", "lockgate.server.worker",
            "--controller", self.advertise,
            "--worker-id", wid,
            "--spark-master", master,
            "--home", cfg.home,
            "--snapshots", str(cfg.snapshots),
            "--heartbeat-interval", str(cfg.heartbeat_interval_s),
            "--heartbeat-timeout", str(cfg.heartbeat_timeout_s),
            "--parent-pid", str(os.getpid()),
            "--orphan-grace", str(self.orphan_grace_s),
            "--settings", self.settings,
        ]
        if cfg.tls:
            cmd += ["--tls", "--tls-ca", cfg.tls_ca or str(cfg.tls_cert), "--tls-server-name", cfg.tls_name()]
        for k, v in sorted(cfg.spark_conf.items()):
            cmd += ["--spark-conf", f"{k}={v}"]
        for folder in cfg.pipelines:  # the worker checks every reference again before it imports it
            cmd += ["--pipelines", folder]
        for prefix in cfg.pipeline_modules:
            cmd += ["--pipeline-modules", prefix]
        if cfg.allow_any_pipeline and not cfg.confined:
            cmd.append("--allow-any-pipeline")
        if reserved_for is None:
            cmd.append("--warm-up")  # a standby: pay Spark's first-query costs before it is needed
        env = worker_env()  # the token: a pipe, read and closed at start
        token_r, token_w = os.pipe() if cfg.token else (-1, -1)
        if cfg.token:
            cmd += ["--token-fd", str(token_r)]
        assert h.log_path is not None
        try:
            with open(h.log_path, "ab") as out:
                h.proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True, cwd=cfg.home, pass_fds=(token_r,) if cfg.token else (),
                )
        except OSError as err:
            with self.cond:
                h.state = WState.LOST
                h.lost_reason = f"cannot start a worker process: {err}"
            raise WorkerStartError(h.lost_reason) from err
        finally:
            if cfg.token:
                os.close(token_r)
                self._send_token(token_w, cfg.token)
        self._record(h)
        log_event(log, "worker_spawned", worker=wid, pid=h.proc.pid, master=master, log=str(h.log_path))
        return h

    @staticmethod
    def _send_token(fd: int, token: str) -> None:
        """Write the token to the worker's pipe and close it (a worker that died reads nothing)."""
        data = token.encode()
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass
        finally:
            os.close(fd)

    # -- taking workers ----------------------------------------------------------------
    def take(self, master: str, job: str, stop: threading.Event | None = None) -> WorkerHandle:
        """A connected worker on ``master``, now BUSY for ``job`` (from the pool, or a new one)."""
        h = self._acquire(master, job, job, stop, f"for job '{job}'")
        self.assign_job(h, job)
        return h

    def assign_job(self, h: WorkerHandle, job: str) -> None:
        """``h`` runs ``job`` (named once its pipeline is compiled, when the run did not name it):
        noted for a next controller, which waits longer for the orphan that ran a job."""
        with self.cond:
            h.job = job
            self._record(h)

    def _acquire(self, master: str, purpose: str, job: str | None, stop: threading.Event | None,
                 why: str) -> WorkerHandle:
        """An idle worker (an orphan being adopted is waited for), a starting one, or a new one;
        connected and BUSY."""
        with self.cond:
            h = self._idle(master, job)
            # while orphans may still call, wait for one at all, and for a job for the one that
            # ran it (still cancelling its round, it often calls after an idle standby)
            while (h is None or (job is not None and h.last_job != job)) and self._adoption_pending(master, job) \
                    and not (stop is not None and stop.is_set()):
                self.cond.wait(0.1)
                h = self._idle(master, job)
            if h is None:
                h = self._starting(master)
                if h is not None:
                    h.reserved_for = purpose
            else:
                if h.kept_for is not None:
                    log_event(log, "worker_reused", worker=h.id, job=h.kept_for)
                h.state = WState.BUSY
        if h is None:
            h = self._spawn(master, reserved_for=purpose, for_job=job is not None)
        self._wait_connected(h, stop, why)
        with self.cond:
            h.state = WState.BUSY
            h.reserved_for = None
        return h

    def _idle(self, master: str, job: str | None = None) -> WorkerHandle | None:
        """An idle worker on ``master``; for a job, the one kept after its last run, or the one
        that ran it before its controller went away, when there is one. A worker kept for a job
        is never given to another job or to a compile."""
        found = None
        for h in self.handles.values():
            if h.state != WState.IDLE or h.master != master:
                continue
            if h.kept_for is not None:
                if job is not None and h.kept_for == job:
                    return h
                continue
            if job is not None and h.last_job == job:
                return h
            found = found or h
        return found

    def _adoption_pending(self, master: str, job: str | None = None) -> bool:
        """Whether orphans on ``master`` of the previous controller may still call (for a few
        seconds), or, for ``job``, the live orphan that ran it (for up to ``ADOPT_JOB_WAIT_S``)."""
        if not self._expected:
            return False
        now = time.monotonic()
        if now < self._adopt_until and any(m == master for _, m, _ in self._expected.values()):
            return True
        return (job is not None and now < self._adopt_job_until
                and any(m == master and j == job for _, m, j in self._expected.values()))

    def _starting(self, master: str) -> WorkerHandle | None:
        for h in self.handles.values():
            if h.state == WState.STARTING and h.master == master and h.reserved_for is None:
                return h
        return None

    def _wait_connected(self, h: WorkerHandle, stop: threading.Event | None, purpose: str) -> None:
        with self.cond:
            while not (h.connected and h.state in (WState.IDLE, WState.BUSY)):
                if h.state in (WState.LOST, WState.CLOSED):
                    log_tail = tail(h.log_path)
                    raise WorkerStartError(
                        f"{h.describe()} on {h.master} {purpose} did not start: {h.lost_reason}"
                        + (f"; its log ({h.log_path}) ends with:\n{log_tail}" if log_tail else "")
                    )
                if stop is not None and stop.is_set():
                    h.reserved_for = None
                    raise WorkerStartError(f"stop requested while {h.describe()} was starting")
                self.cond.wait(0.2)

    def compile(self, master: str, pipeline: str) -> Any:
        """Compile ``pipeline`` on an idle worker (started when there is none); the worker
        goes back to the pool. Returns the CompileDoneRequest."""
        h = self._acquire(master, "compile", None, None, "to compile")
        try:
            rid = self.next_request_id()
            done = self.load_call(
                h, rid, wpb.WorkerTask(compile=wpb.Compile(request_id=rid, pipeline=pipeline)), pipeline,
                timeout=self.config.compile_timeout_s,
            )
        finally:
            with self.cond:
                if h.state == WState.BUSY:
                    h.state = WState.IDLE
                    h.idle_since = time.monotonic()
                self.cond.notify_all()
        return done

    def load_call(self, h: WorkerHandle, request_id: int, task: Any, pipeline: str, timeout: float | None) -> Any:
        """:meth:`call` for a task that imports ``pipeline`` (a compile, a job's assignment).

        A worker process that ends on its own meanwhile, with an exit status or by SIGABRT
        (``os._exit()``, ``os.abort()``, ``sys.exit()`` at import), was ended by the pipeline:
        PipelineLoadError naming it, which no restart retries. The pool starts a standby in
        its place at once. A worker killed by another signal (kill -9, the OOM killer) or
        that missed its heartbeats stays WorkerLostError, which a run retries."""
        try:
            return self.call(h, request_id, task, timeout=timeout)
        except WorkerLostError as err:
            code = None
            if h.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = h.proc.wait(STREAM_CLOSE_GRACE_S)
            if code is None or (code < 0 and code != -signal.SIGABRT):
                raise
            with self.cond:
                self._next_standby_spawn = 0.0  # the lost worker's place is taken at once
            raise PipelineLoadError(
                f"the pipeline {pipeline!r} ended the worker process that was importing it ({exit_reason(code)}): "
                "a pipeline file must not exit or abort the process at import (os._exit(), os.abort(), "
                "sys.exit()); fix the file, then run again. A new worker takes the lost one's place."
            ) from err

    # -- requests ------------------------------------------------------------------------
    def next_request_id(self) -> int:
        return int(time.time() * 1000) * 1000 + next(self._requests) % 1000

    def send(self, h: WorkerHandle, task: Any) -> None:
        h.tasks.put(task)

    def call(
        self,
        h: WorkerHandle,
        request_id: int,
        task: Any,
        timeout: float | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> Any:
        """Send ``task`` and wait for the report answering ``request_id``.

        Raises WorkerLostError as soon as the worker is lost (dead, deadline missed)."""
        t0 = time.monotonic()
        with self.cond:
            if h.state in (WState.LOST, WState.CLOSED):
                raise WorkerLostError(f"{h.describe()} is lost: {h.lost_reason}")
            h.pending[request_id] = None
        h.tasks.put(task)
        try:
            while True:
                with self.cond:
                    answer = h.pending.get(request_id)
                    if answer is not None:
                        return answer
                    if h.state in (WState.LOST, WState.CLOSED):
                        raise WorkerLostError(f"{h.describe()} lost: {h.lost_reason}")
                    self.cond.wait(0.1)
                if on_wait is not None:
                    on_wait()
                if timeout is not None and time.monotonic() - t0 > timeout:
                    self.mark_lost(h, f"no answer to request {request_id} within {timeout:g}s")
        finally:
            with self.cond:
                h.pending.pop(request_id, None)

    # -- the worker side of the protocol --------------------------------------------------
    def _known(self, worker_id: str, generation: int, what: str) -> WorkerHandle:
        h = self.handles.get(worker_id)
        if h is None:
            raise FencedError(
                f"{what} refused: worker {worker_id} is not a worker of this controller (a controller restarted "
                "since it was started, or it was never started here); it must stop"
            )
        if h.state in (WState.LOST, WState.CLOSED):
            raise FencedError(
                f"{what} refused: {h.describe()} was replaced ({h.lost_reason or 'shut down'}); "
                "it is fenced and must stop"
            )
        if generation and h.generation and generation != h.generation:
            raise FencedError(
                f"{what} refused: generation {generation} of worker {worker_id} is fenced, the job is at "
                f"generation {h.generation}"
            )
        return h

    def register_connection(self, hello: Any) -> WorkerHandle:
        """WorkerConnect: a spawned worker connected, or an orphan asks to be adopted; raises
        FencedError for a stranger (and for an orphan this controller does not adopt)."""
        with self.cond:
            if hello.adopted and hello.worker_id not in self.handles:
                h = self._adopt(hello)
            else:
                h = self._known(hello.worker_id, hello.generation, "WorkerConnect")
            if h.connected:
                raise FencedError(f"WorkerConnect refused: worker {hello.worker_id} is connected already")
            h.tasks.put(wpb.WorkerTask(welcome=wpb.Welcome(adopted=h.adopted)))
            h.connected = True
            h.hello = hello
            h.last_seen = time.monotonic()
            h.idle_since = time.monotonic()
            if h.state == WState.STARTING:
                h.state = WState.IDLE if h.reserved_for is None else WState.BUSY
            self._spawn_failures = 0
            self.cond.notify_all()
        if h.adopted:
            log_event(log, "worker_adopted", worker=h.id, pid=hello.pid, address=hello.address, slots=hello.slots,
                      master=hello.spark_master, app=hello.spark_app_id, last_job=hello.last_job,
                      orphaned_s=round(hello.orphaned_s, 2))
        else:
            log_event(log, "worker_connected", worker=h.id, pid=hello.pid, address=hello.address,
                      slots=hello.slots, master=hello.spark_master, app=hello.spark_app_id,
                      startup_s=round(time.monotonic() - h.spawned, 2))
        return h

    def _adopt(self, hello: Any) -> WorkerHandle:
        """A handle for an orphan of another controller (an idle worker from now on), or
        FencedError (ABORTED: the orphan exits) when this controller cannot take it."""
        wid = hello.worker_id
        self._expected.pop(wid, None)
        why = None
        alive = [h for h in self.handles.values() if h.state in _ALIVE]
        if self._closing:
            why = "the controller is shutting down"
        elif hello.settings != self.settings:
            why = ("it was started with other settings than this controller's (home, snapshots, --spark-conf, "
                   "TLS, heartbeats, Python or Lockgate version)")
        elif len(alive) >= self.config.max_workers:
            why = f"the controller runs {len(alive)} workers, its limit (--max-workers {self.config.max_workers})"
        elif not _runs_worker(hello.pid, wid):
            why = f"no process {hello.pid} on this machine runs worker {wid}"
        if why is not None:
            log_event(log, "adoption_refused", worker=wid, pid=hello.pid, reason=why)
            raise FencedError(f"WorkerConnect refused: orphan worker {wid} is not adopted: {why}; it must stop")
        log_path = self.log_dir / f"{wid}.log"
        h = WorkerHandle(wid, hello.spark_master, log_path if log_path.exists() else None)
        h.adopted = True
        h.hello = hello
        h.pgid = hello.pgid if hello.pgid == hello.pid else None
        h.last_job = hello.last_job or None
        h.state = WState.IDLE
        self.handles[wid] = h
        self._record(h)
        self.metrics.worker_adopted()
        return h

    def tasks_of(self, h: WorkerHandle, is_active: Callable[[], bool]) -> Iterator[Any]:
        """The task stream of a connected worker; ends when the worker is released or lost."""
        while True:
            try:
                task = h.tasks.get(timeout=0.5)
            except queue.Empty:
                if not is_active() or h.state in (WState.LOST, WState.CLOSED):
                    return
                continue
            if task is None:
                return
            yield task

    def stream_closed(self, worker_id: str) -> None:
        """A worker's task stream ended: the worker is lost. Called on gRPC's serving thread,
        which must not wait, so the reason is found (and the loss marked) on a thread of its own."""
        h = self.handles.get(worker_id)
        if h is not None and h.state in _ALIVE:
            threading.Thread(target=self._stream_lost, args=(h,), name=f"lost-{worker_id}", daemon=True).start()

    def _stream_lost(self, h: WorkerHandle) -> None:
        # a dying process closes its socket just before it exits: give the exit a moment so the
        # reason says which of the two happened (and how the process ended)
        deadline = time.monotonic() + STREAM_CLOSE_GRACE_S
        while (ended := h.ended()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if ended is None:
            self.mark_lost(h, "its task stream closed while its process still runs (the connection to the "
                              "controller broke)")
            return
        log_tail = tail(h.log_path, 8)
        self.mark_lost(h, f"its task stream closed: {ended}"
                          + (f"; its log ({h.log_path}) ends with:\n{log_tail}" if log_tail else ""))

    def heartbeat(self, req: Any) -> None:
        """A worker is alive. A kept worker handed to its job's next run heartbeats with the
        previous run's generation until that run's first task reaches it: such a heartbeat
        is stale, not fenced (it changes nothing but the worker's liveness). Any other
        generation that is not the handle's is refused."""
        with self.cond:
            h = self.handles.get(req.worker_id)
            stale = (h is not None and h.state in _ALIVE and h.connected
                     and 0 < req.generation < h.generation)
            if not stale:
                h = self._known(req.worker_id, req.generation, "heartbeat")
                h.status = req.status
            h.last_seen = time.monotonic()

    def report(self, req: Any, what: str) -> None:
        with self.cond:
            h = self._known(req.worker_id, req.generation, what)
            h.last_seen = time.monotonic()
            if req.request_id not in h.pending:
                raise FencedError(f"{what} refused: {h.describe()} has no open request {req.request_id}")
            h.pending[req.request_id] = req
            self.cond.notify_all()

    # -- loss and shutdown -----------------------------------------------------------------
    def mark_lost(self, h: WorkerHandle, reason: str) -> None:
        with self.cond:
            if h.state in (WState.LOST, WState.CLOSED):
                return
            was = h.state
            h.state = WState.LOST
            h.lost_reason = reason
            h.lost_at = time.monotonic()
            h.tasks.put(None)
            self.cond.notify_all()
            if was == WState.STARTING and not h.connected:
                self._spawn_failures += 1
        log_event(log, "worker_lost", worker=h.id, pid=h.pid, job=h.job, generation=h.generation, reason=reason)
        if self.config.kill_lost_workers:
            self._kill(h)
        with contextlib.suppress(Exception):
            self.on_lost(h)

    def _kill(self, h: WorkerHandle) -> None:
        """SIGKILL the worker's process group (its JVM and Spark's Python workers are in it)."""
        if h.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(h.proc.pid, signal.SIGKILL)
            return
        pid = h.pid
        if not h.adopted or not pid:
            return
        if _alive(pid) and not _runs_worker(pid, h.id):
            return  # its pid belongs to another process now; its group, if any, cannot be ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if h.pgid:
                os.killpg(h.pgid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)

    @staticmethod
    def _wait_gone(h: WorkerHandle, timeout: float) -> None:
        if h.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                h.proc.wait(max(0.0, timeout))
            return
        deadline = time.monotonic() + timeout
        while not h.gone() and time.monotonic() < deadline:
            time.sleep(0.1)

    def give_back(self, h: WorkerHandle, reason: str, keep_for: str | None = None) -> None:
        """Return a worker that only compiled (it ran no cycle: its session is as new) to the
        pool. A worker that ran cycles of ``keep_for``, whose run ended cleanly, waits idle for
        that job's next run (``worker_keep_s``): a queued DAG run of the job then starts on a
        worker that has its pipeline imported and Spark's code for it compiled. Any other
        worker is shut down."""
        with self.cond:
            if h.state == WState.BUSY and not self._closing and h.connected:
                keep = h.cycles_sent > 0 and keep_for is not None and self.config.worker_keep_s > 0
                if h.cycles_sent == 0 or keep:
                    h.state = WState.IDLE  # kept (kept_for) when it ran cycles
                    h.last_job = keep_for if keep else h.last_job
                    h.job = None
                    h.generation = 0
                    h.idle_since = time.monotonic()
                    self.cond.notify_all()
                    log_event(log, "worker_kept" if keep else "worker_returned", worker=h.id, reason=reason,
                              job=keep_for if keep else None)
                    return
        self.release(h, reason)

    def release(self, h: WorkerHandle, reason: str = "run ended") -> None:
        """Shut a worker down (a worker that ran cycles is reused only by its own job: give_back)."""
        with self.cond:
            if h.state in (WState.LOST, WState.CLOSED):
                return
            h.state = WState.CLOSED
            h.lost_reason = f"shut down: {reason}"
            h.tasks.put(wpb.WorkerTask(shutdown=wpb.Shutdown(reason=reason)))
            h.tasks.put(None)
            self.cond.notify_all()
        log_event(log, "worker_released", worker=h.id, pid=h.pid, reason=reason)

        def reap() -> None:
            if h.proc is None and not h.adopted:
                return
            self._wait_gone(h, 20)
            self._kill(h)  # the JVM and any Python workers of Spark
            self._wait_gone(h, 5)
            if h.gone():
                self._forget(h)

        threading.Thread(target=reap, name=f"lockgate-reap-{h.id}", daemon=True).start()

    def close(self) -> None:
        self._closing = True
        with self.cond:
            handles = list(self.handles.values())
        for h in handles:
            self.release(h, "controller shutting down")
        deadline = time.monotonic() + 10
        for h in handles:
            if h.proc is not None or h.adopted:
                self._wait_gone(h, max(0.1, deadline - time.monotonic()))
                self._kill(h)
        for h in handles:
            self._wait_gone(h, 2)
            if h.gone():
                self._forget(h)

    # -- the monitor -------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closing:
            try:
                self._check()
            except Exception:  # the monitor must survive anything
                log.exception("worker monitor failed")
            time.sleep(0.1)

    def _check(self) -> None:
        now = time.monotonic()
        cfg = self.config
        lost: list[tuple[WorkerHandle, str]] = []
        release: list[WorkerHandle] = []
        with self.cond:
            for wid, (pid, _, job) in list(self._expected.items()):
                # an orphan that exited meanwhile is not waited for, nor one past its wait
                if now >= (self._adopt_job_until if job else self._adopt_until) or not _runs_worker(pid, wid):
                    del self._expected[wid]
                    self.cond.notify_all()
            for h in list(self.handles.values()):
                if h.state in (WState.LOST, WState.CLOSED):
                    gone = h.gone()  # reaps a child
                    if gone:
                        self._forget(h)
                    if h.lost_at is not None and now - h.lost_at > 300 and gone:
                        del self.handles[h.id]
                    continue
                ended = h.ended()
                if ended is not None:
                    lost.append((h, ended))
                elif h.last_seen is not None and now - h.last_seen > cfg.heartbeat_timeout_s:
                    self.metrics.heartbeat_missed()
                    lost.append((h, f"missed the heartbeat deadline: no heartbeat for {now - h.last_seen:.1f}s "
                                    f"(timeout {cfg.heartbeat_timeout_s:g}s)"))
                elif not h.connected and now - h.spawned > cfg.worker_start_timeout_s:
                    lost.append((h, f"did not connect within {cfg.worker_start_timeout_s:g}s"))
                elif h.state == WState.IDLE and h.kept_for is not None:
                    if now - h.idle_since > cfg.worker_keep_s:
                        release.append(h)
                elif (h.state == WState.IDLE and now - h.idle_since > cfg.worker_idle_timeout_s
                      and self._standby_count(h.master) > self._standby_target(h.master)):
                    release.append(h)
        for h, reason in lost:
            self.mark_lost(h, reason)
        for h in release:
            idle = cfg.worker_keep_s if h.kept_for is not None else cfg.worker_idle_timeout_s
            self.release(h, f"idle for {idle:g}s" + (f" after its run of job '{h.kept_for}'" if h.kept_for else ""))
        self._refill()

    def _standby_target(self, master: str) -> int:
        return self.config.standby_workers if master == self.config.spark_master else 0

    def _standby_count(self, master: str) -> int:
        return sum(
            1 for h in self.handles.values()
            if h.master == master and h.kept_for is None
            and (h.state == WState.IDLE or (h.state == WState.STARTING and h.reserved_for is None))
        )

    def _refill(self) -> None:
        master = self.config.spark_master
        with self.cond:
            missing = self._standby_target(master) - self._standby_count(master)
            if missing <= 0 or time.monotonic() < self._next_standby_spawn or self._closing \
                    or self._adoption_pending(master):
                return
            # a standby that keeps dying before it connects (no Java, a wrong master) must not spin
            self._next_standby_spawn = time.monotonic() + min(60.0, 0.5 * 2 ** min(self._spawn_failures, 7))
        try:
            self._spawn(master, reserved_for=None)
        except (ResourceExhaustedError, WorkerStartError, InvalidArgumentError) as err:
            log_event(log, "standby_not_started", reason=str(err))

    # -- inspection ------------------------------------------------------------------------
    def workers(self) -> list[WorkerHandle]:
        with self.cond:
            return list(self.handles.values())
