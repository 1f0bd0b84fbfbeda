"""Every state move of a job goes through here: checked, recorded, announced.

:class:`JobTransitions` is the one writer of a job's state. It moves a job one allowed
step (:meth:`JobTransitions.move`) or along the shortest allowed path to a target
(:meth:`JobTransitions.walk`, e.g. a RUNNING job to STOPPED goes through STOPPING), always
under the generation that owns the job, so a fenced runner cannot move it. Observers
(the scheduler's event stream, logs) hear of each move through ``on_move``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..checkpoint.catalog import Catalog
from ..errors import JobStateError
from ..logs import get_logger, log_event
from ..states import TRANSITIONS, JobState, is_terminal

log = get_logger("control.transitions")


def path_between(old: JobState, new: JobState) -> list[JobState]:
    """The shortest list of states that takes a job from ``old`` to ``new`` (``new`` last);
    empty when ``old`` is ``new``."""
    if old == new:
        return []
    prev: dict[JobState, JobState] = {}
    todo = deque([old])
    while todo:
        s = todo.popleft()
        for nxt in sorted(TRANSITIONS[s], key=list(JobState).index):
            if nxt in prev or nxt == old:
                continue
            prev[nxt] = s
            if nxt == new:
                out = [new]
                while out[-1] in prev and prev[out[-1]] != old:
                    out.append(prev[out[-1]])
                return out[::-1]
            todo.append(nxt)
    raise JobStateError(f"a job cannot get from {old.value} to {new.value}")  # only CREATED is never re-entered


class JobTransitions:
    """The state moves of one job, written to the catalog under ``generation``.

    :param on_move: called after each recorded move with ``(state, reason)``.
    """

    def __init__(
        self,
        catalog: Catalog,
        job: str,
        generation: int | None = None,
        on_move: Callable[[JobState, str], None] | None = None,
    ):
        self.catalog = catalog
        self.job = job
        self.generation = generation
        self.on_move = on_move
        #: the last state these transitions moved the job to (None before the first move)
        self.state: JobState | None = None

    def current(self) -> JobState:
        """The job's state as the catalog holds it."""
        return self.catalog.get_job(self.job).state

    def move(self, state: JobState, reason: str) -> None:
        """One move to ``state`` (which the state machine must allow from the current one)."""
        self.catalog.transition(self.job, state, reason, expected_generation=self.generation)
        self.state = state
        log_event(log, "job_state", job=self.job, state=state.value, reason=reason)
        if self.on_move is not None:
            self.on_move(state, reason)

    def walk(self, target: JobState, reason: str, via_reason: str | None = None) -> None:
        """Move along the shortest allowed path to ``target``; the last move carries ``reason``,
        the ones before it ``via_reason`` (default: ``reason``). No move when already there."""
        steps = path_between(self.current(), target)
        for s in steps:
            self.move(s, reason if s == target else (via_reason or reason))

    # -- the moves every run makes -------------------------------------------------------
    def stop(self, reason: str) -> None:
        """To STOPPED (through STOPPING); nothing when the job rests already or never ran."""
        state = self.current()
        if is_terminal(state) or state == JobState.CREATED:
            return
        self.walk(JobState.STOPPED, reason)

    def fail(self, reason: str) -> None:
        """To FAILED (a resting job is first taken into a new run); nothing when FAILED."""
        if self.current() == JobState.FAILED:
            return
        self.walk(JobState.FAILED, reason, via_reason="run requested")

    def recover(self, reason: str) -> bool:
        """To RECOVERING when a run is under way (SCHEDULING or RUNNING); True when moved."""
        if self.current() in (JobState.RUNNING, JobState.SCHEDULING):
            self.move(JobState.RECOVERING, reason)
            return True
        return False


__all__ = ["JobTransitions", "path_between"]
