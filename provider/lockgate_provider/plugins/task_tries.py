"""Which windows each try of a Lockgate task ran: Airflow's task tries against the job's rounds.

A task instance's tries come from Airflow's metadata database (the current try, and the
earlier ones in ``task_instance_history``); the job it drives from the ``lockgate_job`` XCom
every Lockgate operator pushes. A round belongs to the try during which it started, so a
failed try shows where it stopped and its retry where it resumed.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

from airflow.models.taskinstance import TaskInstance
from airflow.models.taskinstancehistory import TaskInstanceHistory
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select

from lockgate import Client, JobNotFoundError
from lockgate_provider.links.lockgate import JOB_XCOM_KEY
from lockgate_provider.plugins.views import cycle_row
from lockgate_provider.utils import short_error

MAX_ROUNDS = 5000
"""The most rounds of one job read to attribute them to tries (newest first)."""


def _job_of(session: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    value = session.execute(
        select(XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
            XComModel.map_index == map_index, XComModel.key == JOB_XCOM_KEY,
        )
    ).scalar()
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return str(value) if value else None


def _tries(session: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> list[dict[str, Any]]:
    where = dict(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    rows = list(session.execute(select(TaskInstanceHistory).filter_by(**where)).scalars())
    current = session.execute(select(TaskInstance).filter_by(**where)).scalar()
    if current is not None:
        rows.append(current)
    out = {}
    for ti in rows:
        if not ti.try_number:
            continue
        out[ti.try_number] = {
            "try_number": ti.try_number, "state": str(ti.state) if ti.state else None,
            "start_date": ti.start_date, "end_date": ti.end_date,
        }
    return [out[n] for n in sorted(out)]


def task_windows(client: Client, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    """The tries of one task instance, each with the rounds of its job that ran during it."""
    with create_session() as session:
        job = _job_of(session, dag_id, run_id, task_id, map_index)
        tries = _tries(session, dag_id, run_id, task_id, map_index)
    answer: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index,
                              "job": job, "tries": []}
    if not tries:
        answer["message"] = "this task instance has not run yet"
        return answer
    rounds = []
    if job is not None:
        try:
            page = client.list_cycles(job, limit=1000)
            rounds = list(page.cycles)
            while page.next_before is not None and len(rounds) < MAX_ROUNDS and (
                    not tries[0]["start_date"] or rounds[-1].started >= tries[0]["start_date"]):
                page = client.list_cycles(job, limit=1000, before=page.next_before)
                rounds += page.cycles
        except JobNotFoundError:
            answer["message"] = f"job '{job}' is not in Lockgate's catalog (deleted, or another connection)"
    else:
        answer["message"] = "no Lockgate job is recorded for this task (it is not a Lockgate task, or it failed first)"
    now = datetime.now(UTC)
    for t in tries:
        start, end = t["start_date"], t["end_date"] or now
        mine = sorted((c for c in rounds if start and start <= c.started <= end), key=lambda c: c.id)
        committed = [c.window for c in mine if c.state == "COMMITTED"]
        failed = [c for c in mine if c.state == "FAILED"]
        answer["tries"].append({
            "try_number": t["try_number"], "state": t["state"],
            "start_date": start.isoformat() if start else None, "end_date": t["end_date"].isoformat()
            if t["end_date"] else None,
            "first_window": mine[0].window if mine else None,
            "last_committed": max(committed) if committed else None,
            "failed_window": failed[-1].window if failed else None,
            "failed_error": short_error(failed[-1].error) if failed and failed[-1].error else None,
            "rounds": [cycle_row(c) for c in mine],
        })
    return answer
