"""The extra link from every Lockgate task to its job.

The link is the job's page: ``<ui_url>/jobs/<job>`` when the Lockgate connection sets
``ui_url`` (the Lockgate Airflow plugin's page), otherwise the controller's address and the
job (``grpc://controller:50051/jobs/<job>``, or ``embedded:<home>/jobs/<job>``).

Like the Databricks and Dataflow links it is stored in XCom: the operator pushes it as soon
as the job is known (so it shows while the task runs or is deferred), and Airflow stores it
again when the task ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class LockgateJobLink(BaseOperatorLink):
    """Link to the Lockgate job a task drives."""

    name = "Lockgate job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        # Called on the worker when the task ends, with the operator that ran: the URL was
        # worked out during execute() (the job name may only be known then).
        return getattr(operator, "_lockgate_job_url", None) or ""

    @classmethod
    def persist(cls, context: Any, operator: Any, url: str) -> None:
        """Remember ``url`` on ``operator`` and push it to XCom right away."""
        operator._lockgate_job_url = url
        ti = context.get("ti") if context else None
        if ti is not None:
            ti.xcom_push(key=cls().xcom_key, value=url)
