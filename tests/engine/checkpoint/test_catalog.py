"""The SQL catalog on real SQLite files and a real PostgreSQL database (no mocks)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from datetime import UTC
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql

from lockgate.checkpoint import Catalog, CheckpointStatus, CycleState
from lockgate.checkpoint.catalog import StagedCycle, metadata
from lockgate.control import JobState
from lockgate.errors import (
    CatalogError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    CycleStateError,
    FencedError,
    InvalidArgumentError,
    JobNotFoundError,
    JobStateError,
    PlanNotFoundError,
)

PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
ENGINE_DIR = Path(__file__).resolve().parents[3] / "engine"


@pytest.fixture(scope="module")
def pg_database():
    """A fresh PostgreSQL database for this module, dropped afterwards."""
    name = f"lockgate_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return
    database = request.getfixturevalue("pg_database")
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    yield url
    engine = sa.create_engine(url)  # every test starts from an empty schema
    metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def catalog(catalog_url):
    cat = Catalog(catalog_url)
    yield cat
    cat.close()


def dump(cat: Catalog) -> dict[str, list[tuple]]:
    """Every row of every catalog table, to show that a refused call wrote nothing."""
    with cat.engine.connect() as conn:
        return {
            t.name: sorted(tuple(str(v) for v in row) for row in conn.execute(sa.select(t)))
            for t in metadata.sorted_tables
        }


def running_job(cat: Catalog, name: str = "orders") -> int:
    cat.ensure_job(name, "pipelines/orders.py:pipeline")
    for state in ("COMPILING", "SCHEDULING", "RUNNING"):
        cat.transition(name, state, f"to {state}")
    return cat.acquire(name)


def run_window(cat: Catalog, job: str, generation: int, window: int, **overrides):
    cycle = cat.begin_cycle(job, window, generation, "plan-1")
    cat.stage_cycle(cycle.id, generation, {"sink": [f"w{window}.parquet"]}, rows_in=10, rows_out=7)
    args = dict(
        window=window,
        plan_version="plan-1",
        positions={"src": window + 1},
        snapshot_uri=f"/snapshots/{job}/w={window:010d}-a{cycle.attempt}",
        snapshot_manifest={"agg": {"files": [], "rows": 0}},
        sink_commits={"sink": f"commit-{window}"},
        rows_in=10,
        rows_out=7,
        timings={"commit": 1.5},
    )
    args.update(overrides)
    return cat.complete_window(job, generation, cycle.id, **args)


# -- jobs and transitions --------------------------------------------------------------


def test_ensure_get_list_delete_job(catalog):
    with pytest.raises(JobNotFoundError, match="no jobs yet"):
        catalog.get_job("nope")
    job = catalog.ensure_job("orders", "a.py:p", options={"parallelism": 2})
    assert job.state is JobState.CREATED and job.generation == 0 and job.options == {"parallelism": 2}
    assert job.created.tzinfo == UTC and job.updated.tzinfo == UTC
    again = catalog.ensure_job("orders", "b.py:p")
    assert again.pipeline_ref == "b.py:p" and again.options == {"parallelism": 2}
    assert again.created == job.created
    catalog.ensure_job("clicks", "c.py:p")
    assert [j.name for j in catalog.list_jobs()] == ["clicks", "orders"]
    with pytest.raises(JobNotFoundError, match="known jobs: clicks, orders"):
        catalog.get_job("nope")

    gen = running_job(catalog, "orders")
    run_window(catalog, "orders", gen, 0)
    assert catalog.delete_job("orders") == ["/snapshots/orders/w=0000000000-a1"]
    assert [j.name for j in catalog.list_jobs()] == ["clicks"]
    tables = dump(catalog)
    assert not any("orders" in str(rows) for rows in tables.values())


def test_valid_transitions_are_recorded(catalog):
    catalog.ensure_job("orders", "a.py:p")
    for state in ("COMPILING", "SCHEDULING", "RUNNING", "RECOVERING", "RUNNING", "FINISHED", "COMPILING"):
        job = catalog.transition("orders", state, f"go {state}")
        assert job.state is JobState(state)
    moves = catalog.transitions("orders")
    assert [(t.from_state, t.to_state) for t in moves[:3]] == [
        (None, JobState.CREATED),
        (JobState.CREATED, JobState.COMPILING),
        (JobState.COMPILING, JobState.SCHEDULING),
    ]
    assert moves[-1].from_state is JobState.FINISHED and moves[-1].reason == "go COMPILING"
    assert all(t.at.tzinfo == UTC for t in moves)


def test_invalid_transition_is_refused_and_changes_nothing(catalog):
    catalog.ensure_job("orders", "a.py:p")
    before = dump(catalog)
    with pytest.raises(JobStateError, match=r"CREATED to RUNNING.*only to COMPILING"):
        catalog.transition("orders", JobState.RUNNING, "skip ahead")
    with pytest.raises(JobStateError, match="unknown job state"):
        catalog.transition("orders", "DANCING")
    assert dump(catalog) == before
    assert catalog.get_job("orders").state is JobState.CREATED


def test_failed_transition_stores_last_error(catalog):
    catalog.ensure_job("orders", "a.py:p")
    catalog.transition("orders", "COMPILING")
    job = catalog.transition("orders", "FAILED", "pipeline did not compile")
    assert job.state is JobState.FAILED and job.last_error == "pipeline did not compile"


def test_a_job_that_finishes_after_a_failure_shows_no_old_error(catalog):
    catalog.ensure_job("orders", "a.py:p")
    catalog.transition("orders", "COMPILING")
    catalog.transition("orders", "FAILED", "sink database down")
    for state in ("COMPILING", "SCHEDULING", "RUNNING"):
        assert catalog.transition("orders", state).last_error == "sink database down"  # still recovering
    assert catalog.transition("orders", "FINISHED", "done").last_error is None
    assert ("COMPILING", "FAILED", "sink database down") in [
        (t.from_state and t.from_state.value, t.to_state.value, t.reason) for t in catalog.transitions("orders")
    ]  # the error stays in the job's history
    assert catalog.note_error("orders", "SnapshotError: damaged").last_error == "SnapshotError: damaged"
    assert catalog.get_job("orders").state is JobState.FINISHED  # a note moves nothing


# -- fencing ---------------------------------------------------------------------------


def test_old_generation_is_fenced_and_writes_nothing(catalog):
    old = running_job(catalog)
    cycle = catalog.begin_cycle("orders", 0, old, "plan-1")
    new = catalog.acquire("orders")
    assert new == old + 1
    before = dump(catalog)
    with pytest.raises(FencedError, match=f"generation {old} is fenced.*current generation is {new}"):
        catalog.begin_cycle("orders", 1, old, "plan-1")
    with pytest.raises(FencedError):
        catalog.stage_cycle(cycle.id, old, {}, 1, 1)
    with pytest.raises(FencedError):
        catalog.complete_window(
            "orders",
            old,
            cycle.id,
            window=0,
            plan_version="plan-1",
            positions={},
            snapshot_uri=None,
            snapshot_manifest=None,
            sink_commits=None,
            rows_in=0,
            rows_out=0,
        )
    with pytest.raises(FencedError):
        catalog.rollback_to("orders", 0, old)
    with pytest.raises(FencedError):
        catalog.transition("orders", "STOPPING", "old runner", expected_generation=old)
    assert dump(catalog) == before
    # The new runner aborts the old runner's open cycle and goes on.
    aborted = catalog.abort_open_cycles("orders")
    assert [c.id for c in aborted] == [cycle.id] and aborted[0].state is CycleState.ABORTED
    assert run_window(catalog, "orders", new, 0).window == 0


# -- cycles ----------------------------------------------------------------------------


def test_cycle_lifecycle(catalog):
    gen = running_job(catalog)
    first = catalog.begin_cycle("orders", 0, gen, "plan-1")
    assert (first.state, first.attempt, first.generation) == (CycleState.RUNNING, 1, gen)
    failed = catalog.fail_cycle(first.id, "executor lost")
    assert failed.state is CycleState.FAILED and failed.error == "executor lost" and failed.finished
    assert catalog.fail_cycle(first.id, "again").error == "executor lost"  # no-op once failed
    with pytest.raises(CycleStateError, match="it is FAILED, not RUNNING"):
        catalog.stage_cycle(first.id, gen, {}, 0, 0)

    second = catalog.begin_cycle("orders", 0, gen, "plan-1")
    assert second.attempt == 2
    staged = catalog.stage_cycle(second.id, gen, {"sink": ["a"]}, 5, 4, late_rows=1, timings={"read": 3})
    assert (staged.state, staged.rows_in, staged.rows_out, staged.late_rows) == (CycleState.STAGED, 5, 4, 1)
    timed = catalog.update_cycle_timings(second.id, {"write": 2.5})
    assert timed.timings == {"read": 3, "write": 2.5}
    assert [c.id for c in catalog.staged_cycles("orders")] == [second.id]

    cp = catalog.complete_window(
        "orders",
        gen,
        second.id,
        window=0,
        plan_version="plan-1",
        positions={"src": 5},
        snapshot_uri="s",
        snapshot_manifest={},
        sink_commits=["c0"],
        rows_in=5,
        rows_out=4,
        timings={"commit": 1},
    )
    assert cp.status is CheckpointStatus.COMPLETE and cp.cycle_id == second.id
    committed = catalog.get_cycle(second.id)
    assert committed.state is CycleState.COMMITTED
    assert committed.timings == {"read": 3, "write": 2.5, "commit": 1}
    assert catalog.staged_cycles("orders") == []
    with pytest.raises(CycleStateError, match="COMMITTED"):
        catalog.fail_cycle(second.id, "too late")

    # Open cycles: RUNNING ones always abort; STAGED ones only after the restore window.
    running = catalog.begin_cycle("orders", 1, gen, "plan-1")
    assert catalog.abort_open_cycles("orders", reason="worker lost")[0].error == "worker lost"
    retry = catalog.begin_cycle("orders", 1, gen, "plan-1")
    assert retry.attempt == 2
    catalog.stage_cycle(retry.id, gen, {}, 1, 1)
    assert catalog.abort_open_cycles("orders") == []  # STAGED stays: it can still be committed
    assert [c.id for c in catalog.abort_open_cycles("orders", staged_after=0)] == [retry.id]
    assert [c.id for c in catalog.list_cycles("orders")] == [retry.id, running.id, second.id, first.id]
    assert len(catalog.list_cycles("orders", limit=2)) == 2


def test_a_group_begins_and_stages_its_cycles_together_or_not_at_all(catalog):
    gen = running_job(catalog)
    run_window(catalog, "orders", gen, 2)
    before = dump(catalog)
    with pytest.raises(CheckpointExistsError, match="window 2 is complete already"):
        catalog.begin_cycles("orders", [0, 1, 2, 3], gen, "plan-1")
    assert dump(catalog) == before  # windows 0 and 1 did not begin either

    group = catalog.begin_cycles("orders", [3, 4, 5], gen, "plan-1")
    assert [(c.window, c.attempt, c.state) for c in group] == [(w, 1, CycleState.RUNNING) for w in (3, 4, 5)]
    catalog.fail_cycle(group[2].id, "lost")
    before = dump(catalog)
    staged = [StagedCycle(c.id, {"sink": [f"w{c.window}"]}, 10, 7, 1, {"read": 2}) for c in group]
    with pytest.raises(CycleStateError, match="it is FAILED, not RUNNING"):
        catalog.stage_cycles(gen, staged)
    assert dump(catalog) == before  # windows 3 and 4 were not staged either
    with pytest.raises(FencedError):
        catalog.stage_cycles(gen - 1, staged[:2])
    done = catalog.stage_cycles(gen, staged[:2])
    assert [(c.state, c.rows_in, c.rows_out, c.late_rows, c.timings) for c in done] == [
        (CycleState.STAGED, 10, 7, 1, {"read": 2})
    ] * 2
    assert [c.window for c in catalog.staged_cycles("orders")] == [3, 4]
    again = catalog.begin_cycles("orders", [5, 6], gen, "plan-1")  # window 5's second attempt
    assert [(c.window, c.attempt, c.state, c.generation) for c in again] == [
        (5, 2, CycleState.RUNNING, gen), (6, 1, CycleState.RUNNING, gen)]
    assert len({c.id for c in [*group, *again]}) == 5


# -- checkpoints -----------------------------------------------------------------------


def test_complete_window_duplicate_is_refused_and_changes_nothing(catalog):
    gen = running_job(catalog)
    one = catalog.begin_cycle("orders", 0, gen, "plan-1")
    two = catalog.begin_cycle("orders", 0, gen, "plan-1")
    for c in (one, two):
        catalog.stage_cycle(c.id, gen, {}, 1, 1)
    args = dict(
        window=0,
        plan_version="plan-1",
        positions={"src": 1},
        snapshot_uri="s",
        snapshot_manifest={},
        sink_commits=None,
        rows_in=1,
        rows_out=1,
    )
    catalog.complete_window("orders", gen, one.id, **args)
    before = dump(catalog)
    with pytest.raises(CheckpointExistsError, match="window 0 already has a complete checkpoint"):
        catalog.complete_window("orders", gen, two.id, **args)
    with pytest.raises(CheckpointExistsError, match="window 0 is complete already"):
        catalog.begin_cycle("orders", 0, gen, "plan-1")
    assert dump(catalog) == before
    assert catalog.get_cycle(two.id).state is CycleState.STAGED


def test_complete_window_is_one_transaction(catalog):
    gen = running_job(catalog)
    cycle = catalog.begin_cycle("orders", 0, gen, "plan-1")
    catalog.stage_cycle(cycle.id, gen, {}, 1, 1)
    before = dump(catalog)
    # The checkpoint row is inserted first; the cycle update then fails (timings are not
    # JSON): the insert must be rolled back with it.
    with pytest.raises((TypeError, sa.exc.StatementError)):
        catalog.complete_window(
            "orders",
            gen,
            cycle.id,
            window=0,
            plan_version="plan-1",
            positions={},
            snapshot_uri="s",
            snapshot_manifest={},
            sink_commits=None,
            rows_in=1,
            rows_out=1,
            timings={"x": object()},
        )
    assert dump(catalog) == before
    assert catalog.last_checkpoint("orders") is None
    with pytest.raises(CycleStateError, match="window 0 of job 'orders', not window 3"):
        catalog.complete_window(
            "orders",
            gen,
            cycle.id,
            window=3,
            plan_version="plan-1",
            positions={},
            snapshot_uri="s",
            snapshot_manifest={},
            sink_commits=None,
            rows_in=1,
            rows_out=1,
        )
    assert dump(catalog) == before


def test_last_and_get_checkpoint(catalog):
    gen = running_job(catalog)
    assert catalog.last_checkpoint("orders") is None
    with pytest.raises(CheckpointNotFoundError, match="no complete checkpoints"):
        catalog.get_checkpoint("orders", 0)
    for w in range(3):
        run_window(catalog, "orders", gen, w)
    last = catalog.last_checkpoint("orders")
    assert last.window == 2 and last.positions == {"src": 3} and last.sink_commits == {"sink": "commit-2"}
    assert last.created.tzinfo == UTC
    assert catalog.get_checkpoint("orders", 1).snapshot_uri == "/snapshots/orders/w=0000000001-a1"
    with pytest.raises(CheckpointNotFoundError, match="windows 0, 1, 2"):
        catalog.get_checkpoint("orders", 7)
    with pytest.raises(JobNotFoundError):
        catalog.last_checkpoint("nope")


def test_rollback_to_an_older_window(catalog):
    gen = running_job(catalog)
    for w in range(4):
        run_window(catalog, "orders", gen, w)
    with pytest.raises(CheckpointNotFoundError, match="cannot roll back to window 9"):
        catalog.rollback_to("orders", 9, gen)
    assert catalog.rollback_to("orders", 1, gen) == [2, 3]
    assert catalog.last_checkpoint("orders").window == 1
    with pytest.raises(CheckpointNotFoundError, match="window 2 .its checkpoint is ROLLED_BACK"):
        catalog.get_checkpoint("orders", 2)
    # Window 2 runs again (attempt 2) and replaces the rolled-back checkpoint.
    redo = run_window(catalog, "orders", gen, 2)
    assert redo.snapshot_uri.endswith("-a2")
    assert catalog.last_checkpoint("orders").window == 2
    history = [(c.window, c.status) for c in catalog.list_checkpoints("orders", include_inactive=True)]
    assert history == [
        (0, CheckpointStatus.COMPLETE),
        (1, CheckpointStatus.COMPLETE),
        (2, CheckpointStatus.ROLLED_BACK),
        (2, CheckpointStatus.COMPLETE),
        (3, CheckpointStatus.ROLLED_BACK),
    ]
    assert [c.window for c in catalog.list_checkpoints("orders")] == [0, 1, 2]


def test_expire_checkpoints_never_expires_the_latest(catalog):
    gen = running_job(catalog)
    assert catalog.expire_checkpoints("orders", keep=1) == []
    for w in range(5):
        run_window(catalog, "orders", gen, w)
    expired = catalog.expire_checkpoints("orders", keep=2)
    assert [c.window for c in expired] == [0, 1, 2]
    assert all(c.status is CheckpointStatus.EXPIRED for c in expired)
    assert [c.window for c in catalog.expire_checkpoints("orders", keep=1)] == [3]
    assert catalog.expire_checkpoints("orders", keep=1) == []
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        catalog.expire_checkpoints("orders", keep=0)
    assert [c.window for c in catalog.list_checkpoints("orders")] == [4]
    assert catalog.last_checkpoint("orders").window == 4
    with pytest.raises(CheckpointNotFoundError, match="EXPIRED"):
        catalog.get_checkpoint("orders", 0)


# -- plans and URLs --------------------------------------------------------------------


def test_plans(catalog):
    catalog.ensure_job("orders", "a.py:p")
    with pytest.raises(PlanNotFoundError):
        catalog.set_job_plan("orders", "v1")
    plan = catalog.save_plan("v1", "orders", '{"ops": []}', {"agg": {"columns": ["k"]}})
    assert catalog.save_plan("v1", "orders", '{"ops": []}', {}) == plan  # idempotent
    with pytest.raises(CatalogError, match="different plan JSON"):
        catalog.save_plan("v1", "orders", '{"ops": [1]}', {})
    assert catalog.get_plan("v1").state_layout == {"agg": {"columns": ["k"]}}
    with pytest.raises(PlanNotFoundError):
        catalog.get_plan("v2")
    assert catalog.set_job_plan("orders", "v1").plan_version == "v1"


def test_catalog_urls(catalog_url, tmp_path):
    if catalog_url.startswith("postgresql"):
        plain = catalog_url.replace("postgresql+psycopg://", "postgresql://")
        cat = Catalog(plain)
        assert cat.url.startswith("postgresql+psycopg://")
    else:
        cat = Catalog(tmp_path / "nested" / "dir" / "catalog.db")  # a plain path is a SQLite file
        assert cat.url == f"sqlite:///{tmp_path}/nested/dir/catalog.db"
    cat.ensure_job("j", "a.py:p")
    cat.close()
    with pytest.raises(CatalogError, match="unsupported catalog URL"):
        Catalog("mysql://u@h/db")


# -- two catalogs, one SQLite file -----------------------------------------------------


def test_two_catalogs_share_one_sqlite_file(tmp_path):
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    first, second = Catalog(url), Catalog(url)
    with first.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    old = running_job(first)
    assert second.get_job("orders").state is JobState.RUNNING
    new = second.acquire("orders")  # a new runner takes over through the other object
    with pytest.raises(FencedError):
        first.begin_cycle("orders", 0, old, "plan-1")
    run_window(second, "orders", new, 0)
    assert first.last_checkpoint("orders").window == 0

    # Two processes writing at once wait for each other instead of failing.
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ENGINE_DIR)!r})
        from lockgate.checkpoint import Catalog
        cat = Catalog({url!r})
        name = sys.argv[1]
        cat.ensure_job(name, "a.py:p")
        gen = cat.acquire(name)
        for w in range(25):
            c = cat.begin_cycle(name, w, gen, None)
            cat.stage_cycle(c.id, gen, {{}}, 1, 1)
            cat.complete_window(name, gen, c.id, window=w, plan_version=None, positions={{}},
                snapshot_uri=None, snapshot_manifest=None, sink_commits=None, rows_in=1, rows_out=1)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, f"job{i}"]) for i in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    for i in range(3):
        assert first.last_checkpoint(f"job{i}").window == 24
    first.close()
    second.close()


def test_the_timeline_pages_through_ten_thousand_rounds_with_their_checkpoints(catalog):
    """A job of 10,000 windows (one failed first try, a rolled-back tail), paged 1,000 at a time:
    every round once, newest first, each with the status of the checkpoint it wrote."""
    from datetime import datetime

    from lockgate.checkpoint.catalog.schema import checkpoints_table, cycles_table

    running_job(catalog)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cycles, checkpoints = [], []
    for i in range(10_000):
        window = 1000 + i
        if i == 5000:  # a failed first try of this window, then its retry
            cycles.append(dict(id=len(cycles) + 1, job="orders", window=window, attempt=1, generation=1,
                               state="FAILED", rows_in=0, rows_out=0, late_rows=0, error="boom", started=now,
                               finished=now))
        cycles.append(dict(id=len(cycles) + 1, job="orders", window=window, attempt=2 if i == 5000 else 1,
                           generation=1, state="COMMITTED", rows_in=i, rows_out=0, late_rows=0, error=None,
                           started=now, finished=now))
        status = "ROLLED_BACK" if i >= 9990 else "COMPLETE"
        checkpoints.append(dict(job="orders", window=window, cycle_id=len(cycles), status=status, rows_in=i,
                                rows_out=0, created=now))
    with catalog.engine.begin() as conn:
        conn.execute(sa.insert(cycles_table), cycles)
        conn.execute(sa.insert(checkpoints_table), checkpoints)

    seen, before, pages = [], None, 0
    while True:
        page, total = catalog.cycle_page("orders", 1000, before)
        pages += 1
        seen += page
        if len(page) < 1000:
            break
        before = page[-1][0].id
    assert total == 10_001 and len(seen) == 10_001 and pages == 11
    ids = [c.id for c, _ in seen]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    status = {(c.window, c.attempt): s for c, s in seen}
    assert status[(10_999, 1)] == "ROLLED_BACK" and status[(10_989, 1)] == "COMPLETE"
    assert status[(6000, 1)] is None and status[(6000, 2)] == "COMPLETE"  # the failed try wrote no checkpoint
    with pytest.raises(JobNotFoundError):
        catalog.cycle_page("nope", 10)
