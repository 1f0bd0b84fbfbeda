"""The control plane: the job state machine (the scheduler and controller come later)."""

from .states import TERMINAL_STATES, TRANSITIONS, JobState, check_transition, is_terminal, parse_state

__all__ = ["TERMINAL_STATES", "TRANSITIONS", "JobState", "check_transition", "is_terminal", "parse_state"]
