"""The plugin's FastAPI app, mounted on Airflow's api-server at ``/lockgate``.

JSON under ``/lockgate/api`` and the pages under ``/lockgate/ui``, every route behind
Airflow's auth manager (:mod:`.access`)::

    GET  /api/jobs                                  the jobs, with lag and rows/s
    GET  /api/jobs/{job}                            one job
    GET  /api/jobs/{job}/plan[?version=]            its logical and physical plans
    GET  /api/jobs/{job}/cycles?limit=&before=      a page of its window timeline, newest first (a
                                                    graph operator's rounds: a summary of their supersteps)
    GET  /api/jobs/{job}/supersteps?window=&attempt=   the supersteps of a window (repeat window for several)
    GET  /api/jobs/{job}/checkpoints?limit=         its checkpoints (window, size, plan version), newest first
    GET  /api/jobs/{job}/transitions                its state transitions with reasons
    GET  /api/task-instances/{dag_id}/{run_id}/{task_id}?map_index=   the windows each try ran
    POST /api/jobs/{job}/stop      {"confirm": job, "drain": true}
    POST /api/jobs/{job}/restore   {"confirm": job, "window": N}
    POST /api/jobs/{job}/restart   {"confirm": job}        restart without state

A job's routes need the rights to the DAG that runs it, as Lockgate recorded it on the job
(:mod:`.access`): read access to read it, edit access to act on it; the list of jobs shows
the jobs the user may read. Actions carry the job's name as ``confirm`` (the page's
confirmation step), call the same client methods as the operators, and are recorded with
the Airflow user who asked (:mod:`.audit`). The API's description (``/openapi.json``,
``/docs``, ``/redoc``) is behind the same login as the pages.

>>> import httpx                                                      # doctest: +SKIP
>>> httpx.get("http://airflow:8080/lockgate/api/jobs", headers={"Authorization": f"Bearer {token}"}).json()
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.configuration import conf
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, Field

import lockgate
from lockgate import Client, JobInfo, LockgateError
from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.plugins import audit
from lockgate_provider.plugins.access import (
    LoginRequired,
    can_read,
    login_redirect,
    may_access,
    may_edit,
    page_reader,
    require_access,
)
from lockgate_provider.plugins.pages import render_page
from lockgate_provider.plugins.task_tries import task_windows
from lockgate_provider.plugins.views import cycle_row, job_summary, page_supersteps, superstep_row

STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"lockgate.js": "text/javascript", "lockgate.css": "text/css"}
"""The page's script and style sheet (served behind the same auth as the pages)."""


class Confirmed(BaseModel):
    """An action's body: ``confirm`` repeats the job's name (the page's confirmation step)."""

    confirm: str = Field(description="the job's name, typed or confirmed by the user")


class StopBody(Confirmed):
    drain: bool = Field(True, description="finish and checkpoint the running window (false: cancel it)")


class RestoreBody(Confirmed):
    window: int = Field(description="the window whose checkpoint the job rolls back to")


_STATUS = [
    ((lockgate.JobNotFoundError,), 404),
    ((lockgate.errors.CheckpointNotFoundError, lockgate.errors.PlanNotFoundError), 404),
    ((lockgate.errors.InvalidArgumentError,), 400),
    ((lockgate.errors.JobStateError, lockgate.errors.FencedError), 409),
    ((lockgate.ControllerUnavailableError, lockgate.errors.CatalogUnavailableError), 503),
]


def _status_of(err: LockgateError) -> int:
    return next((code for kinds, code in _STATUS if isinstance(err, kinds)), 500)


class _Clients:
    """The Lockgate client of the connection the plugin is told to use (``[lockgate]
    ui_conn_id``, default ``lockgate_default``). The connection is read again on every
    request, so editing it in Airflow takes effect without restarting the api-server; a
    client is made once per set of settings and kept (the embedded one is the hook's own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._remote: dict[str, Client] = {}

    def get(self) -> Client:
        hook = LockgateHook(conf.get("lockgate", "ui_conn_id", fallback="lockgate_default"))
        if hook.embedded:
            return hook.get_conn()
        key = repr((hook.url, sorted(hook.client_options().items())))
        with self._lock:
            if key not in self._remote:
                self._remote[key] = hook.get_conn()
            return self._remote[key]


clients = _Clients()


def client() -> Client:
    """A dependency: the Lockgate client of the plugin's connection (503 naming the fix
    when the connection is missing or invalid)."""
    try:
        return clients.get()
    except AirflowNotFoundException as err:
        conn_id = conf.get("lockgate", "ui_conn_id", fallback="lockgate_default")
        raise HTTPException(
            503, f"the Lockgate plugin's connection {conn_id!r} is not defined: create it (Admin > Connections, "
            "type Lockgate) or point [lockgate] ui_conn_id at an existing one") from err


LgClient = Annotated[Client, Depends(client)]
PageUser = Annotated[Any, Depends(page_reader)]


def _job_with(method: str) -> Any:
    def dependency(job: str, user: GetUserDep, lg: LgClient) -> JobInfo:
        try:
            info = lg.get_job(job)
        except lockgate.JobNotFoundError:
            # no list of the jobs there are: the user may not be allowed to read them
            raise HTTPException(404, f"Lockgate job '{job}' not found") from None
        require_access(user, info, method)
        return info

    return dependency


ReadableJob = Annotated[JobInfo, Depends(_job_with("GET"))]
"""A dependency: the job of the path, which the user may read (its DAG's read access)."""
EditableJob = Annotated[JobInfo, Depends(_job_with("PUT"))]
"""A dependency: the job of the path, which the user may act on (its DAG's edit access)."""


def _confirm(job: str, body: Confirmed) -> None:
    if body.confirm != job:
        raise HTTPException(400, f"confirm the action: send the job's name {job!r} as 'confirm'")


def _act(user: Any, action: str, job: str, details: dict[str, Any], call: Any) -> dict[str, Any]:
    name = str(user.get_name())
    try:
        info = call()
    except LockgateError as err:
        audit.record_action(name, action, job, details, f"refused: {err}")
        raise
    audit.record_action(name, action, job, details, f"done: {info.state}")
    return {"job": info.to_dict(), "action": action, "by": name}


def create_app() -> FastAPI:
    """The plugin's app (Airflow mounts it at :data:`URL_PREFIX`)."""
    # the API's description is served below, behind the login (FastAPI's own routes are open)
    app = FastAPI(title="Lockgate", description="Lockgate jobs, plans, window timeline, checkpoints and actions",
                  openapi_url=None, docs_url=None, redoc_url=None)
    app.add_exception_handler(LoginRequired, login_redirect)  # type: ignore[arg-type]

    @app.exception_handler(LockgateError)
    async def lockgate_error(request: Request, err: LockgateError) -> JSONResponse:
        return JSONResponse({"detail": str(err), "error": type(err).__name__}, status_code=_status_of(err))

    # -- reading ------------------------------------------------------------------------
    @app.get("/api/jobs")
    def jobs(user: GetUserDep, lg: LgClient) -> dict[str, Any]:
        """The jobs the user may read (those whose DAG the user may read)."""
        mine = [j for j in sorted(lg.list_jobs(), key=lambda j: j.name) if may_access(user, j, "GET")]
        return {"jobs": [job_summary(lg, j) for j in mine]}

    @app.get("/api/jobs/{job}")
    def job(info: ReadableJob, user: GetUserDep, lg: LgClient) -> dict[str, Any]:
        return {**job_summary(lg, info), "can_edit": may_edit(user, info)}

    @app.get("/api/jobs/{job}/plan", dependencies=[Depends(_job_with("GET"))])
    def plan(job: str, lg: LgClient, version: str | None = None) -> dict[str, Any]:
        return lg.get_plan(job, version).to_dict()

    @app.get("/api/jobs/{job}/cycles", dependencies=[Depends(_job_with("GET"))])
    def cycles(
        job: str, lg: LgClient, limit: Annotated[int, Query(ge=1, le=1000)] = 100, before: int | None = None
    ) -> dict[str, Any]:
        page = lg.list_cycles(job, limit=limit, before=before)
        steps = page_supersteps(lg, job, page.cycles, page.total)
        return {"cycles": [cycle_row(c, steps.get((c.window, c.attempt))) for c in page.cycles],
                "total": page.total, "next_before": page.next_before}

    @app.get("/api/jobs/{job}/supersteps", dependencies=[Depends(_job_with("GET"))])
    def supersteps(
        job: str, lg: LgClient,
        window: Annotated[list[int] | None, Query(max_length=1000)] = None,
        attempt: int | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
    ) -> dict[str, Any]:
        """The supersteps of the job's graph operators: of ``window`` (repeat it for several, e.g.
        the windows of a timeline page; ``attempt``: of that attempt only), or, without one, of
        every window (the newest ``limit``; ``total`` counts all), by window, attempt, operator
        and superstep. A job without graph operators has none."""
        if window:
            steps = [s for w in dict.fromkeys(window) for s in lg.list_supersteps(job, window=w)]
        else:
            steps = lg.list_supersteps(job)
        if attempt is not None:
            steps = [s for s in steps if s.attempt == attempt]
        return {"job": job, "supersteps": [superstep_row(s) for s in steps[-limit:]], "total": len(steps)}

    @app.get("/api/jobs/{job}/checkpoints", dependencies=[Depends(_job_with("GET"))])
    def checkpoints(job: str, lg: LgClient, limit: Annotated[int, Query(ge=1, le=10_000)] = 500) -> dict[str, Any]:
        """The job's complete checkpoints, newest first (the newest ``limit``; ``total`` counts all)."""
        cps = lg.list_checkpoints(job)
        return {"checkpoints": [c.to_dict() for c in reversed(cps[-limit:])], "total": len(cps)}

    @app.get("/api/jobs/{job}/transitions", dependencies=[Depends(_job_with("GET"))])
    def transitions(job: str, lg: LgClient) -> dict[str, Any]:
        return {"transitions": [t.to_dict() for t in lg.list_transitions(job)]}

    @app.get("/api/task-instances/{dag_id}/{run_id}/{task_id}", dependencies=[Depends(can_read)])
    def task_instance(
        dag_id: str, run_id: str, task_id: str, lg: LgClient, map_index: int = -1
    ) -> dict[str, Any]:
        return task_windows(lg, dag_id, run_id, task_id, map_index)

    # -- actions ------------------------------------------------------------------------
    @app.post("/api/jobs/{job}/stop", dependencies=[Depends(_job_with("PUT"))])
    def stop(job: str, body: StopBody, user: GetUserDep, lg: LgClient) -> dict[str, Any]:
        _confirm(job, body)
        return _act(user, "stop", job, {"drain": body.drain}, lambda: lg.stop(job, drain=body.drain, timeout=60))

    @app.post("/api/jobs/{job}/restore", dependencies=[Depends(_job_with("PUT"))])
    def restore(job: str, body: RestoreBody, user: GetUserDep, lg: LgClient) -> dict[str, Any]:
        _confirm(job, body)
        return _act(user, "restore", job, {"window": body.window}, lambda: lg.restore(job, body.window))

    @app.post("/api/jobs/{job}/restart")
    def restart(job: str, info: EditableJob, body: Confirmed, user: GetUserDep, lg: LgClient) -> dict[str, Any]:
        """Restart without state: keep what is committed, drop the keyed state; the next
        run resumes after the last committed window with empty state."""
        _confirm(job, body)
        last = info.last_window
        if last is None:
            raise HTTPException(409, f"job '{job}' has no committed window to restart from: run it first")
        return _act(user, "restart", job, {"window": last, "reset_state": True},
                    lambda: lg.restore(job, last, reset_state=True))

    # -- pages --------------------------------------------------------------------------
    @app.get("/ui/", response_class=HTMLResponse)
    def jobs_page(request: Request, user: PageUser) -> HTMLResponse:
        return render_page(request, "jobs", {}, user)

    @app.get("/ui/jobs/{job}", response_class=HTMLResponse)
    def job_page(job: str, request: Request, user: PageUser, lg: LgClient) -> HTMLResponse:
        can_edit = None
        with contextlib.suppress(lockgate.JobNotFoundError):  # the page says the job is missing
            info = lg.get_job(job)
            require_access(user, info, "GET")
            can_edit = may_edit(user, info)
        return render_page(request, "job", {"job": job}, user, can_edit)

    @app.get("/ui/ti/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse)
    def task_page(
        dag_id: str, run_id: str, task_id: str, map_index: str, request: Request, user: PageUser
    ) -> HTMLResponse:
        # Airflow leaves {MAP_INDEX} unreplaced for a task that is not mapped
        index = map_index if map_index.lstrip("-").isdigit() else "-1"
        params = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": index}
        return render_page(request, "task", params, user)

    @app.get("/static/{name}", dependencies=[Depends(page_reader)])
    def static(name: str) -> FileResponse:
        if name not in STATIC_FILES:
            raise HTTPException(404, f"no file {name!r}")
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])

    # -- the API's description, behind the login ---------------------------------------------
    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(page_reader)])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(page_reader)])
    def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=_here(request, "/openapi.json"), title="Lockgate API")

    @app.get("/redoc", include_in_schema=False, dependencies=[Depends(page_reader)])
    def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=_here(request, "/openapi.json"), title="Lockgate API")

    return app


def _here(request: Request, path: str) -> str:
    """``path`` under the prefix the app is mounted at."""
    return f"{request.scope.get('root_path', '').rstrip('/')}{path}"
