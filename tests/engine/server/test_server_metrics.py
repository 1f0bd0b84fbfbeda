"""A controller's Prometheus metrics, scraped by a real Prometheus (Debian's ``prometheus``).

One controller (``lockgate server --metrics-port``) runs a job in two runs of windows while
a Prometheus server on loopback scrapes it every second; the series are read back through
Prometheus' HTTP API, and must move as the rounds commit: 2 rounds after the first run, 5
after the second, each round's phases, rows, state and checkpoint bytes, the workers and
the gRPC requests. Then the controller's endpoint is checked for what Prometheus does not
show: no window id in any label.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from loopback import free_port, wait_for

pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus")
JOB = "metered"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


class Prometheus:
    """A Prometheus server on loopback scraping one target every second."""

    def __init__(self, root: Path, target: str):
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: lockgate\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = root / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={self.root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.root / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=fh, stderr=subprocess.STDOUT, cwd=self.root)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log.read_text()[-2000:]}",
                            pytrace=False)
            try:
                return urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200
            except OSError:
                return False

        wait_for(ready, 30, "Prometheus to be ready")
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` (through /api/v1/query)."""
        body = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed (apt-get install "
                    "prometheus; scripts/setup.sh installs it): no real scrape to test against")
def test_prometheus_scrapes_a_controller_running_a_job(srv: Any, make_controller: Any, tmp_path: Path) -> None:
    FIRST = srv.FIRST
    metrics_port = free_port()
    ctl = make_controller("metrics", args=("--metrics-port", str(metrics_port), "--standby-workers", "0")).start()
    assert f"Prometheus metrics at http://127.0.0.1:{metrics_port}/metrics" in ctl.log_text()
    prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{metrics_port}").start()
    try:
        wait_for(lambda: prom.value('up{job="lockgate"}') == 1.0, 30, "Prometheus to scrape the controller")
        ref, _ = srv.write_pipeline(tmp_path / "pipe", name="metered", events=12_000)
        client = ctl.client()
        rounds = f'lockgate_rounds_committed_total{{job_name="{JOB}"}}'

        first = client.run(ref, job=JOB, first=FIRST, last=FIRST + 1, catchup="off")
        assert first.windows_run == 2
        wait_for(lambda: prom.value(rounds) == 2.0, 30, "Prometheus to see 2 committed rounds")
        assert prom.value(f'lockgate_last_window{{job_name="{JOB}"}}') == FIRST + 1
        rows_after_first = prom.value(f'lockgate_rows_in_total{{job_name="{JOB}"}}')
        assert rows_after_first == first.rows_in > 0

        second = client.run(ref, job=JOB, first=FIRST + 2, last=FIRST + 4, catchup="off")
        assert second.windows_run == 3
        wait_for(lambda: prom.value(rounds) == 5.0, 30, "Prometheus to see 5 committed rounds")
        # the series moved with the rounds: the counter's history holds 2 before 5
        history = prom.query(f"{rounds}[5m]")[0]["values"]
        seen = [float(v) for _, v in history]
        assert seen == sorted(seen) and 2.0 in seen and seen[-1] == 5.0, seen
        assert prom.value(f'lockgate_last_window{{job_name="{JOB}"}}') == FIRST + 4
        # each checkpoint says what each sink committed (through gRPC: lineage's output statistics)
        last_cp = client.list_checkpoints(JOB)[-1]
        assert set(last_cp.sink_rows) == {"auctions_out", "auction_files", "bidders_out"}
        assert sum(last_cp.sink_rows.values()) == last_cp.rows_out > 0
        assert prom.value(f'lockgate_rows_in_total{{job_name="{JOB}"}}') == first.rows_in + second.rows_in
        assert prom.value(f'lockgate_rows_out_total{{job_name="{JOB}"}}') == first.rows_out + second.rows_out
        assert prom.value(f'lockgate_rounds_failed_total{{job_name="{JOB}"}}') in (None, 0.0)
        for phase in ("read", "plan", "snapshot", "stage", "commit", "checkpoint"):
            assert prom.value(f'lockgate_round_phase_seconds_count{{job_name="{JOB}",phase="{phase}"}}') == 5.0, phase
        assert prom.value(f'lockgate_round_duration_seconds_count{{job_name="{JOB}"}}') == 5.0
        assert prom.value(f'lockgate_round_duration_seconds_sum{{job_name="{JOB}"}}') > 0
        assert prom.value(f'lockgate_checkpoint_written_bytes_sum{{job_name="{JOB}"}}') > 0
        state = {r["metric"]["operator"]: float(r["value"][1])
                 for r in prom.query(f'lockgate_state_rows{{job_name="{JOB}"}}')}
        assert state.get("bidder_totals", 0) > 0 and "auction_windows" in state, state
        assert prom.value(f'sum(lockgate_state_bytes{{job_name="{JOB}"}})') > 0
        assert prom.value(f'lockgate_job_state{{job_name="{JOB}",state="FINISHED"}}') == 1.0
        assert prom.value(f'lockgate_job_state{{job_name="{JOB}",state="RUNNING"}}') == 0.0
        # the second run resumed from the first one's checkpoint
        assert prom.value(f'lockgate_restores_total{{job_name="{JOB}",reason="resume"}}') == 1.0
        lag = prom.value(f'lockgate_event_time_lag_seconds{{job_name="{JOB}"}}')
        assert lag is not None and lag > 0  # the data is from 2026-01-01: behind the clock
        assert prom.value(f'lockgate_last_commit_age_seconds{{job_name="{JOB}"}}') >= 0
        # per controller
        assert prom.value("sum(lockgate_workers)") >= 1
        # a Run stream is counted when it ends, after its client has the result: a scrape or two later
        wait_for(lambda: prom.value('lockgate_grpc_requests_total{method="Run",code="OK"}') == 2.0, 20,
                 "both Run streams to be counted OK")
        assert prom.value('sum(lockgate_grpc_requests_total{service="lockgate.v1.WorkerControl",'
                          'method="Heartbeat"})') > 0
        assert prom.value("lockgate_fenced_runs_total") == 0.0

        # a rollback on purpose: counted, and the job's state (read from the catalog) moves with it
        client.restore(JOB, FIRST + 3)
        wait_for(lambda: prom.value(f'lockgate_restores_total{{job_name="{JOB}",reason="rollback"}}') == 1.0, 20,
                 "the rollback to be counted")
        wait_for(lambda: prom.value(f'lockgate_job_state{{job_name="{JOB}",state="STOPPED"}}') == 1.0, 20,
                 "the restored job to show STOPPED")
        assert prom.value(f'lockgate_job_state{{job_name="{JOB}",state="FINISHED"}}') == 0.0

        # a request the controller refuses is counted with its code
        with pytest.raises(Exception, match="not found|no job"):
            client.get_job("no_such_job")
        wait_for(lambda: prom.value('lockgate_grpc_requests_total{method="GetJob",code="NOT_FOUND"}') == 1.0, 20,
                 "the refused GetJob to be counted")
        client.close()
    finally:
        prom.stop()

    # what Prometheus does not show: every label of the endpoint is bounded (no window id anywhere)
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    windows = {str(w) for w in range(FIRST, FIRST + 5)}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert not windows & set(sample.labels.values()), (sample.name, sample.labels)


def test_a_controller_whose_metrics_port_is_taken_serves_all_the_same(tmp_path: Path) -> None:
    """The endpoint cannot bind: the controller starts, says why, answers, and still counts."""
    import socket

    import lockgate
    from lockgate.server.config import ServerConfig
    from lockgate.server.service import Server

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = Server(ServerConfig(home=str(tmp_path / "home"), port=0, standby_workers=0, metrics_port=port,
                                     allow_any_pipeline=True))
        server.start()
        try:
            assert server.exporter is not None and not server.exporter.serving
            assert "Address already in use" in (server.exporter.error or "")
            client = lockgate.connect(f"grpc://127.0.0.1:{server.port}")
            assert client.list_jobs() == []
            client.close()
            metrics = server.controller.metrics
            assert metrics.value("lockgate_grpc_requests_total", service="lockgate.v1.Controller", method="ListJobs",
                                 code="OK") == 1.0
            assert metrics.value("lockgate_workers", state="IDLE") == 0.0
        finally:
            server.stop()


def test_an_adopted_orphan_and_a_missed_heartbeat_are_counted(tmp_path: Path) -> None:
    """A worker pool (the controller's) adopts a previous controller's orphan, which then stays
    silent past the heartbeat deadline: one adoption, one missed heartbeat, the worker LOST."""
    import json
    import sys
    import time

    from lockgate.metrics import PrometheusMetrics
    from lockgate.server.config import ServerConfig
    from lockgate.server.generated import lockgate_worker_pb2 as wpb
    from lockgate.server.pool import WorkerPool

    wid, master, advertise = "w-orphan", "local[1]", "unix:" + str(tmp_path / "workers.sock")
    # a live process whose command line is a worker's, noted as the dead controller noted it
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "lockgate.server.worker",
                             "--id", wid])
    deadline = time.monotonic() + 10
    while wid.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    run_dir = tmp_path / "run" / "workers"
    run_dir.mkdir(parents=True)
    (run_dir / f"{wid}.json").write_text(json.dumps({"pid": proc.pid, "controller": advertise, "master": master,
                                                     "job": ""}))
    metrics = PrometheusMetrics(process=False)
    pool = WorkerPool(ServerConfig(home=str(tmp_path), spark_master=master, standby_workers=0,
                                   heartbeat_interval_s=0.2, heartbeat_timeout_s=1.0))
    pool.metrics = metrics
    metrics.watch_workers(lambda: [h.state.value for h in pool.workers()])
    try:
        pool.start(advertise)
        pool.register_connection(wpb.WorkerHello(worker_id=wid, pid=proc.pid, spark_master=master, adopted=True,
                                                 settings=pool.settings, orphaned_s=1.0))
        assert metrics.value("lockgate_adopted_orphans_total") == 1
        assert metrics.value("lockgate_workers", state="IDLE") == 1
        wait_for(lambda: metrics.value("lockgate_workers", state="LOST") == 1, 15, "the silent worker to be lost")
        assert metrics.value("lockgate_heartbeats_missed_total") == 1
        assert metrics.value("lockgate_workers", state="IDLE") == 0
    finally:
        proc.kill()
        proc.wait()
        pool.close()
