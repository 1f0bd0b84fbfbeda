"""Metrics of embedded runs (this process, the test session's SparkSession), read back from the
endpoint with prometheus_client's parser; a port that is taken and a recorder that fails do
not fail a round; the recommended alert rules pass ``promtool check rules`` and their unit
tests (``promtool test rules``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import free_port

from lockgate import metrics
from lockgate.client.embedded import EmbeddedClient
from lockgate.metrics import FAMILIES, NO_METRICS, PrometheusMetrics

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("metered_local", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=3, start="2026-01-01T00:00:00", max_events=12000),
    name="bids",
)
(
    bids.key_by("bidder")
    .aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
    .sink(lg.CollectSink("bidders"), name="bidders_out")
)
'''
#: the labels a metric may carry: each takes a bounded set of values
BOUNDED_LABELS = {"job_name", "phase", "operator", "table", "reason", "state", "service", "method", "code", "le"}
UNITS = ("_seconds", "_bytes", "_total", "_windows", "_rows", "_window", "_state", "lockgate_workers")
RULES = Path(__file__).resolve().parents[3] / "monitoring" / "prometheus"


@pytest.fixture
def pipeline_ref(tmp_path: Path) -> str:
    path = tmp_path / "metered_pipe.py"
    path.write_text(PIPELINE)
    return f"{path}:pipeline"


@pytest.fixture
def recorder() -> Iterator[None]:
    """Puts this process' recorder back as it was (metrics.serve installs one)."""
    previous = metrics.current()
    yield
    metrics.use(previous)


def test_an_embedded_run_exports_its_rounds(spark: Any, tmp_path: Path, pipeline_ref: str, recorder: None) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    exporter = metrics.serve(free_port())
    assert exporter.serving and exporter.url.startswith("http://127.0.0.1:")
    try:
        client = EmbeddedClient(home=str(tmp_path / "home"))
        res = client.run(pipeline_ref, first=FIRST, last=FIRST + 2, catchup="off")
        assert res.state == "FINISHED" and res.windows_run == 3
        text = urllib.request.urlopen(exporter.url, timeout=5).read().decode()
        # three more windows in one catch-up group, resuming from the checkpoint of the first run
        grouped = client.run(pipeline_ref, first=FIRST + 3, last=FIRST + 5, catchup="3")
        # a new process (a restarted controller) whose run of the job has committed nothing yet: the
        # job's last checkpoint stands for it, so a run stuck from its start still shows its age
        from lockgate.plan.logical import PipelineGraph

        fresh = PrometheusMetrics(process=False)
        graph = PipelineGraph.from_dict(client.get_plan("metered_local").logical)
        fresh.checkpoint_seen("metered_local", client.catalog.last_checkpoint("metered_local"), graph)
        assert fresh.value("lockgate_last_window", job_name="metered_local") == FIRST + 5
        assert fresh.value("lockgate_last_commit_age_seconds", job_name="metered_local") >= 0
        assert fresh.value("lockgate_watermark_timestamp_seconds", job_name="metered_local") == 1767225630.0
        assert fresh.value("lockgate_state_rows", job_name="metered_local", operator="bidder_totals",
                           table="main") > 0
        client.close()
        assert grouped.windows_run == 3
        recorder = metrics.current()
        assert isinstance(recorder, PrometheusMetrics)
        assert recorder.value("lockgate_catchup_groups_total", job_name="metered_local") == 1
        assert recorder.value("lockgate_catchup_group_windows_sum", job_name="metered_local") == 3
        assert recorder.value("lockgate_rounds_committed_total", job_name="metered_local") == 6
        assert recorder.value("lockgate_restores_total", job_name="metered_local", reason="resume") == 1
        assert recorder.value("lockgate_last_window", job_name="metered_local") == FIRST + 5
    finally:
        exporter.stop()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    job = {"job_name": "metered_local"}

    def value(name: str, **labels: str) -> float:
        want = {**job, **labels}
        found = [s.value for f in families.values() for s in f.samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in want.items())]
        assert len(found) == 1, (name, want, found)
        return found[0]

    assert value("lockgate_rounds_committed_total") == 3
    assert value("lockgate_rows_in_total") == res.rows_in > 0
    assert value("lockgate_rows_out_total") == res.rows_out > 0
    assert value("lockgate_rows_late_total") == res.late_rows
    assert value("lockgate_last_window") == FIRST + 2
    assert value("lockgate_round_duration_seconds_count") == 3
    assert value("lockgate_round_phase_seconds_count", phase="read") == 3
    assert value("lockgate_state_rows", operator="bidder_totals", table="main") > 0
    assert value("lockgate_state_bytes", operator="bidder_totals", table="main") > 0
    assert value("lockgate_checkpoint_written_bytes_count") == 3
    assert value("lockgate_job_state", state="FINISHED") == 1
    # the watermark is the last window's end (no lateness allowed): 2026-01-01T00:00:15Z
    assert value("lockgate_watermark_timestamp_seconds") == 1767225615.0
    assert value("lockgate_event_time_lag_seconds") > 0

    # Prometheus' conventions: the prefix, base units, _total on counters, bounded labels only
    for name, family in families.items():
        if name.startswith("process_"):
            continue
        assert name.startswith("lockgate_"), name
        spec = FAMILIES.get(name) or FAMILIES.get(f"{name}_total")
        assert spec is not None, f"{name} is not declared in lockgate.metrics.families"
        assert family.type == spec.kind, (name, family.type)
        assert (spec.kind == "counter") == spec.name.endswith("_total"), name
        assert spec.name.endswith(UNITS), name
        for sample in family.samples:
            assert set(sample.labels) <= BOUNDED_LABELS, (sample.name, sample.labels)
            assert str(FIRST) not in sample.labels.values(), sample


def test_a_taken_port_and_a_failing_recorder_fail_no_round(
    spark: Any, tmp_path: Path, pipeline_ref: str, recorder: None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lockgate.cli.main import main

    def broken(*args: Any) -> Any:
        raise RuntimeError("a state manifest the metrics cannot read")

    # the recorder fails on every round (after counting it): the rounds go on
    monkeypatch.setattr("lockgate.metrics.recorder.written_bytes", broken)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--home", str(tmp_path / "home"), "run", pipeline_ref, "--from-window", str(FIRST),
                     "--to-window", str(FIRST + 2), "--no-progress", "--metrics-port", str(port)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "FINISHED; windows" in out.out and "3 run" in out.out, out.out
    assert "no metrics endpoint (OSError: [Errno 98] Address already in use)" in out.err, out.err
    # the CLI logs to stderr (lockgate's own handler): the endpoint that did not start, the recorder's
    # failure once (not once per round)
    assert f"metrics endpoint not started: cannot listen on 127.0.0.1:{port}" in out.err, out.err
    assert out.err.count("metrics: round_committed failed") == 1, out.err
    assert "a state manifest the metrics cannot read" in out.err
    installed = metrics.current()
    assert isinstance(installed, PrometheusMetrics)  # recorded without an endpoint all the same
    assert installed.value("lockgate_rounds_committed_total", job_name="metered_local") == 3
    client = EmbeddedClient(home=str(tmp_path / "home"))
    assert client.get_job("metered_local").last_window == FIRST + 2
    client.close()


def test_no_metrics_port_records_nothing() -> None:
    assert metrics.current() is NO_METRICS or not isinstance(metrics.current(), PrometheusMetrics)
    assert NO_METRICS.enabled is False
    NO_METRICS.round_committed("j", object(), 1.0)  # a no-op: nothing to read, nothing raised


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian's prometheus package (promtool) is not "
                    "installed (apt-get install prometheus; scripts/setup.sh installs it)")
def test_the_alert_rules_pass_promtool() -> None:
    rules = RULES / "lockgate-rules.yml"
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout
    # the rules' unit tests: each alert fires on the series it is meant for, and not before
    unit = subprocess.run(["promtool", "test", "rules", "lockgate-rules.test.yml"], capture_output=True, text=True,
                          timeout=60, cwd=RULES)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "SUCCESS" in unit.stdout


def test_the_monitoring_page_lists_every_metric_and_the_rules_as_they_are() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "operations" / "monitoring.md").read_text()
    missing = [name for name in FAMILIES if f"`{name}`" not in page]
    assert not missing, f"docs/operations/monitoring.md does not list {missing}"
    rules = (RULES / "lockgate-rules.yml").read_text().rstrip()
    assert rules in page, "the monitoring page's copy of lockgate-rules.yml is not the file's text"


def test_a_fenced_run_is_counted(spark: Any, tmp_path: Path, pipeline_ref: str) -> None:
    """Two runs of one job in one process: the later takes the job over, the earlier's next round
    finds it fenced (``lockgate_fenced_runs_total``), and the later one's rounds count as usual."""
    from lockgate.errors import FencedError

    recorder = PrometheusMetrics(process=False)
    client = EmbeddedClient(home=str(tmp_path / "home"))
    try:
        earlier = client._prepared(pipeline_ref, "fenced_local", False)
        later = client._prepared(pipeline_ref, "fenced_local", False)
        earlier.metrics = later.metrics = recorder
        with pytest.raises(FencedError):
            earlier.run_windows(FIRST, FIRST)
        assert recorder.value("lockgate_fenced_runs_total") == 1
        later.run_windows(FIRST, FIRST)
        assert recorder.value("lockgate_rounds_committed_total", job_name="fenced_local") == 1
        assert recorder.value("lockgate_rounds_failed_total", job_name="fenced_local") is None  # fenced: not failed
    finally:
        client.close()
