"""Plans: compiled plans stored under their version (the hash of their JSON), and a job's
current plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError

from ...errors import CatalogError, PlanNotFoundError
from .base import CatalogBase
from .connection import fetch_all, fetch_one
from .jobs import lock_job, require_job
from .records import JobRecord, PlanRecord, job_record, plan_record
from .schema import jobs_table, plans_table, utcnow


class PlansMixin(CatalogBase):
    """Plan versions and the job's current plan."""

    def save_plan(
        self, plan_version: str, pipeline_name: str, plan_json: str, state_layout: Mapping[str, Any]
    ) -> PlanRecord:
        """Store a plan under its version (idempotent); CatalogError if the version is
        already stored with a different plan JSON."""
        try:
            row = self._save_plan(plan_version, pipeline_name, plan_json, state_layout)
        except IntegrityError:  # another process stored it between our read and insert
            row = self._save_plan(plan_version, pipeline_name, plan_json, state_layout)
        if row["plan_json"] != plan_json:
            raise CatalogError(
                f"plan version '{plan_version}' is already stored with a different plan JSON; a plan "
                "version must be the hash of its plan"
            )
        return plan_record(row)

    def _save_plan(
        self, plan_version: str, pipeline_name: str, plan_json: str, state_layout: Mapping[str, Any]
    ) -> RowMapping:
        where = plans_table.c.plan_version == plan_version
        with self._write() as conn:
            row = fetch_one(conn, sa.select(plans_table).where(where))
            if row is not None:
                return row
            conn.execute(
                sa.insert(plans_table).values(
                    plan_version=plan_version,
                    pipeline_name=pipeline_name,
                    plan_json=plan_json,
                    state_layout=dict(state_layout),
                    created=utcnow(),
                )
            )
            return fetch_all(conn, sa.select(plans_table).where(where))[0]

    def get_plan(self, plan_version: str) -> PlanRecord:
        """The plan stored under ``plan_version``; PlanNotFoundError when there is none."""
        with self._read() as conn:
            row = fetch_one(conn, sa.select(plans_table).where(plans_table.c.plan_version == plan_version))
            if row is None:
                raise PlanNotFoundError(
                    f"plan version '{plan_version}' not found in the catalog; compile the pipeline first"
                )
            return plan_record(row)

    def set_job_plan(self, name: str, plan_version: str) -> JobRecord:
        """Make ``plan_version`` (already saved) the job's current plan."""
        with self._write() as conn:
            lock_job(conn, name, self.url)
            exists = conn.execute(
                sa.select(plans_table.c.plan_version).where(plans_table.c.plan_version == plan_version)
            ).first()
            if exists is None:
                raise PlanNotFoundError(
                    f"job '{name}': plan version '{plan_version}' not found in the catalog; save it first"
                )
            conn.execute(
                sa.update(jobs_table)
                .where(jobs_table.c.name == name)
                .values(plan_version=plan_version, updated=utcnow())
            )
            return job_record(require_job(conn, name, self.url))
