"""A Spark Connect server for the tests of this folder: one per module, from the PySpark wheel.

The server is ``pyspark/sbin/start-connect-server.sh --wait`` (in the foreground, in its own
process group) on a free loopback port, with ``local[2]`` inside it, PYSPARK_PYTHON set to
this interpreter (Python UDFs run with the server's Python) and Lockgate's quiet log4j2 file
at WARN (the server's log is kept beside the test's files). The fixture waits for the gRPC
port, and at the end kills the whole process group (the JVM included).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pyspark
import pytest

START_TIMEOUT_S = 180  # ~8 s on an idle machine; far more on 2 busy cores
LOG4J2 = Path(__file__).resolve().parents[3] / "engine" / "lockgate" / "conf" / "log4j2.properties"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def assert_group_gone(pgid: int, timeout: float = 20.0) -> None:
    """Every process of group ``pgid`` has ended (zombies aside)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in psutil.process_iter(["pid", "status", "name"]):
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(f"{p.pid} {p.info['name']}")
        if not alive:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"processes of group {pgid} still alive: {alive}")
        time.sleep(0.2)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it leads one) and wait until every member is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert_group_gone(proc.pid)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Spark Connect server started for this module."""
    spark_home = Path(pyspark.__file__).resolve().parent
    script = spark_home / "sbin" / "start-connect-server.sh"
    assert script.is_file(), f"{script} is missing: the pyspark wheel ships it (reinstall pyspark)"
    folder = tmp_path_factory.mktemp("connect_server")
    port = free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_PID_DIR": str(folder),  # the daemon script refuses to start if its pid file names a live JVM
        "SPARK_LOG_DIR": str(folder),
    }
    env.pop("SPARK_REMOTE", None)
    cmd = [
        "bash", str(script), "--wait",
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2} -Dlockgate.spark.log.level=WARN",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.pyspark.python={sys.executable}",
        # a static setting, so the server's to make (Lockgate sets it on local sessions itself)
        "--conf", "spark.python.sql.dataFrameDebugging.enabled=false",
    ]  # fmt: skip
    log = folder / "server.log"
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not port_open(port):
            if proc.poll() is not None:
                pytest.fail(f"the Spark Connect server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            if time.monotonic() - t0 > START_TIMEOUT_S:
                pytest.fail(f"the Spark Connect server did not open port {port} in {START_TIMEOUT_S}s:\n"
                            f"{log.read_text()[-3000:]}")
            time.sleep(0.2)
        print(f"\nSpark Connect server on 127.0.0.1:{port} in {time.monotonic() - t0:.1f}s")
        yield f"sc://127.0.0.1:{port}"
    finally:
        kill_group(proc)


@pytest.fixture(scope="session")
def group_gone() -> Callable[[int], None]:
    """:func:`assert_group_gone`, for the tests of this folder."""
    return assert_group_gone
