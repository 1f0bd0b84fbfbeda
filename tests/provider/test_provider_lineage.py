"""OpenLineage from the operators that run pipelines, in real Airflow with the OpenLineage
provider (the ``lineage`` extra) and its file transport.

``airflow dags test`` (a process of its own: the OpenLineage provider reads its transport once
per process) runs a DAG whose ``run`` task runs two windows of a pipeline with two sources (a
Nexmark stream and a Parquet folder), a ``Pipeline.sql`` query and two sinks (a Parquet
folder and a PostgreSQL table), and whose ``restore`` task rolls the job back a window. The
events the file transport wrote must name exactly the pipeline's sources and sinks, by
OpenLineage's naming conventions, with their schemas, the window range and the SQL. A second
run, with a transport that cannot reach its server, must succeed all the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from loopback import free_port

from lockgate_provider.lineage import build_lineage, dataset_name

pytestmark = pytest.mark.slow

W0 = 29453760  # 2026-01-01T00:00:00Z in 1-minute windows
DAG_ID = "lockgate_lineage_test"
JOB = "lineage_job"
SQL = "SELECT bidder, window.start AS window_start, count(*) AS bids FROM bids GROUP BY window(date_time, '1 minute'), bidder"

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("lineage_pipe", cycle_window=timedelta(minutes=1), parallelism=1)
pipeline.source(lg.NexmarkSource("bid", events_per_second=2, seed=5, start="2026-01-01T00:00:00"), name="bids")
counts = pipeline.sql({sql!r}, name="bid_counts")
counts.sink(lg.FileSink({files!r}), name="counts_files")
readings = pipeline.source(lg.FileSource({readings!r}, format="parquet", event_time="ts"), name="readings")
readings.sink(lg.PostgresSink({pg!r}, "lineage_readings"), name="readings_pg")
'''

DAG = '''
from datetime import datetime

from airflow.sdk import DAG
from lockgate_provider.operators.lockgate import LockgateRestoreOperator, LockgateRunWindowsOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    run = LockgateRunWindowsOperator(task_id="run", pipeline={ref!r}, job={job!r}, first_window={w0},
                                     last_window={w1})
    restore = LockgateRestoreOperator(task_id="restore", job={job!r}, window={w0})
    run >> restore
'''


def _dags_test(env: dict[str, str], date: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow", "dags", "test", DAG_ID, date], capture_output=True,
                          text=True, env=env, timeout=600)


def test_a_dag_run_emits_the_pipelines_sources_and_sinks_and_a_failing_transport_fails_nothing(
    airflow_db: Path, lg_env: Any, test_dag: Any, pg_url: str, tmp_path: Path,
) -> None:
    readings = tmp_path / "readings"
    readings.mkdir()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    pq.write_table(pa.table({"sensor": [1, 2, 3], "value": [0.5, 1.5, 2.5],
                             "ts": pa.array([start.replace(second=s) for s in (5, 30, 50)], pa.timestamp("us", "UTC"))}),
                   readings / "part-0.parquet")
    files = tmp_path / "counts"
    pipe = tmp_path / "lineage_pipe.py"
    pipe.write_text(PIPELINE.format(sql=SQL, files=str(files), readings=str(readings), pg=pg_url))
    test_dag(DAG_ID, DAG.format(dag_id=DAG_ID, ref=f"{pipe}:pipeline", job=JOB, w0=W0, w1=W0 + 1))
    events_file = tmp_path / "openlineage.jsonl"
    env = {**os.environ, "AIRFLOW__OPENLINEAGE__NAMESPACE": "lockgate-tests",
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                          "append": True})}

    run = _dags_test(env, "2026-01-02T00:00:00+00:00")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert events_file.exists(), "the file transport wrote no event:\n" + run.stderr[-5000:]
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]

    def task_event(task: str, kind: str) -> dict[str, Any]:
        found = [e for e in events if e["eventType"] == kind and e["job"]["name"] == f"{DAG_ID}.{task}"]
        assert found, f"no {kind} event of {task}: {[(e['eventType'], e['job']['name']) for e in events]}"
        return found[-1]

    complete = task_event("run", "COMPLETE")
    pg = urlsplit(pg_url)
    inputs = {(d["namespace"], d["name"]): d for d in complete["inputs"]}
    outputs = {(d["namespace"], d["name"]): d for d in complete["outputs"]}
    assert set(inputs) == {("nexmark", "bid"), ("file", str(readings))}
    assert set(outputs) == {("file", str(files)),
                            (f"postgres://{pg.hostname}:{pg.port}", f"{pg.path.strip('/')}.public.lineage_readings")}
    fields = {d["name"]: [f["name"] for f in d["facets"]["schema"]["fields"]] for d in complete["inputs"]}
    assert fields[str(readings)] == ["sensor", "value", "ts"]
    assert {"bidder", "price", "date_time"} <= set(fields["bid"])
    # the rows each sink committed over the two windows (the three readings all fall in the first)
    written = {d["name"]: d["outputFacets"]["outputStatistics"]["rowCount"] for d in complete["outputs"]}
    assert written[f"{pg.path.strip('/')}.public.lineage_readings"] == 3
    assert written[str(files)] > 0
    sink_fields = {d["name"]: {f["name"] for f in d["facets"]["schema"]["fields"]} for d in complete["outputs"]}
    assert {"bidder", "window_start", "bids"} <= sink_fields[str(files)]
    windows = complete["run"]["facets"]["lockgateWindows"]
    assert (windows["job"], windows["firstWindow"], windows["lastWindow"]) == (JOB, W0, W0 + 1)
    assert windows["planVersion"] and windows["windowStart"] is not None
    assert complete["job"]["facets"]["sql"]["query"] == SQL
    assert complete["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    assert complete["job"]["namespace"] == "lockgate-tests"
    # the start event is built before the run, in a forked process that looks no connection up: the
    # job and its windows, the datasets only on completion
    started = task_event("run", "START")
    assert started["run"]["facets"]["lockgateWindows"]["firstWindow"] == W0 and not started.get("inputs")

    restored = task_event("restore", "COMPLETE")
    assert restored["run"]["facets"]["lockgateWindows"]["firstWindow"] == W0
    assert {(d["namespace"], d["name"]) for d in restored["outputs"]} == set(outputs)

    # a transport that cannot reach its server: the run goes on (window W0 + 1 again after the restore)
    closed = free_port()
    env["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps({"type": "http", "url": f"http://127.0.0.1:{closed}",
                                                          "timeout": 2})
    again = _dags_test(env, "2026-01-03T00:00:00+00:00")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-5000:]
    logs = again.stdout + again.stderr
    assert "Failed to emit OpenLineage `COMPLETE` event" in logs, logs[-5000:]  # the transport did fail
    assert "windows 29453761..29453761 complete" in logs
    from lockgate.client.embedded import EmbeddedClient

    client = EmbeddedClient(home=str(lg_env.home))
    try:
        assert client.get_job(JOB).last_window == W0  # the second run's restore task ran too
        assert [c.window for c in client.list_checkpoints(JOB)] == [W0]
    finally:
        client.close()

    # the start operator's lineage, in this process over the same home: a streaming run of the same datasets
    from lockgate_provider.operators.lockgate import LockgateStartPipelineOperator

    start_op = LockgateStartPipelineOperator(task_id="start", pipeline=f"{pipe}:pipeline", job=JOB)
    start_op._lineage_run = {"job": JOB, "first": W0 + 1}  # what its execute() records
    started_lineage = start_op.get_openlineage_facets_on_complete(None)
    assert {(d.namespace, d.name) for d in started_lineage.outputs} == set(outputs)
    assert {(d.namespace, d.name) for d in started_lineage.inputs} == set(inputs)
    assert started_lineage.job_facets["jobType"].processingType == "STREAMING"
    assert started_lineage.run_facets["lockgateWindows"].firstWindow == W0 + 1
    # its start event: the job's facets, and its datasets once the hook holds a client (not in a fork)
    assert start_op.get_openlineage_facets_on_start().job_facets["jobType"].processingType == "STREAMING"
    start_op.hook.get_conn()
    assert {(d.namespace, d.name) for d in start_op.get_openlineage_facets_on_start().outputs} == set(outputs)


def test_output_statistics_and_names_of_the_other_sinks() -> None:
    """One sink: its rows written; Iceberg, Delta and NATS by OpenLineage's conventions (no run needed)."""
    logical = {"vertices": [
        {"id": "bids", "kind": "SOURCE", "op": "source", "schema": [{"name": "id", "type": "bigint"}],
         "config": {"source": {"kind": "nats", "url": "nats://user:pw@broker:4222", "stream": "bids"}}},
        {"id": "out", "kind": "SINK", "op": "sink", "schema": [{"name": "id", "type": "bigint"}],
         "config": {"sink": {"kind": "iceberg", "table": "feeds.bids_{job}", "catalog_name": "lake"}}},
    ]}
    lineage = build_lineage(logical, job="j1", first=3, last=4, rows_out=42)
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("iceberg://lake", "feeds.bids_j1")
    assert out.outputFacets["outputStatistics"].rowCount == 42
    (inp,) = lineage.inputs
    assert (inp.namespace, inp.name) == ("nats://broker:4222", "bids")  # never the credentials
    assert lineage.run_facets["lockgateWindows"].lastWindow == 4
    assert "sql" not in lineage.job_facets
    assert dataset_name({"kind": "delta", "path": "gs://b/t"}, "j") == ("gs://b", "t")


def test_the_operators_import_no_openlineage_until_asked_for_lineage() -> None:
    """Lineage is an extra: importing the operators loads neither the OpenLineage client nor the
    provider's extractors (only Airflow's own provider discovery may list it)."""
    code = ("import sys, lockgate_provider.operators.lockgate, lockgate_provider.lineage; "
            "print(sorted(m for m in sys.modules if m.startswith(('openlineage', "
            "'airflow.providers.openlineage.extractors', 'airflow.providers.common.compat.openlineage'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
