"""The job state machine."""

from __future__ import annotations

import pytest

from lockgate.control import TRANSITIONS, JobState, check_transition, is_terminal
from lockgate.errors import JobStateError


def test_every_state_has_transitions():
    assert set(TRANSITIONS) == set(JobState)
    assert isinstance(JobState.RUNNING, str) and JobState.RUNNING == "RUNNING"


def test_terminal_states_only_restart_through_compiling():
    assert {s for s in JobState if is_terminal(s)} == {JobState.STOPPED, JobState.FINISHED, JobState.FAILED}
    for state in (JobState.STOPPED, JobState.FINISHED, JobState.FAILED):
        assert TRANSITIONS[state] == frozenset({JobState.COMPILING})
    assert is_terminal("failed")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("CREATED", "COMPILING"),
        ("COMPILING", "SCHEDULING"),
        ("SCHEDULING", "RECOVERING"),
        ("RUNNING", "RECOVERING"),
        ("RECOVERING", "RUNNING"),
        ("STOPPING", "STOPPED"),
        ("FAILED", "COMPILING"),
    ],
)
def test_allowed(old, new):
    check_transition(old, new)


def test_refused_names_both_states_and_the_allowed_ones():
    with pytest.raises(JobStateError) as info:
        check_transition(JobState.STOPPING, JobState.RUNNING, job="orders")
    assert str(info.value) == (
        "job 'orders' cannot move from STOPPING to RUNNING; from STOPPING it can move only to STOPPED or FAILED"
    )
    with pytest.raises(
        JobStateError, match="from RUNNING it can move only to RECOVERING, STOPPING, FINISHED or FAILED"
    ):
        check_transition("RUNNING", "RUNNING")
    with pytest.raises(JobStateError, match="unknown job state 'PAUSED'"):
        check_transition("RUNNING", "PAUSED")
