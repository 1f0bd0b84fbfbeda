"""Who may do what: every route of the plugin goes through Airflow's auth manager.

A plugin's FastAPI app is not behind Airflow's auth unless it asks. The user comes from the
request's bearer token or from Airflow's session cookie (which the UI's iframe sends),
exactly as for Airflow's own REST API.

A job's permissions are those of **the DAG that runs it**, as Lockgate recorded it: the
provider's operators label every job they run with ``airflow.dag_id`` (and
``airflow.task_id``), and the checks here read that label from the job, never from the
request (a ``?dag_id=`` in the URL changes nothing). Reading a job needs read access to its
DAG; an action (stop, restore, restart without state) needs edit access to it, as clearing
or marking a task does in Airflow itself. A job no DAG has run (started from the CLI or a
script) needs the rights an auth manager gives for every DAG.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
from airflow.models.dag import DagModel
from fastapi import HTTPException, Request, status
from fastapi.responses import RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials

from lockgate import JobInfo
from lockgate_provider.utils import DAG_LABEL

can_read = requires_access_dag("GET")
"""A dependency for a route whose path names a DAG (``{dag_id}``): the user may read it."""


class LoginRequired(Exception):
    """A page was asked for without a session: the browser is sent to Airflow's login."""

    def __init__(self, next_url: str):
        super().__init__(next_url)
        self.next_url = next_url


def dag_of(job: JobInfo) -> str | None:
    """The DAG that runs ``job``, as its runs recorded it (None: no DAG has run it)."""
    return job.labels.get(DAG_LABEL) or None


def _details(dag_id: str | None) -> DagDetails | None:
    if dag_id is None:
        return None  # no DAG recorded: the rights the auth manager gives for every DAG
    return DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))


def may_access(user: Any, job: JobInfo, method: str) -> bool:
    """Whether ``user`` may ``method`` ("GET": read, "PUT": act on) ``job``: the rights to
    the DAG recorded on the job, or to every DAG when none is."""
    return bool(get_auth_manager().is_authorized_dag(method=method, user=user, details=_details(dag_of(job))))


def require_access(user: Any, job: JobInfo, method: str) -> None:
    """403 naming the DAG whose rights are missing, unless :func:`may_access`."""
    if may_access(user, job, method):
        return
    what = "reading" if method == "GET" else "acting on"
    dag = dag_of(job)
    needs = (f"{'read' if method == 'GET' else 'edit'} access to DAG '{dag}', which runs it" if dag else
             f"{'read' if method == 'GET' else 'edit'} access to all DAGs (no DAG has run it)")
    raise HTTPException(status.HTTP_403_FORBIDDEN, f"Forbidden: {what} Lockgate job '{job.name}' needs {needs}")


def may_edit(user: Any, job: JobInfo) -> bool:
    """Whether ``user`` may act on ``job`` (the page shows the action buttons only then)."""
    return may_access(user, job, "PUT")


def may_edit_every_dag(user: Any) -> bool:
    """Whether ``user`` may edit every DAG (and so act on any job)."""
    return bool(get_auth_manager().is_authorized_dag(method="PUT", user=user))


async def page_reader(request: Request) -> Any:
    """The user of a page request (Airflow's session cookie, or a bearer token), allowed to
    read at least one DAG; anonymous ones go to the login. (Each job's data is checked against its own DAG by the API.)"""
    header = request.headers.get("authorization", "")
    bearer = (HTTPAuthorizationCredentials(scheme="Bearer", credentials=header[7:].strip())
              if header[:7].lower() == "bearer " else None)
    try:
        user = await get_user(request, None, bearer)
    except HTTPException as err:
        if err.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise LoginRequired(str(request.url)) from err
        raise
    manager = get_auth_manager()
    if not (manager.is_authorized_dag(method="GET", user=user) or manager.get_authorized_dag_ids(user=user, method="GET")):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: reading Lockgate jobs needs read access to DAGs")
    return user


def login_redirect(request: Request, exc: LoginRequired) -> RedirectResponse:
    """Airflow's login page, coming back to the page asked for."""
    return RedirectResponse(get_auth_manager().get_url_login(next_url=exc.next_url), status_code=303)
