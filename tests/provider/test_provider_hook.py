"""LockgateHook: the connection's forms (embedded, controller, TLS, token, Spark), and a
connection test that really reaches Lockgate."""

from __future__ import annotations

import json

import pytest


def _conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: object) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_missing_default_connection_means_the_embedded_engine(lg_env, monkeypatch):
    from lockgate_provider.hooks.lockgate import LockgateHook

    hook = LockgateHook()
    assert hook.embedded and hook.url == "embedded"
    assert hook.address == f"embedded:{lg_env.home}"
    assert hook.client_options(spark=False) == {"home": str(lg_env.home)}
    # the job's page in the Lockgate plugin, inside Airflow ([api] base_url unset: a path on the same site)
    assert hook.job_url("bids") == "/plugin/lockgate/lockgate/ui/jobs/bids"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080/")
    assert hook.job_url("a b") == "http://airflow.example:8080/plugin/lockgate/lockgate/ui/jobs/a%20b"


def test_a_missing_named_connection_is_an_error(lg_env):
    from airflow.sdk.exceptions import AirflowNotFoundException

    from lockgate_provider.hooks.lockgate import LockgateHook

    with pytest.raises(AirflowNotFoundException):
        LockgateHook("no_such_connection").url  # noqa: B018


def test_controller_connection_host_port_token_tls(lg_env, monkeypatch):
    from lockgate_provider.hooks.lockgate import LockgateHook

    _conn(monkeypatch, "lg_tls", conn_type="lockgate", host="controller.example", port=50443, password="s3cret",
          extra={"use_tls": True, "tls_ca": "/etc/lockgate/ca.pem", "timeout": 12, "ui_url": "http://af:8080/lockgate/"})
    hook = LockgateHook("lg_tls")
    assert not hook.embedded
    assert hook.url == "grpcs://controller.example:50443"
    assert hook.client_options() == {"timeout": 12.0, "token": "s3cret", "tls_ca": "/etc/lockgate/ca.pem"}
    assert hook.job_url("bids") == "http://af:8080/lockgate/jobs/bids"

    _conn(monkeypatch, "lg_plain", conn_type="lockgate", host="grpc://10.0.0.5")
    plain = LockgateHook("lg_plain")
    assert plain.url == "grpc://10.0.0.5:50051"  # the controller's default port
    assert plain.job_url("bids") == "/plugin/lockgate/lockgate/ui/jobs/bids"
    _conn(monkeypatch, "lg_emb", conn_type="lockgate", host="embedded", extra={"lockgate_home": str(lg_env.tmp / "h2")})
    emb = LockgateHook("lg_emb")
    assert emb.embedded and emb.client_options(spark=False)["home"] == str(lg_env.tmp / "h2")


def test_embedded_spark_comes_from_the_apache_spark_connections(lg_env, monkeypatch):
    from lockgate_provider.hooks.lockgate import LockgateHook

    _conn(monkeypatch, "spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=7077,
          extra={"deploy-mode": "client", "spark.executor.memory": "1g"})
    _conn(monkeypatch, "spark_sc", conn_type="spark_connect", host="127.0.0.1", port=15002)
    _conn(monkeypatch, "lg_on_cluster", conn_type="lockgate", extra={"spark_conn_id": "spark_cluster"})
    opts = LockgateHook("lg_on_cluster").client_options()
    assert opts["spark_master"] == "spark://127.0.0.1:7077"
    assert opts["spark_conf"] == {"spark.executor.memory": "1g"}  # spark-submit options are not Spark conf
    sc = LockgateHook("lg_on_cluster", spark_conn_id="spark_sc").client_options()
    assert sc["spark_master"].startswith("sc://127.0.0.1:15002")


def test_connection_test_embedded_live_controller_and_dead_controller(lg_env, monkeypatch, controller, helpers):
    from airflow.models.connection import Connection

    from lockgate_provider.hooks.lockgate import LockgateHook

    ok, msg = LockgateHook().test_connection()
    assert ok, msg
    assert "embedded Lockgate" in msg

    _conn(monkeypatch, "lg_live", conn_type="lockgate", host="127.0.0.1", port=controller.port)
    ok, msg = LockgateHook("lg_live").test_connection()
    assert ok, msg
    assert f"Lockgate controller at grpc://127.0.0.1:{controller.port}" in msg and "jobs" in msg

    dead = helpers.free_port()
    _conn(monkeypatch, "lg_dead", conn_type="lockgate", host="127.0.0.1", port=dead, extra={"timeout": 3})
    ok, msg = LockgateHook("lg_dead").test_connection()
    assert not ok
    assert f"Cannot reach the Lockgate controller at grpc://127.0.0.1:{dead}" in msg

    # the path Airflow's UI and REST API take (Connection.test_connection -> the provider's hook)
    live = Connection(conn_id="lg_live", conn_type="lockgate", host="127.0.0.1", port=controller.port)
    assert live.test_connection()[0]
    status, message = Connection(conn_id="lg_dead", conn_type="lockgate", host="127.0.0.1", port=dead).test_connection()
    assert not status and "Cannot reach" in message
