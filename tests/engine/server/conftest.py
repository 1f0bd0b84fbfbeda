"""Fixtures of the control-plane tests: controllers (``lockgate server``) and their workers
as real processes on loopback, a test pipeline, and its reference output from an
embedded run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow.dataset as ds
import pytest
from loopback import free_port, wait_for

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
HB_INTERVAL, HB_TIMEOUT = 1.0, 6.0

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

OUT = {out!r}

pipeline = lg.Pipeline({name!r}, cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=11, start="2026-01-01T00:00:00", max_events={events}),
    name="bids",
)
auctions = (
    bids.key_by("auction")
    .window(lg.Tumbling(timedelta(seconds=10)))
    .aggregate(bids=lg.count(), top=lg.max("price"), spent=lg.sum("price"), name="auction_windows")
)
auctions.sink(lg.CollectSink("auctions"), name="auctions_out")
auctions.sink(lg.FileSink(OUT + "/auction_files"), name="auction_files")
(
    bids.key_by("bidder")
    .aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
    .sink(lg.CollectSink("bidders"), name="bidders_out")
)
'''


def windows(events: int) -> int:
    """Cycle windows (5 s) holding ``events`` bids at 400 events/s."""
    return -(-events // 2000)


def write_pipeline(folder: Path, name: str = "srv", events: int = 8000) -> tuple[str, Path]:
    """A pipeline file whose FileSink writes under ``folder/out``; returns (reference, out)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "out"
    path = folder / f"{name}_pipe.py"
    path.write_text(PIPELINE.format(out=str(out), name=name, events=events))
    return f"{path}:pipeline", out


def _rows(table: Any) -> list[tuple]:
    return sorted((tuple(sorted(r.items())) for r in table.to_pylist()), key=repr)


def outputs(read_sink: Callable[[str, str], Any], job: str, out: Path) -> dict[str, list[tuple]]:
    """Every sink's committed rows (with lg_window), order-free."""
    res = {sink: _rows(read_sink(job, sink)) for sink in ("auctions", "bidders")}
    files = out / "auction_files"
    res["auction_files"] = _rows(ds.dataset(str(files), format="parquet", partitioning="hive").to_table()) \
        if files.exists() else []
    return res


def _references(args: list[str]) -> list[str]:
    """A test controller accepts any pipeline reference (loopback, development) unless the
    test confines them itself."""
    return [] if {"--pipelines", "--pipeline-modules"} & set(args) else ["--allow-any-pipeline"]


class ControllerProcess:
    """A ``lockgate server`` process (its own process group; workers have theirs)."""

    def __init__(self, root: Path, name: str = "ctl", catalog: str | None = None, token: str | None = None,
                 args: tuple[str, ...] = (), port: int | None = None, any_pipeline: bool = True):
        self.root = root
        self.any_pipeline = any_pipeline
        self.home = root / "home"
        self.name = name
        self.catalog = catalog
        self.token = token
        self.args = list(args)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self.url = f"grpc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.logs[-1]

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def start(self, env: dict[str, str] | None = None, timeout: float = 60) -> ControllerProcess:
        cmd = [sys.executable, "-m", "lockgate.cli.main", "server", "--home", str(self.home),
               "--port", str(self.port), "--heartbeat-interval", str(HB_INTERVAL),
               "--heartbeat-timeout", str(HB_TIMEOUT), "--restart-backoff", "0.5", "--restart-backoff-max", "4",
               *self.args, *(_references(self.args) if self.any_pipeline else [])]
        if self.catalog:
            cmd += ["--catalog", self.catalog]
        full_env = {k: v for k, v in os.environ.items() if k not in ("LOCKGATE_TOKEN", "LOCKGATE_FAULT")}
        if self.token:
            full_env["LOCKGATE_TOKEN"] = self.token
        full_env.update(env or {})
        log = self.root / f"{self.name}-{len(self.logs)}.log"
        self.logs.append(log)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env,
                                         start_new_session=True, cwd=self.root)
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"lockgate server exited with {proc.returncode}:\n{log.read_text()[-3000:]}",
                            pytrace=False)
            return "listening on" in log.read_text(errors="replace")

        wait_for(ready, timeout, "the controller to listen")
        return self

    @property
    def worker_address(self) -> str:
        """Where this controller serves its workers (``unix:PATH`` or host:port), from its log."""
        import re

        found = re.findall(r"workers at (\S+)\)", self.log_text())
        assert found, "the controller did not print its workers' address"
        return found[-1]

    def client(self, **options: Any) -> Any:
        import lockgate

        if self.token and "token" not in options:
            options["token"] = self.token
        return lockgate.connect(self.url, **options)

    def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.kill9()

    def worker_processes(self) -> list[psutil.Process]:
        """Worker processes started by this controller's home (any controller generation)."""
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                cmd = p.info["cmdline"] or []
                if "lockgate.server.worker" in cmd and str(self.home) in cmd \
                        and p.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def cleanup(self) -> list[int]:
        """Stop the controller, then kill (by pid) any worker of it still alive; returns their pids."""
        self.stop()
        left = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = self.worker_processes()
            if not left:
                return []
            time.sleep(0.5)
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        return [p.pid for p in left]


@pytest.fixture
def make_controller(tmp_path: Path) -> Iterator[Callable[..., ControllerProcess]]:
    made: list[ControllerProcess] = []

    def make(name: str = "ctl", root: Path | None = None, **kw: Any) -> ControllerProcess:
        c = ControllerProcess(root or tmp_path / name, name=name, **kw)
        made.append(c)
        return c

    yield make
    leftovers = {c.name: c.cleanup() for c in made}
    assert not any(leftovers.values()), f"worker processes outlived their controller: {leftovers}"


class Events:
    """A job's events, collected by a background thread (from Client.run's on_event or watch)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Any]] = []
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.done = threading.Event()

    def __call__(self, event: Any) -> None:
        with self.cond:
            self.items.append((time.time(), event))
            self.cond.notify_all()

    def wait(self, pred: Callable[[Any], bool], timeout: float, what: str, after: int = 0) -> tuple[int, float, Any]:
        """The first event from index ``after`` on satisfying ``pred``: (index, received at, event)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(after, len(self.items)):
                    t, e = self.items[i]
                    if pred(e):
                        return i, t, e
                left = deadline - time.monotonic()
                if left <= 0 or self.done.is_set():
                    kinds = [f"{e.kind}:{e.window}:{e.state}" for _, e in self.items[-30:]]
                    why = "the run ended" if self.done.is_set() else f"none within {timeout:.0f}s"
                    pytest.fail(f"no {what}: {why}; last events: {kinds}; error: {self.error}", pytrace=False)
                self.cond.wait(min(left, 0.5))

    def __len__(self) -> int:
        with self.cond:
            return len(self.items)

    def kinds(self) -> list[str]:
        with self.cond:
            return [e.kind for _, e in self.items]


def run_in_thread(client: Any, ref: str, **kwargs: Any) -> tuple[threading.Thread, Events, dict[str, Any]]:
    """``client.run`` in a thread; its events go to the returned Events; its result to the dict."""
    events = Events()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = client.run(ref, on_event=events, **kwargs)
        except BaseException as err:  # reported by the test
            box["error"] = events.error = err
        finally:
            events.done.set()
            with events.cond:
                events.cond.notify_all()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, events, box


@pytest.fixture(scope="session")
def srv() -> Any:
    """This module's helpers, for test files (conftest modules cannot be imported by them)."""
    import types

    return types.SimpleNamespace(
        FIRST=FIRST, HB_INTERVAL=HB_INTERVAL, HB_TIMEOUT=HB_TIMEOUT, windows=windows, write_pipeline=write_pipeline,
        outputs=outputs, wait_for=wait_for, run_in_thread=run_in_thread, Events=Events,
        ControllerProcess=ControllerProcess, free_port=free_port,
    )


_REFERENCES: dict[int, dict[str, list[tuple]]] = {}


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Callable[[int], dict[str, list[tuple]]]:
    """The output of the test pipeline run by the embedded client, uninterrupted."""
    from lockgate.client.embedded import EmbeddedClient

    def get(events: int) -> dict[str, list[tuple]]:
        if events not in _REFERENCES:
            root = tmp_path_factory.mktemp(f"reference{events}")
            ref, out = write_pipeline(root, "srv", events)
            client = EmbeddedClient(home=str(root / "home"))
            try:
                res = client.run(ref, first=FIRST, last=FIRST + windows(events) - 1)
                assert res.state == "FINISHED", res
                _REFERENCES[events] = outputs(client.read_sink, "srv", out)
            finally:
                client.close()
        return _REFERENCES[events]

    return get
