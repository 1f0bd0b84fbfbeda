"""The record of every action taken through the plugin: who asked, on which job, what came of it.

Each action is written to Airflow's audit log (``Browse > Audit Log``, the ``log`` table,
event ``lockgate.<action>``) with the Airflow user who asked, and to the api-server's log.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.models.log import Log
from airflow.utils.session import create_session

log = logging.getLogger("lockgate_provider.plugins")


def record_action(user: str, action: str, job: str, details: dict[str, Any], outcome: str) -> None:
    """Write one action to Airflow's audit log and to the api-server's log."""
    extra = json.dumps({"job": job, **details, "outcome": outcome}, default=str)
    log.info("lockgate %s of job %r by %s: %s (%s)", action, job, user, outcome, extra)
    with create_session() as session:
        session.add(Log(event=f"lockgate.{action}", owner=user, extra=extra))
