"""Who may do what: every route of the plugin goes through Airflow's auth manager.

A plugin's FastAPI app is not behind Airflow's auth unless it asks. Reading a job needs an
authenticated user allowed to read DAGs; an action (stop, restore, restart without state)
needs edit permission on DAGs, as clearing or marking a task does in Airflow itself. The
user comes from the request's bearer token or from Airflow's session cookie (which the UI's
iframe sends), exactly as for Airflow's own REST API.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import get_user, requires_access_dag
from fastapi import HTTPException, Request, status
from fastapi.responses import RedirectResponse

can_read = requires_access_dag("GET")
"""A dependency: the user may read DAGs (401 when anonymous, 403 when not allowed)."""

can_edit = requires_access_dag("PUT")
"""A dependency: the user may edit DAGs (what clearing or marking a task needs)."""


class LoginRequired(Exception):
    """A page was asked for without a session: the browser is sent to Airflow's login."""

    def __init__(self, next_url: str):
        super().__init__(next_url)
        self.next_url = next_url


async def page_reader(request: Request) -> Any:
    """The user of a page request, allowed to read DAGs; anonymous ones go to the login."""
    try:
        user = await get_user(request, None, None)
    except HTTPException as err:
        if err.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise LoginRequired(str(request.url)) from err
        raise
    if not get_auth_manager().is_authorized_dag(method="GET", user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: reading Lockgate jobs needs read access to DAGs")
    return user


def login_redirect(request: Request, exc: LoginRequired) -> RedirectResponse:
    """Airflow's login page, coming back to the page asked for."""
    return RedirectResponse(get_auth_manager().get_url_login(next_url=exc.next_url), status_code=303)


def may_edit(user: Any) -> bool:
    """Whether ``user`` may act on jobs (the page shows the action buttons only then)."""
    return bool(get_auth_manager().is_authorized_dag(method="PUT", user=user))
