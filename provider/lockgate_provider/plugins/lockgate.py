"""The Lockgate plugin for Airflow 3: the API and the pages, registered with Airflow.

Shipped with the provider and found both through the provider's ``get_provider_info()``
(``plugins``) and through the ``airflow.plugins`` entry point. It adds

* a FastAPI app on the api-server at ``/lockgate`` (:mod:`.api`), behind Airflow's auth;
* **Lockgate** in Airflow's navigation (``/plugin/lockgate``): the jobs, and a page per job
  with its plans, window timeline, checkpoints, transitions and actions;
* **Lockgate windows** on every task instance: the windows each try of the task ran.

Every Lockgate task's "Lockgate job" extra link opens its job's page here.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from lockgate_provider.links.lockgate import NAV_ROUTE, URL_PREFIX
from lockgate_provider.plugins.api import create_app


class LockgatePlugin(AirflowPlugin):
    """Lockgate's pages and API in Airflow's UI."""

    name = "lockgate"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Lockgate"}]
    external_views = [
        {
            "name": "Lockgate",
            "href": f"{URL_PREFIX}/ui/",
            "url_route": NAV_ROUTE,
            "destination": "nav",
        },
        {
            "name": "Lockgate windows",
            "href": f"{URL_PREFIX}/ui/ti/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}",
            "url_route": "lockgate-windows",
            "destination": "task_instance",
        },
    ]
