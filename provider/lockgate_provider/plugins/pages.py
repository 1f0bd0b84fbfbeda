"""The plugin's pages: one HTML shell per page, filled in by ``static/lockgate.js`` from the API.

Plain HTML styled to match Airflow's UI (its fonts, colours and state colours), rendered
inside Airflow (an ``external_views`` iframe), so the job pages need no build step.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from lockgate_provider import __version__
from lockgate_provider.links.lockgate import NAV_ROUTE
from lockgate_provider.plugins.access import may_edit_every_dag

TITLES = {"jobs": "Lockgate jobs", "job": "Lockgate job {job}", "task": "Lockgate windows of {task_id}"}


def render_page(
    request: Request, kind: str, params: dict[str, str], user: Any, can_edit: bool | None = None
) -> HTMLResponse:
    """The shell of page ``kind`` (``jobs``, ``job`` or ``task``) for ``params``; ``can_edit``:
    whether the user may act on what the page shows (None: on every DAG)."""
    base = str(request.scope.get("root_path") or "").rstrip("/")
    edit = may_edit_every_dag(user) if can_edit is None else can_edit
    data = {"kind": kind, "base": base, "nav": f"/plugin/{NAV_ROUTE}", "can-edit": "true" if edit else "false",
            "user": str(user.get_name()), **params}
    attrs = " ".join(f'data-{k.replace("_", "-")}="{html.escape(v, quote=True)}"' for k, v in data.items())
    title = html.escape(TITLES[kind].format(**params))
    return HTMLResponse(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{base}/static/lockgate.css?v={__version__}">
</head><body>
<main id="app" {attrs}><p class="muted">Loading…</p></main>
<script src="{base}/static/lockgate.js?v={__version__}"></script>
</body></html>""")
