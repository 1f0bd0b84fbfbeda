"""The job state machine (after Arroyo's controller).

A job moves CREATED -> COMPILING -> SCHEDULING -> RUNNING and ends STOPPED, FINISHED or
FAILED; RECOVERING is the detour taken when a worker is lost and the job restores from
its last checkpoint. A terminal job can start again only through COMPILING (a new run).
Every transition is checked here and recorded by the catalog.
"""

from __future__ import annotations

from enum import StrEnum

from .errors import JobStateError


class JobState(StrEnum):
    """The state of a job, as stored in the catalog (a str enum: the value is the stored text)."""

    CREATED = "CREATED"
    COMPILING = "COMPILING"
    SCHEDULING = "SCHEDULING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


_S = JobState

TERMINAL_STATES: frozenset[JobState] = frozenset({_S.STOPPED, _S.FINISHED, _S.FAILED})
"""States a job rests in when no run is under way."""

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.CREATED: frozenset({_S.COMPILING}),
    _S.COMPILING: frozenset({_S.SCHEDULING, _S.FAILED}),
    _S.SCHEDULING: frozenset({_S.RUNNING, _S.RECOVERING, _S.FAILED, _S.STOPPING}),
    _S.RUNNING: frozenset({_S.FINISHED, _S.STOPPING, _S.RECOVERING, _S.FAILED}),
    _S.RECOVERING: frozenset({_S.SCHEDULING, _S.RUNNING, _S.FAILED, _S.STOPPING}),
    _S.STOPPING: frozenset({_S.STOPPED, _S.FAILED}),
    _S.STOPPED: frozenset({_S.COMPILING}),
    _S.FINISHED: frozenset({_S.COMPILING}),
    _S.FAILED: frozenset({_S.COMPILING}),
}
"""The allowed moves: ``TRANSITIONS[old]`` is the set of states ``old`` may move to."""


def parse_state(value: JobState | str) -> JobState:
    """Return ``value`` as a :class:`JobState`; raise JobStateError naming the valid states."""
    if isinstance(value, JobState):
        return value
    try:
        return JobState(str(value).upper())
    except ValueError:
        valid = ", ".join(s.value for s in JobState)
        raise JobStateError(f"unknown job state {value!r}; the job states are {valid}") from None


def is_terminal(state: JobState | str) -> bool:
    """Whether ``state`` is one a job rests in (STOPPED, FINISHED or FAILED)."""
    return parse_state(state) in TERMINAL_STATES


def _names(states: frozenset[JobState]) -> str:
    ordered = [s.value for s in JobState if s in states]
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " or " + ordered[-1]


def check_transition(old: JobState | str, new: JobState | str, job: str | None = None) -> None:
    """Raise JobStateError unless a job may move from ``old`` to ``new``.

    The message names both states and the states ``old`` may move to; ``job`` (optional)
    names the job in it.
    """
    old_s, new_s = parse_state(old), parse_state(new)
    allowed = TRANSITIONS[old_s]
    if new_s in allowed:
        return
    who = f"job '{job}'" if job else "a job"
    raise JobStateError(
        f"{who} cannot move from {old_s.value} to {new_s.value}; "
        f"from {old_s.value} it can move only to {_names(allowed)}"
    )
