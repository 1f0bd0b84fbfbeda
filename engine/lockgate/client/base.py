"""The one client interface for everything that drives Lockgate.

The CLI, the Airflow provider and user code talk to a :class:`Client`; whether the
controller runs in the caller's process (:class:`~lockgate.client.embedded.EmbeddedClient`)
or behind gRPC is chosen by the URL given to :func:`lockgate.connect`.

>>> import lockgate
>>> client = lockgate.connect("embedded")
>>> result = client.run("examples/nexmark_demo.py:pipeline", until_caught_up=True)
>>> result.state, result.windows_run + result.windows_skipped > 0    # doctest: +SKIP
('FINISHED', True)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from ..control.info import (
    CheckpointInfo,
    CompileResult,
    CycleInfo,
    CyclePage,
    JobEvent,
    JobInfo,
    PlanInfo,
    RunResult,
    SuperstepInfo,
    TransitionInfo,
)

EventHandler = Callable[[JobEvent], None]


class Client(ABC):
    """Drives Lockgate: compile pipelines, run windows, start/stop jobs, inspect and
    restore checkpoints. Pipelines are referenced as ``file.py:attr`` or ``module:attr``."""

    @abstractmethod
    def compile(self, pipeline: str) -> CompileResult:
        """Compile and validate ``pipeline``; raises CompileError naming the operator and fix."""

    @abstractmethod
    def submit(self, pipeline: str, job: str | None = None, *, labels: Mapping[str, str] | None = None) -> JobInfo:
        """Compile ``pipeline`` and register it (and its plan version) as ``job``, with
        ``labels`` merged into the job's labels (see :meth:`run`)."""

    @abstractmethod
    def windows_for(self, pipeline: str, start: datetime, end: datetime) -> tuple[int, int]:
        """The cycle windows ``(first, last)`` (inclusive) covering ``[start, end)``."""

    @abstractmethod
    def run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        on_event: EventHandler | None = None,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run windows ``first..last`` in order (committed ones are skipped, a gap is an error).

        ``catchup``: how many due windows one catch-up group may run in one go, each still
        committed and checkpointed on its own: ``"auto"`` (adaptive), ``"off"`` (one window
        per round) or a whole number; None takes ``$LOCKGATE_CATCHUP`` of the process that
        schedules the rounds (``auto`` when unset).

        ``labels``: string pairs recorded on the job (merged into what earlier runs recorded)
        and returned in :attr:`JobInfo.labels`: who runs it. The Airflow provider records
        ``airflow.dag_id`` and ``airflow.task_id``, which the Airflow plugin's permission checks
        read. At most 20, every character visible."""

    @abstractmethod
    def start_run(
        self,
        pipeline: str,
        *,
        job: str | None = None,
        first: int | None = None,
        last: int | None = None,
        until_caught_up: bool = False,
        reset_state: bool = False,
        catchup: str | int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        """Like :meth:`run`, but return as soon as the run has begun; follow it with
        :meth:`get_job`, :meth:`list_checkpoints` or :meth:`watch` (what deferrable Airflow
        operators do). The job is FINISHED when ``last`` is checkpointed, FAILED on error."""

    @abstractmethod
    def start(
        self, pipeline: str, *, job: str | None = None, reset_state: bool = False,
        labels: Mapping[str, str] | None = None,
    ) -> JobInfo:
        """Start a continuous job: windows run as they become available until stopped
        (``labels``: see :meth:`run`)."""

    @abstractmethod
    def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo:
        """Stop a continuous job: ``drain`` finishes the running window and checkpoints it."""

    @abstractmethod
    def get_job(self, job: str) -> JobInfo: ...

    @abstractmethod
    def list_jobs(self) -> list[JobInfo]: ...

    @abstractmethod
    def list_checkpoints(self, job: str) -> list[CheckpointInfo]: ...

    @abstractmethod
    def list_cycles(self, job: str, *, limit: int = 100, before: int | None = None) -> CyclePage:
        """A page of the job's window timeline: its cycles (one per attempt at a window),
        newest first, with state, rows, per-phase timings and the checkpoint each wrote.
        Pass the page's ``next_before`` as ``before`` for the next, older page.

        >>> page = client.list_cycles("demo", limit=50)               # doctest: +SKIP
        >>> [(c.window, c.attempt, c.state) for c in page.cycles[:2]]  # doctest: +SKIP
        [(29453764, 1, 'COMMITTED'), (29453763, 2, 'COMMITTED')]
        """

    @abstractmethod
    def list_supersteps(self, job: str, window: int | None = None) -> list[SuperstepInfo]:
        """The supersteps of the job's graph operators (their iteration cycles), of one
        ``window`` or of all: per attempt, messages sent, vertices changed, milliseconds, and
        why the iteration stopped.

        >>> [(s.superstep, s.messages_sent) for s in client.list_supersteps("links", 20)]  # doctest: +SKIP
        [(0, 0), (1, 1200), (2, 311), (3, 0)]
        """

    @abstractmethod
    def list_transitions(self, job: str) -> list[TransitionInfo]:
        """The job's state transitions, oldest first, each with its reason."""

    @abstractmethod
    def get_plan(self, job: str, plan_version: str | None = None) -> PlanInfo:
        """The logical and physical plans of ``job`` (its current plan version by default)."""

    @abstractmethod
    def restore(self, job: str, window: int, *, reset_state: bool = False) -> JobInfo:
        """Roll ``job`` back to the checkpoint of ``window`` on purpose: later checkpoints are
        dropped and sink output of later windows retracted; the next run resumes at window+1.
        ``reset_state`` also drops the keyed state (restart without state)."""

    @abstractmethod
    def watch(self, job: str, *, timeout: float | None = None) -> Iterator[JobEvent]:
        """Events of ``job`` as they happen, until it reaches a terminal state or ``timeout``."""

    @abstractmethod
    def read_sink(self, job: str, sink: str) -> Any:
        """Committed rows of a CollectSink as a ``pyarrow.Table`` (with an ``lg_window`` column)."""

    @abstractmethod
    def read_state(
        self, job: str, operator: str | None = None, *, window: int | None = None, table: str | None = None
    ) -> Any:
        """One stateful operator's keyed state at a checkpoint as a ``pyarrow.Table``.

        ``window``: the checkpoint (default: the latest complete one); ``operator`` may be left
        out when the job has one stateful operator, ``table`` when the operator keeps one
        (a join keeps ``left`` and ``right``). Windowed state shows ``window_start`` and
        ``window_end`` (a sliding window's state is kept by pane: ``pane_start``, the panes being
        ``gcd(size, slide)`` long); partial aggregates are named after their aggregate. The snapshot is
        verified first (a damaged one raises :class:`~lockgate.errors.SnapshotError`).

        >>> client.read_state("demo", "bidder_totals", window=176722563)  # doctest: +SKIP
        pyarrow.Table
        bidder: int64
        bids: int64
        spent: int64
        """

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release the client's resources."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(ABC):
    """The asyncio face of a client, for code that must not block (Airflow triggers).

    Mirrors the read side of :class:`Client` plus stop; obtain one with
    :func:`lockgate.connect_async`.
    """

    @abstractmethod
    async def get_job(self, job: str) -> JobInfo: ...

    @abstractmethod
    async def list_checkpoints(self, job: str) -> list[CheckpointInfo]: ...

    @abstractmethod
    async def stop(self, job: str, *, drain: bool = True, timeout: float | None = None) -> JobInfo: ...

    @abstractmethod
    def watch(self, job: str, *, timeout: float | None = None) -> AsyncIterator[JobEvent]:
        """Events of ``job`` as they happen (an async iterator)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the client's resources."""


__all__ = [
    "AsyncClient", "CheckpointInfo", "Client", "CompileResult", "CycleInfo", "CyclePage", "EventHandler", "JobEvent",
    "JobInfo", "PlanInfo", "RunResult", "SuperstepInfo", "TransitionInfo",
]
