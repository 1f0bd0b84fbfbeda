"""The provider as Airflow sees it: entry point, provider info, connection form, and a
whole PySpark (the pyspark-client trap)."""

from __future__ import annotations

import json
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest


def test_the_ui_plugin_is_registered_by_provider_info_and_entry_point():
    from airflow.plugins_manager import AirflowPlugin

    from lockgate_provider import get_provider_info
    from lockgate_provider.plugins.lockgate import LockgatePlugin

    assert get_provider_info()["plugins"] == [
        {"name": "lockgate", "plugin-class": "lockgate_provider.plugins.lockgate.LockgatePlugin"}]
    eps = [e for e in entry_points(group="airflow.plugins") if e.value.startswith("lockgate_provider")]
    assert [e.load() for e in eps] == [LockgatePlugin]
    assert issubclass(LockgatePlugin, AirflowPlugin) and LockgatePlugin.name == "lockgate"
    assert LockgatePlugin.fastapi_apps[0]["url_prefix"] == "/lockgate"
    assert {v["destination"] for v in LockgatePlugin.external_views} == {"nav", "task_instance"}


def test_entry_point_and_provider_info_validate_against_airflow_schema():
    import airflow
    import jsonschema

    eps = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("lockgate_provider")]
    assert len(eps) == 1, eps
    info = eps[0].load()()
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    assert info["connection-types"][0]["connection-type"] == "lockgate"
    # every module and class it names imports
    import importlib

    for section in ("operators", "sensors", "hooks", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for path in [*info["extra-links"], info["connection-types"][0]["hook-class-name"]]:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path


def test_providers_manager_registers_connection_form_hook_link_trigger_and_asset_scheme(airflow_db):
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk import Asset

    pm = ProvidersManager()
    assert "lockgate" in pm.providers
    hook = pm.hooks.get("lockgate")
    assert hook is not None and hook.connection_testable
    assert hook.hook_class_name == "lockgate_provider.hooks.lockgate.LockgateHook"
    assert hook.connection_id_attribute_name == "lockgate_conn_id"
    behaviour = pm.field_behaviours["lockgate"]
    assert behaviour["hidden_fields"] == ["schema", "login"]
    assert behaviour["relabeling"]["password"] == "Token"
    widgets = {k for k in pm.connection_form_widgets if k.startswith("extra__lockgate__")}
    assert {"extra__lockgate__use_tls", "extra__lockgate__tls_ca", "extra__lockgate__spark_conn_id",
            "extra__lockgate__lockgate_home", "extra__lockgate__ui_url"} <= widgets
    assert pm.connection_form_widgets["extra__lockgate__use_tls"].field["schema"]["type"] == ["boolean", "null"]
    assert "lockgate_provider.links.lockgate.LockgateJobLink" in pm.extra_links_class_names
    assert any(t.trigger_class_name == "lockgate_provider.triggers.lockgate" for t in pm.trigger)
    # the lockgate:// asset scheme is checked by the provider's handler
    assert Asset(uri="lockgate://jobs/bids").uri == "lockgate://jobs/bids"
    with pytest.raises(ValueError, match="lockgate://jobs/<job>"):
        Asset(uri="lockgate://elsewhere/bids")


def test_pyspark_is_whole_and_runs_python_udfs(spark):
    """apache-airflow-providers-apache-spark pulls pyspark-client, which overwrites part of
    pyspark; scripts/setup.sh repairs it. Prove that the installed pyspark is whole: its
    files match its RECORD, and Python UDFs run in the JVM."""
    import base64
    import hashlib

    import pyarrow as pa
    from pyspark.sql.functions import pandas_udf

    dist = distribution("pyspark")
    assert dist.version == "4.3.0"
    bad = []
    for f in dist.files or []:
        if f.hash is None or f.suffix == ".jar":
            continue
        data = Path(f.locate()).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.new(f.hash.mode, data).digest()).rstrip(b"=").decode()
        if digest != f.hash.value:
            bad.append(str(f))
    assert not bad, f"{len(bad)} pyspark files overwritten (pyspark-client?), e.g. {bad[:3]}: run scripts/setup.sh"

    @pandas_udf("long")
    def plus_one(s):  # a vectorised Python UDF
        return s + 1

    df = spark.range(5)
    assert [r[0] for r in df.select(plus_one("id")).collect()] == [1, 2, 3, 4, 5]

    def double(batches):  # mapInArrow: Arrow batches through a Python worker
        for b in batches:
            yield pa.RecordBatch.from_arrays([pa.compute.multiply(b.column(0), 2)], names=["id"])

    assert sorted(r[0] for r in df.mapInArrow(double, "id long").collect()) == [0, 2, 4, 6, 8]
