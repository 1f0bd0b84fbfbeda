"""Client dataclasses <-> protocol messages."""

from __future__ import annotations

from typing import Any

from ..client.base import CheckpointInfo, CompileResult, JobEvent, JobInfo, RunResult
from ..clock import from_micros, to_micros
from .generated import lockgate_controller_pb2 as pb


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def job_to_pb(j: JobInfo) -> pb.Job:
    m = pb.Job(name=j.name, state=j.state, pipeline_ref=j.pipeline_ref, generation=j.generation)
    if j.plan_version is not None:
        m.plan_version = j.plan_version
    if j.last_window is not None:
        m.last_window = j.last_window
    if j.last_error is not None:
        m.last_error = j.last_error
    if j.updated is not None:
        m.updated_us = to_micros(j.updated)
    return m


def job_from_pb(m: pb.Job) -> JobInfo:
    updated = _opt(m, "updated_us")
    return JobInfo(
        name=m.name, state=m.state, pipeline_ref=m.pipeline_ref, plan_version=_opt(m, "plan_version"),
        generation=m.generation, last_window=_opt(m, "last_window"), last_error=_opt(m, "last_error"),
        updated=from_micros(updated) if updated is not None else None,
    )


def checkpoint_to_pb(c: CheckpointInfo) -> pb.Checkpoint:
    m = pb.Checkpoint(
        job=c.job, window=c.window, window_start_us=to_micros(c.window_start), window_end_us=to_micros(c.window_end),
        rows_in=c.rows_in, rows_out=c.rows_out, status=c.status, created_us=to_micros(c.created),
    )
    if c.plan_version is not None:
        m.plan_version = c.plan_version
    if c.snapshot_uri is not None:
        m.snapshot_uri = c.snapshot_uri
    return m


def checkpoint_from_pb(m: pb.Checkpoint) -> CheckpointInfo:
    return CheckpointInfo(
        job=m.job, window=m.window, window_start=from_micros(m.window_start_us), window_end=from_micros(m.window_end_us),
        plan_version=_opt(m, "plan_version"), rows_in=m.rows_in, rows_out=m.rows_out, status=m.status,
        created=from_micros(m.created_us), snapshot_uri=_opt(m, "snapshot_uri"),
    )


def event_to_pb(e: JobEvent) -> pb.JobEvent:
    m = pb.JobEvent(kind=e.kind, job=e.job, rows_in=e.rows_in, rows_out=e.rows_out, late_rows=e.late_rows,
                    message=e.message or "", at=e.at)
    if e.window is not None:
        m.window = e.window
    if e.state is not None:
        m.state = e.state
    for k, v in (e.timings or {}).items():
        m.timings[k] = float(v)
    return m


def event_from_pb(m: pb.JobEvent) -> JobEvent:
    return JobEvent(
        kind=m.kind, job=m.job, window=_opt(m, "window"), state=_opt(m, "state"), rows_in=m.rows_in,
        rows_out=m.rows_out, late_rows=m.late_rows, timings=dict(m.timings), message=m.message, at=m.at,
    )


def compile_to_pb(c: CompileResult, plan_json: str) -> pb.CompileResponse:
    return pb.CompileResponse(
        pipeline=c.pipeline, plan_version=c.plan_version, operators=c.operators,
        stateful_operators=c.stateful_operators, sinks=c.sinks, cycle_window_s=c.cycle_window_s,
        explain=c.explain, plan_json=plan_json,
    )


def compile_from_pb(m: pb.CompileResponse) -> CompileResult:
    return CompileResult(
        pipeline=m.pipeline, plan_version=m.plan_version, operators=list(m.operators),
        stateful_operators=list(m.stateful_operators), sinks=list(m.sinks), cycle_window_s=m.cycle_window_s,
        explain=m.explain,
    )


def result_to_pb(r: RunResult) -> pb.RunResult:
    m = pb.RunResult(
        job=r.job, windows_run=r.windows_run, windows_skipped=r.windows_skipped, rows_in=r.rows_in,
        rows_out=r.rows_out, late_rows=r.late_rows, elapsed_s=r.elapsed_s, state=r.state,
    )
    if r.first_window is not None:
        m.first_window = r.first_window
    if r.last_window is not None:
        m.last_window = r.last_window
    return m


def result_from_pb(m: pb.RunResult) -> RunResult:
    return RunResult(
        job=m.job, first_window=_opt(m, "first_window"), last_window=_opt(m, "last_window"),
        windows_run=m.windows_run, windows_skipped=m.windows_skipped, rows_in=m.rows_in, rows_out=m.rows_out,
        late_rows=m.late_rows, elapsed_s=m.elapsed_s, state=m.state,
    )
