"""The extra link from every Lockgate task to its job.

The link is the job's page in the Lockgate plugin, inside Airflow's UI:
``<[api] base_url>/plugin/lockgate/lockgate/ui/jobs/<job>`` (a path on the same site when
``base_url`` is not set). A connection whose ``ui_url`` is set links to ``<ui_url>/jobs/<job>``
instead (another Airflow, or a proxy in front of it).

Like the Databricks and Dataflow links it is stored in XCom: the operator pushes it as soon
as the job is known (so it shows while the task runs or is deferred), and Airflow stores it
again when the task ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


URL_PREFIX = "/lockgate"
"""Where the plugin's FastAPI app is mounted on Airflow's api-server."""

JOB_XCOM_KEY = "lockgate_job"
"""The XCom key of the job a Lockgate task drives (the plugin's task-instance view reads it)."""

NAV_ROUTE = "lockgate"
"""The plugin page's route in Airflow's UI: ``/plugin/lockgate`` shows ``/lockgate/ui/`` inside Airflow."""


def job_page_path(job: str) -> str:
    """The path of ``job``'s page in Airflow's UI (the plugin's job page, inside Airflow)."""
    return f"/plugin/{NAV_ROUTE}{URL_PREFIX}/ui/jobs/{quote(job, safe='')}"


class LockgateJobLink(BaseOperatorLink):
    """Link to the Lockgate job a task drives."""

    name = "Lockgate job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        # Called on the worker when the task ends, with the operator that ran: the URL was
        # worked out during execute() (the job name may only be known then).
        return getattr(operator, "_lockgate_job_url", None) or ""

    @classmethod
    def persist(cls, context: Any, operator: Any, url: str, job: str | None = None) -> None:
        """Remember ``url`` on ``operator`` and push it (and ``job``) to XCom right away."""
        operator._lockgate_job_url = url
        ti = context.get("ti") if context else None
        if ti is not None:
            ti.xcom_push(key=cls().xcom_key, value=url)
            if job is not None:
                ti.xcom_push(key=JOB_XCOM_KEY, value=job)
