"""What the provider's hook, operators, sensor and triggers share, in one place.

* job states, taken from the engine (:data:`ACTIVE_STATES`, :func:`is_active`);
* templated values as instants and window ids (:func:`as_datetime`, :func:`as_window`,
  :func:`data_interval`), and an instant as the last window ending at or before it
  (:func:`window_ending_by`);
* checkpoints as plain dicts (:func:`checkpoint_dict`, :func:`checkpoint_at`), a run's
  summary (:func:`run_summary`) and the partition key of a window (:func:`partition_key`);
* the messages of a window gap and of a failed run (:func:`gap_message`, :func:`failed_run_message`);
* engine errors as the Airflow error that says what to do (:func:`airflow_errors`).

Nothing here talks to Lockgate or to Airflow's database: every function takes the values it
works on, so it is tested without Spark or a scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from lockgate import CheckpointInfo, JobState
from lockgate.errors import (
    DETAIL_MARKER,
    CompileError,
    JobNotFoundError,
    LockgateError,
    PipelineLoadError,
    WindowGapError,
)

ACTIVE_STATES: frozenset[JobState] = frozenset(
    {JobState.COMPILING, JobState.SCHEDULING, JobState.RUNNING, JobState.RECOVERING, JobState.STOPPING}
)
"""States of a job with a run under way (CREATED has never run; the terminal states rest)."""

RUNNING_STATES: frozenset[JobState] = frozenset({JobState.SCHEDULING, JobState.RUNNING, JobState.RECOVERING})
"""States counted as running in the connection test's summary."""


class LockgateWindowGapError(AirflowException):
    """Windows were asked for while an earlier window of the job is not complete."""


def _state(value: object) -> JobState | None:
    try:
        return JobState(str(value))
    except ValueError:
        return None


def is_active(state: object) -> bool:
    """Whether ``state`` (a job state, or any other status text) is one of :data:`ACTIVE_STATES`."""
    return _state(state) in ACTIVE_STATES


def is_running(state: object) -> bool:
    """Whether ``state`` is one of :data:`RUNNING_STATES`."""
    return _state(state) in RUNNING_STATES


# -- templated values --------------------------------------------------------------------
def _missing(value: Any) -> bool:
    # a template that rendered None gives the text "None"
    return value is None or value == "" or value == "None"


def as_datetime(value: Any, what: str) -> datetime | None:
    """A timezone-aware plain :class:`datetime` from a datetime, a pendulum DateTime or an ISO
    string (naive values are UTC); ``None`` for an empty value. ``what`` names the argument in errors."""
    if _missing(value):
        return None
    if isinstance(value, datetime):
        # a pendulum DateTime (Airflow's data interval) as a plain datetime: the engine's
        # datetime arithmetic fails on pendulum's own (DateTime - datetime is a pendulum Interval)
        dt = value if type(value) is datetime else datetime.fromisoformat(value.isoformat())
    else:
        try:
            dt = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise AirflowFailException(
                f"{what}={value!r} is not an ISO date-time (e.g. 2026-01-01T00:00:00+00:00)"
            ) from None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def as_window(value: Any, what: str) -> int | None:
    """A window id from an int or a (templated) string of digits; ``None`` for an empty value."""
    if _missing(value):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AirflowFailException(f"{what}={value!r} is not a window id (an integer)") from None


def is_window_id(value: Any) -> bool:
    """Whether ``value`` names a window id (an int or a string of digits) rather than an instant."""
    return isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())


DAG_LABEL = "airflow.dag_id"
"""The job label naming the DAG whose task ran the job (the plugin's permission checks read it)."""
TASK_LABEL = "airflow.task_id"
"""The job label naming that task."""


def airflow_labels(context: Mapping[str, Any]) -> dict[str, str]:
    """The labels a task records on the job it runs: its DAG and task ids."""
    ti = context.get("ti") or context.get("task_instance")
    dag_id = getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", None)
    task_id = getattr(ti, "task_id", None) or getattr(context.get("task"), "task_id", None)
    return {k: str(v) for k, v in ((DAG_LABEL, dag_id), (TASK_LABEL, task_id)) if v}


def data_interval(context: Mapping[str, Any], start: Any = None, end: Any = None) -> tuple[datetime | None, datetime | None]:
    """The event-time range of a task: ``start`` / ``end`` when given, else the DAG run's data interval."""
    return (
        as_datetime(start, "start") or as_datetime(context.get("data_interval_start"), "data_interval_start"),
        as_datetime(end, "end") or as_datetime(context.get("data_interval_end"), "data_interval_end"),
    )


def instant_range(at: datetime) -> tuple[datetime, datetime]:
    """The one-microsecond range ending at ``at``: its last window is the last one ending at or before ``at``."""
    return at - timedelta(microseconds=1), at


def iso(dt: datetime | None) -> str | None:
    """``dt`` as ISO text, ``None`` kept."""
    return dt.isoformat() if dt else None


# -- checkpoints and results -------------------------------------------------------------
def checkpoint_dict(cp: CheckpointInfo) -> dict[str, Any]:
    """A checkpoint as plain JSON values (what XCom, trigger events and asset extras hold)."""
    return {
        "window": cp.window,
        "window_start": cp.window_start.isoformat(),
        "window_end": cp.window_end.isoformat(),
        "rows_in": cp.rows_in,
        "rows_out": cp.rows_out,
        "plan_version": cp.plan_version,
        "created": cp.created.isoformat() if cp.created else None,
    }


def checkpoint_at(checkpoints: Iterable[CheckpointInfo], window: int) -> dict[str, Any] | None:
    """The checkpoint of ``window`` as a dict; when its row has expired (``keep_checkpoints``),
    the first later one; ``None`` when there is none."""
    cps = sorted(checkpoints, key=lambda c: c.window)
    at = [c for c in cps if c.window == window] or [c for c in cps if c.window >= window]
    return checkpoint_dict(at[0]) if at else None


def partition_key(entry: Mapping[str, Any]) -> str:
    """The partition key of a window entry: its start, ``%Y-%m-%dT%H:%M:%S`` UTC (what Airflow's
    temporal partition mappers read), or the window id when the start is not known."""
    start = entry.get("window_start")
    if not start:
        return str(entry["window"])
    return datetime.fromisoformat(start).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def run_summary(
    job: str,
    first: int,
    last: int,
    *,
    start: datetime | None,
    end: datetime | None,
    checkpoints: Iterable[CheckpointInfo],
    window_rows: Mapping[int, Mapping[str, Any]] | None = None,
    cycle_s: float | None = None,
    plan_version: str | None = None,
) -> dict[str, Any]:
    """The summary of a run of windows ``first..last`` (what the run operator returns).

    Each window's entry comes from its checkpoint; a window whose checkpoint row expired
    (``keep_checkpoints``) gets its time range from a checkpoint of the range (else
    ``cycle_s``) and its row counts from ``window_rows`` (what the run itself reported).
    """
    rows_of = window_rows or {}
    cps = {c.window: c for c in checkpoints if first <= c.window <= last}
    ref = next(iter(cps.values()), None)
    cycle = ref.window_end - ref.window_start if ref is not None else timedelta(seconds=cycle_s or 0)
    windows: list[dict[str, Any]] = []
    for w in range(first, last + 1):
        cp = cps.get(w)
        if cp is not None:
            entry = {
                "window": w, "window_start": iso(cp.window_start), "window_end": iso(cp.window_end),
                "rows_in": cp.rows_in, "rows_out": cp.rows_out, "plan_version": cp.plan_version,
            }
        else:
            rows = rows_of.get(w, {})
            ws = ref.window_start + cycle * (w - ref.window) if ref is not None else None
            entry = {
                "window": w, "window_start": iso(ws), "window_end": iso(ws + cycle) if ws else None,
                "rows_in": rows.get("rows_in"), "rows_out": rows.get("rows_out"), "plan_version": plan_version,
            }
        windows.append(entry)
    return {
        "job": job,
        "first_window": first,
        "last_window": last,
        "windows": len(windows),
        "rows_in": sum(e["rows_in"] or 0 for e in windows),
        "rows_out": sum(e["rows_out"] or 0 for e in windows),
        "start": iso(start),
        "end": iso(end),
        "checkpoints": windows,
    }


# -- messages ------------------------------------------------------------------------------
_CAUSE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)):\s+\S")


def short_error(error: object, limit: int = 600) -> str:
    """An engine error in a line or two: its first line and its root cause (the last
    ``SomethingError: message`` line), without the Python and JVM tracebacks in between. A
    Spark failure Lockgate read is its one line: Spark's text after ``DETAIL_MARKER`` is left out."""
    text = str(error).split(DETAIL_MARKER, 1)[0].strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return text[:limit]
    causes = [ln.strip() for ln in lines[1:] if _CAUSE.match(ln)]
    head = lines[0].strip()
    out = head if not causes or causes[-1] in head else f"{head} ... {causes[-1]}"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def gap_message(job: str, first: int, last: int, done: int, last_checkpoint: CheckpointInfo | None) -> str:
    """Why windows ``first..last`` of ``job`` cannot run while its last complete window is
    ``done`` (< ``first - 1``): the missing windows, their time range (from the last
    checkpoint, when it is that of ``done``) and the fix."""
    when = ""
    cp = last_checkpoint
    if cp is not None and cp.window == done:
        gap_start = cp.window_end
        gap_end = gap_start + (cp.window_end - cp.window_start) * (first - done - 1)
        when = f" ({iso(gap_start)} to {iso(gap_end)})"
    missing = f"window {done + 1}" if done + 1 == first - 1 else f"windows {done + 1}..{first - 1}"
    return (
        f"Lockgate job '{job}' cannot run windows {first}..{last}: {missing}{when} "
        f"not complete yet (the job's last complete window is {done}), and windows run strictly in order. "
        "Fix: run the DAG run(s) of the earlier data interval first (trigger or clear them), and set "
        "depends_on_past=True (with max_active_runs=1) on this task so that intervals always run in order."
    )


def failed_run_message(job: str, first: int, error: str | None, done: int | None) -> str:
    """The message of a run of ``job`` from window ``first`` that failed with ``error`` after
    window ``done`` was committed: the error in short, and where a retry resumes."""
    nxt = first if done is None or done < first else done + 1
    return (
        f"Lockgate job '{job}' failed: {short_error(error or 'no error recorded')}. Windows up to {done} are "
        f"committed; a retry restores the checkpoint of window {done} and resumes at window {nxt}."
    )


# -- errors ----------------------------------------------------------------------------------
@contextmanager
def airflow_errors(*, pipeline: str | None = None, action: str | None = None, retry: bool = True) -> Iterator[None]:
    """Raise the engine errors met in the block as the Airflow error that says what to do.

    * :class:`~lockgate.CompileError` / ``PipelineLoadError``: :class:`AirflowFailException`
      (retrying cannot fix a pipeline) with the compile error's own message;
    * :class:`~lockgate.WindowGapError`: :class:`LockgateWindowGapError`, with the fix;
    * :class:`~lockgate.JobNotFoundError`: :class:`AirflowFailException` with its message;
    * any other :class:`~lockgate.LockgateError`: ``"<action> failed: <error>"`` as an
      :class:`AirflowException` (an :class:`AirflowFailException` with ``retry=False``) when
      ``action`` is given, else the engine's error unchanged.

    :param pipeline: the pipeline reference the block works on, named in compile errors.
    :param action: what the block does, for people ("Stopping job 'bids'").
    :param retry: whether a retry may help with the other engine errors.
    """
    try:
        yield
    except (CompileError, PipelineLoadError) as err:
        what = f"Lockgate pipeline {pipeline!r}" if pipeline else "The Lockgate pipeline"
        raise AirflowFailException(f"{what} does not compile: {err}") from None
    except WindowGapError as err:
        raise LockgateWindowGapError(f"{err} Set depends_on_past=True on this task.") from None
    except JobNotFoundError as err:
        raise AirflowFailException(str(err)) from None
    except LockgateError as err:
        if action is None:
            raise
        error = AirflowException if retry else AirflowFailException
        raise error(f"{action} failed: {err}") from None
