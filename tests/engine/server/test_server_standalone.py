"""A pipeline run by a controller whose workers run their Spark work on a real Spark
standalone cluster (a master and one worker started here from the installed PySpark, on
127.0.0.1): the output is exactly the embedded run's."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.slow


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster(tmp_path, srv):
    spark_home = Path(pyspark.__file__).resolve().parent
    spark_class = str(spark_home / "bin" / "spark-class")
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(tmp_path / "spark-work"),
           "SPARK_LOG_DIR": str(tmp_path / "spark-logs")}
    port, web, wweb = srv.free_port(), srv.free_port(), srv.free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"spark-{name}.log" for name in ("master", "worker")}

    def start(name: str, args: list[str]) -> None:
        with open(logs[name], "wb") as fh:
            procs.append(subprocess.Popen([spark_class, *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))

    try:
        start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(web)])
        srv.wait_for(lambda: _port_open(port), 180, "the Spark master")
        start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                         "--memory", "1g", "--webui-port", str(wweb), url])
        srv.wait_for(lambda: "Registering worker" in logs["master"].read_text(errors="replace"), 180,
                     "the Spark worker to register")
        yield url, tmp_path / "spark-work", logs
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def test_run_on_a_spark_standalone_cluster(srv, make_controller, reference, tmp_path, cluster):
    url, work_dir, logs = cluster
    events_n = 8000
    first, last = srv.FIRST, srv.FIRST + srv.windows(events_n) - 1
    ctl = make_controller("cluster", args=(
        "--spark-master", url, "--standby-workers", "0",
        "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.cores.max=1",
    )).start()
    client = ctl.client()
    ref, out = srv.write_pipeline(tmp_path / "pipe", "srv", events_n)
    events = srv.Events()
    t0 = time.monotonic()
    res = client.run(ref, job="on_cluster", first=first, last=last, on_event=events)
    assert res.state == "FINISHED" and res.windows_run == srv.windows(events_n), res
    assert srv.outputs(client.read_sink, "on_cluster", out) == reference(events_n)

    started = next(e for _, e in events.items if e.kind == "worker_started")
    assert f"on {url}" in started.message and "app app-" in started.message, started.message
    # the cycles ran in executors of the standalone cluster's worker
    apps = [p for p in work_dir.iterdir() if p.name.startswith("app-")]
    assert apps, f"no application ran on the cluster's worker ({work_dir})"
    assert any((p / "0" / "stderr").exists() for p in apps)
    assert "Registered app lockgate-" in logs["master"].read_text(errors="replace")
    print(f"\nrun on the standalone cluster: {time.monotonic() - t0:.1f}s")

    # a graph computation and a traversal run their iteration cycles on the cluster as well. The
    # first job's worker, kept for its next run, holds the cluster's one core: the new job's worker
    # gets it because the kept one is released (not after --worker-keep's 120 s)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
    from graphref import GRAPH_WINDOW, check_graph_outputs, write_graph_pipeline

    graph_ref, edges, starts = write_graph_pipeline(tmp_path / "pipe" / "graph")
    res = client.run(graph_ref, job="graph_on_cluster", first=GRAPH_WINDOW, last=GRAPH_WINDOW)
    assert res.state == "FINISHED", res
    assert f"a new worker needs the cores its application holds on {url}" in ctl.log_text()
    check_graph_outputs(client.read_sink, "graph_on_cluster", edges, starts)
    assert client.list_supersteps("graph_on_cluster", GRAPH_WINDOW)[-1].halted_by is not None
    client.close()
