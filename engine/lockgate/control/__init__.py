"""The control plane: the one writer of job states (:mod:`.transitions`, over the state
machine in :mod:`lockgate.states`, which the catalog shares), the cycle scheduler that runs a job's rounds (:mod:`.scheduler`), the
job operations the embedded client and the controller share (:mod:`.jobs`), and what
clients are told about jobs (:mod:`.info`). Nothing here imports Spark."""

from ..states import TERMINAL_STATES, TRANSITIONS, JobState, check_transition, is_terminal, parse_state

__all__ = ["TERMINAL_STATES", "TRANSITIONS", "JobState", "check_transition", "is_terminal", "parse_state"]
