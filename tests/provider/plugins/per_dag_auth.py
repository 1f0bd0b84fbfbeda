"""An auth manager that grants rights per DAG, as Airflow's FAB or a Keycloak manager can.

Airflow's simple auth manager, except for the users named in ``$LOCKGATE_TEST_DAG_RIGHTS``
(JSON: ``{"user": {"GET": ["dag", ...], "PUT": [...]}}``): those may do a method only on the
DAGs listed for it, never on "all DAGs" (a check that names no DAG). The api-server loads it
by its dotted name (``[core] auth_manager``), from this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _rights() -> dict[str, dict[str, list[str]]]:
    return json.loads(os.environ.get("LOCKGATE_TEST_DAG_RIGHTS") or "{}")


class PerDagAuthManager(SimpleAuthManager):
    """The simple auth manager with per-DAG rights for the users of ``$LOCKGATE_TEST_DAG_RIGHTS``."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        rights = _rights().get(user.get_name())
        if rights is None:
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        dag_id = getattr(details, "id", None)
        return dag_id is not None and dag_id in rights.get(method, [])
