"""The SQL catalog: jobs, plans, job state transitions, cycles and checkpoints.

SQLAlchemy Core over SQLite (a file, the default; WAL mode and a busy timeout so several
processes can share it) or PostgreSQL (``postgresql+psycopg://``). Every method runs in
its own transaction. Writes made on behalf of a runner are *fenced*: they take the
runner's generation (from :meth:`Catalog.acquire`) and are refused with
:class:`~lockgate.errors.FencedError` once a newer runner has acquired the job.

A window is complete only when its checkpoint row is committed
(:meth:`Catalog.complete_window`); that one transaction also marks the cycle COMMITTED.

A read-only or locked database raises :class:`~lockgate.errors.CatalogReadOnlyError` or
:class:`~lockgate.errors.CatalogLockedError`, naming the database and the fix.

Modules, one concept each: :mod:`.records` (states and records), :mod:`.schema` (tables and
their creation), :mod:`.connection` (URLs, engine, SQLite settings), :mod:`.unavailable`
(read-only and locked databases), :mod:`.base` (engine and transactions), :mod:`.jobs`
(jobs, transitions, generations), :mod:`.plans`, :mod:`.cycles`, :mod:`.windows` (which
windows are complete), :mod:`.supersteps` (graph iteration cycles) and :mod:`.checkpoints`.
"""

from __future__ import annotations

from .base import CatalogBase
from .checkpoints import CheckpointsMixin
from .connection import SQLITE_BUSY_TIMEOUT_MS, normalize_url
from .cycles import CyclesMixin, StagedCycle
from .jobs import JobsMixin
from .plans import PlansMixin
from .records import (
    CheckpointRecord,
    CheckpointStatus,
    CycleRecord,
    CycleState,
    JobRecord,
    PlanRecord,
    SuperstepRecord,
    TransitionRecord,
)
from .schema import (
    SCHEMA_VERSION,
    UTCDateTime,
    checkpoints_table,
    cycles_table,
    jobs_table,
    metadata,
    plans_table,
    schema_table,
    supersteps_table,
    transitions_table,
    utcnow,
)
from .supersteps import SuperstepsMixin


class Catalog(JobsMixin, PlansMixin, CyclesMixin, SuperstepsMixin, CheckpointsMixin, CatalogBase):
    """The SQL catalog of jobs, plans, transitions, cycles (with their supersteps) and checkpoints.

    ``url`` is a SQLAlchemy URL (``sqlite:////abs/path/catalog.db``,
    ``postgresql+psycopg://user@host:port/db``; ``postgresql://`` is rewritten to psycopg)
    or a plain file path (a SQLite file). Tables are created when missing. A SQLite URL may
    carry ``?timeout=SECONDS``: how long a write waits for another process's write lock
    (default 30).
    """


__all__ = [
    "SCHEMA_VERSION",
    "SQLITE_BUSY_TIMEOUT_MS",
    "Catalog",
    "CheckpointRecord",
    "CheckpointStatus",
    "CycleRecord",
    "CycleState",
    "JobRecord",
    "PlanRecord",
    "StagedCycle",
    "SuperstepRecord",
    "TransitionRecord",
    "UTCDateTime",
    "checkpoints_table",
    "cycles_table",
    "jobs_table",
    "metadata",
    "normalize_url",
    "plans_table",
    "schema_table",
    "supersteps_table",
    "transitions_table",
    "utcnow",
]
