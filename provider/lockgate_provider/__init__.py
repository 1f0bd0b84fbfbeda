"""Apache Airflow provider for Lockgate: compile pipelines, run windowed cycles, poll
checkpoints, restore on retry.

Installed with Lockgate (``pip install 'lockgate[airflow]'``); Airflow finds it through the
``apache_airflow_provider`` entry point, which names :func:`get_provider_info`.

>>> from lockgate_provider.operators.lockgate import LockgateRunWindowsOperator
>>> from lockgate_provider.sensors.lockgate import LockgateCheckpointSensor
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

INTEGRATION = "Lockgate"


def get_provider_info() -> dict[str, Any]:
    """What this provider brings to Airflow (read by Airflow's ProvidersManager)."""
    return {
        "package-name": "lockgate",
        "name": "Lockgate",
        "description": "Lockgate: dataflow pipelines on Apache Spark in checkpointed window cycles.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "tags": ["apache", "service"],
            }
        ],
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["lockgate_provider.operators.lockgate"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["lockgate_provider.sensors.lockgate"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["lockgate_provider.hooks.lockgate"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["lockgate_provider.triggers.lockgate"]}],
        "extra-links": ["lockgate_provider.links.lockgate.LockgateJobLink"],
        "plugins": [{"name": "lockgate", "plugin-class": "lockgate_provider.plugins.lockgate.LockgatePlugin"}],
        "asset-uris": [
            {
                "schemes": ["lockgate"],
                "handler": "lockgate_provider.assets.sanitize_uri",
                "factory": "lockgate_provider.assets.create_asset",
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "lockgate_provider.hooks.lockgate.LockgateHook",
                "hook-name": "Lockgate",
                "connection-type": "lockgate",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login"],
                    "relabeling": {"host": "Controller host", "port": "Controller port", "password": "Token"},
                    "placeholders": {
                        "host": "empty or 'embedded' for the embedded engine; else the controller's host",
                        "port": "50051",
                        "password": "the controller's token (lockgate server --token)",
                        "lockgate_home": "~/.lockgate",
                        "spark_conn_id": "spark_default",
                        "ui_url": "http://airflow:8080/lockgate",
                    },
                },
                "conn-fields": {
                    "use_tls": {
                        "label": "Use TLS",
                        "description": "Talk to the controller over TLS (grpcs://).",
                        "schema": {"type": ["boolean", "null"], "default": False},
                    },
                    "tls_ca": {
                        "label": "TLS CA certificate",
                        "description": "Path of the PEM file of the CA that signed the controller's certificate.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "tls_server_name": {
                        "label": "TLS server name",
                        "description": "The name in the controller's certificate, when it differs from the host.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "timeout": {
                        "label": "Timeout (s)",
                        "description": "Seconds a call to the controller may take.",
                        "schema": {"type": ["number", "null"], "default": 30},
                    },
                    "lockgate_home": {
                        "label": "Lockgate home (embedded)",
                        "description": "The embedded engine's folder: catalog, snapshots, staging ($LOCKGATE_HOME).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "catalog_url": {
                        "label": "Catalog URL (embedded)",
                        "description": "SQLAlchemy URL of the embedded engine's catalog; SQLite under the home by default.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "snapshots": {
                        "label": "Snapshot store (embedded)",
                        "description": "Folder or Hadoop file system URI of the embedded engine's state snapshots.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "spark_conn_id": {
                        "label": "Spark connection (embedded)",
                        "description": "An apache-spark 'spark' or 'spark_connect' connection naming the cluster "
                        "the embedded engine runs on; local Spark when empty.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "ui_url": {
                        "label": "Job page URL",
                        "description": "Base URL of the Lockgate job pages (the Lockgate plugin); task links go "
                        "to <url>/jobs/<job>.",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            }
        ],
    }
