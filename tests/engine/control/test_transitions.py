"""JobTransitions: every state move of a job, on a real SQLite catalog."""

from __future__ import annotations

import pytest

from lockgate.checkpoint.catalog import Catalog
from lockgate.control.transitions import JobTransitions, path_between
from lockgate.errors import FencedError, JobStateError
from lockgate.states import TRANSITIONS, JobState

S = JobState


@pytest.fixture
def catalog(tmp_path):
    cat = Catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    yield cat
    cat.close()


def test_paths_are_allowed_and_shortest():
    for old in JobState:
        for new in JobState:
            if old == new:
                assert path_between(old, new) == []
                continue
            if new == S.CREATED:  # a job is created once and never returns there
                with pytest.raises(JobStateError, match=f"cannot get from {old.value} to CREATED"):
                    path_between(old, new)
                continue
            path = path_between(old, new)
            assert path[-1] == new
            prev = old
            for step in path:
                assert step in TRANSITIONS[prev], (old, new, path)
                prev = step
    assert path_between(S.RUNNING, S.STOPPED) == [S.STOPPING, S.STOPPED]
    assert path_between(S.COMPILING, S.STOPPED) == [S.SCHEDULING, S.STOPPING, S.STOPPED]
    assert path_between(S.FINISHED, S.FAILED) == [S.COMPILING, S.FAILED]


def test_moves_are_recorded_with_reasons_and_announced(catalog):
    catalog.ensure_job("orders", "p.py:p")
    heard = []
    moves = JobTransitions(catalog, "orders", catalog.acquire("orders"), on_move=lambda s, r: heard.append((s, r)))
    moves.walk(S.RUNNING, "windows 1..3", via_reason="starting")
    assert moves.current() == S.RUNNING and moves.state == S.RUNNING
    assert [s for s, _ in heard] == [S.COMPILING, S.SCHEDULING, S.RUNNING]
    assert heard[-1][1] == "windows 1..3" and heard[0][1] == "starting"
    recorded = [(t.to_state, t.reason) for t in catalog.transitions("orders")]
    assert recorded[-1] == (S.RUNNING, "windows 1..3")


def test_stop_fail_recover_take_the_allowed_paths(catalog):
    catalog.ensure_job("j", "p.py:p")
    moves = JobTransitions(catalog, "j", catalog.acquire("j"))
    moves.stop("nothing runs")  # CREATED: nothing to stop
    assert moves.current() == S.CREATED
    assert moves.recover("lost") is False
    moves.walk(S.RUNNING, "run")
    assert moves.recover("worker lost") is True
    assert moves.current() == S.RECOVERING
    moves.stop("stop requested")
    assert [t.to_state for t in catalog.transitions("j")][-2:] == [S.STOPPING, S.STOPPED]
    moves.fail("broken")  # a resting job is taken into a run, then failed
    assert moves.current() == S.FAILED
    n = len(catalog.transitions("j"))
    moves.fail("again")  # already FAILED: no move
    assert len(catalog.transitions("j")) == n


def test_a_move_the_machine_refuses_and_a_fenced_runner(catalog):
    catalog.ensure_job("j", "p.py:p")
    old = JobTransitions(catalog, "j", catalog.acquire("j"))
    old.move(S.COMPILING, "run")
    with pytest.raises(JobStateError, match="cannot move from COMPILING to FINISHED"):
        old.move(S.FINISHED, "too soon")
    JobTransitions(catalog, "j", catalog.acquire("j"))  # a newer runner takes the job
    with pytest.raises(FencedError):
        old.move(S.SCHEDULING, "stale")
