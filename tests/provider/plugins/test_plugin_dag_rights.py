"""The plugin's permission checks under an auth manager that grants rights per DAG: a job's
rights are those of the DAG Lockgate recorded as running it, never a DAG the request names.

User ``scoped`` may read and edit DAG ``mine`` only (:mod:`per_dag_auth`); ``admin`` may do
everything. Three jobs share one embedded home: ``cj`` run by DAG ``theirs``, ``mj`` run by
DAG ``mine``, ``nj`` run from no DAG (a script).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import lockgate

W0 = 29453760  # 2026-01-01T00:00Z in one-minute windows
RIGHTS = {"scoped": {"GET": ["mine"], "PUT": ["mine"]}}
LABELS = {"cj": {"airflow.dag_id": "theirs", "airflow.task_id": "run"},
          "mj": {"airflow.dag_id": "mine", "airflow.task_id": "run"}, "nj": None}


@pytest.fixture(scope="module")
def server(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory, write_pipeline,
           api_server_class) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("dag-rights")
    home = root / "home"
    client = lockgate.connect("embedded", home=str(home))
    ref = write_pipeline(root, "rights")
    for job, labels in LABELS.items():
        result = client.run(ref, job=job, first=W0, last=W0 + 1, labels=labels)
        assert result.state == "FINISHED" and result.windows_run == 2
    api = api_server_class(root, airflow_db)
    api.env.update({
        "AIRFLOW__CORE__AUTH_MANAGER": "per_dag_auth.PerDagAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{api.env['AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS']},scoped:user",
        "LOCKGATE_TEST_DAG_RIGHTS": json.dumps(RIGHTS),
        "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p),
    })
    api.start()
    try:
        api.connect(extra={"lockgate_home": str(home)})
        yield SimpleNamespace(api=api, client=client)
    finally:
        api.stop()


def test_the_recorded_dag_decides_not_the_dag_id_the_request_names(server):
    api, client = server.api, server.client
    assert client.get_job("cj").labels == LABELS["cj"]
    for action, body in (("restore", {"confirm": "cj", "window": W0}), ("stop", {"confirm": "cj"}),
                         ("restart", {"confirm": "cj"})):
        for query in ("", "?dag_id=mine", "?dag_id=~"):
            r = api.request("POST", f"/lockgate/api/jobs/cj/{action}{query}", "scoped", json=body)
            assert r.status_code == 403, (action, query, r.status_code, r.text)
            assert "DAG 'theirs'" in r.json()["detail"]
    for path in ("", "/checkpoints", "/cycles", "/plan", "/transitions", "/supersteps"):
        r = api.request("GET", f"/lockgate/api/jobs/cj{path}?dag_id=mine", "scoped")
        assert r.status_code == 403, (path, r.text)
    assert client.get_job("cj").last_window == W0 + 1  # nothing was rolled back
    assert max(c.window for c in client.list_checkpoints("cj")) == W0 + 1


def test_a_user_reads_and_acts_on_the_jobs_of_the_dags_it_may_edit(server):
    api, client = server.api, server.client
    listed = [j["name"] for j in api.request("GET", "/lockgate/api/jobs?dag_id=theirs", "scoped").json()["jobs"]]
    assert listed == ["mj"]
    assert api.request("GET", "/lockgate/api/jobs/mj", "scoped").json()["can_edit"] is True
    r = api.request("POST", "/lockgate/api/jobs/mj/restore", "scoped", json={"confirm": "mj", "window": W0})
    assert r.status_code == 200, r.text
    assert client.get_job("mj").last_window == W0
    assert sorted(j["name"] for j in api.request("GET", "/lockgate/api/jobs", "admin").json()["jobs"]) == \
        ["cj", "mj", "nj"]


def test_a_job_no_dag_ran_needs_the_rights_to_every_dag(server):
    api, client = server.api, server.client
    assert client.get_job("nj").labels == {}
    r = api.request("POST", "/lockgate/api/jobs/nj/restore?dag_id=mine", "scoped", json={"confirm": "nj", "window": W0})
    assert r.status_code == 403 and "all DAGs" in r.json()["detail"]
    assert api.request("GET", "/lockgate/api/jobs/nj?dag_id=mine", "scoped").status_code == 403
    r = api.request("POST", "/lockgate/api/jobs/nj/restore", "admin", json={"confirm": "nj", "window": W0})
    assert r.status_code == 200, r.text
    assert client.get_job("nj").last_window == W0


def test_a_missing_job_names_no_other_job(server):
    r = server.api.request("GET", "/lockgate/api/jobs/nope", "scoped")
    assert r.status_code == 404
    assert "nope" in r.json()["detail"] and "cj" not in r.json()["detail"]


def test_the_api_description_needs_a_login(server):
    api = server.api
    for path in ("/lockgate/openapi.json", "/lockgate/docs", "/lockgate/redoc"):
        r = api.request("GET", path)
        assert r.status_code == 303 and "/auth/login" in r.headers["location"], (path, r.status_code)
        assert "Lockgate" not in r.text
    spec = api.request("GET", "/lockgate/openapi.json", "admin")
    assert spec.status_code == 200 and "/api/jobs/{job}/restore" in spec.json()["paths"]
    page = api.request("GET", "/lockgate/docs", "admin")
    assert page.status_code == 200 and "/lockgate/openapi.json" in page.text
