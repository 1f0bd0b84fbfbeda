"""Client dataclasses <-> protocol messages."""

from __future__ import annotations

import json
from typing import Any

from ..client.base import (
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
    m.labels.update(j.labels)
    return m


def job_from_pb(m: pb.Job) -> JobInfo:
    updated = _opt(m, "updated_us")
    return JobInfo(
        name=m.name, state=m.state, pipeline_ref=m.pipeline_ref, plan_version=_opt(m, "plan_version"),
        generation=m.generation, last_window=_opt(m, "last_window"), last_error=_opt(m, "last_error"),
        updated=from_micros(updated) if updated is not None else None, labels=dict(m.labels),
    )


def checkpoint_to_pb(c: CheckpointInfo) -> pb.Checkpoint:
    m = pb.Checkpoint(
        job=c.job, window=c.window, window_start_us=to_micros(c.window_start), window_end_us=to_micros(c.window_end),
        rows_in=c.rows_in, rows_out=c.rows_out, status=c.status, created_us=to_micros(c.created),
        snapshot_bytes=c.snapshot_bytes,
    )
    if c.plan_version is not None:
        m.plan_version = c.plan_version
    if c.snapshot_uri is not None:
        m.snapshot_uri = c.snapshot_uri
    m.sink_rows.update(c.sink_rows)
    return m


def checkpoint_from_pb(m: pb.Checkpoint) -> CheckpointInfo:
    return CheckpointInfo(
        job=m.job, window=m.window, window_start=from_micros(m.window_start_us), window_end=from_micros(m.window_end_us),
        plan_version=_opt(m, "plan_version"), rows_in=m.rows_in, rows_out=m.rows_out, status=m.status,
        created=from_micros(m.created_us), snapshot_uri=_opt(m, "snapshot_uri"), snapshot_bytes=m.snapshot_bytes,
        sink_rows=dict(m.sink_rows),
    )


def _micros(value: Any) -> int | None:
    return to_micros(value) if value is not None else None


def _instant(m: Any, name: str) -> Any:
    value = _opt(m, name)
    return from_micros(value) if value is not None else None


def cycle_page_to_pb(page: CyclePage) -> pb.ListCyclesResponse:
    out = pb.ListCyclesResponse(total=page.total)
    if page.next_before is not None:
        out.next_before = page.next_before
    for c in page.cycles:
        m = out.cycles.add(
            id=c.id, job=c.job, window=c.window, attempt=c.attempt, generation=c.generation, state=c.state,
            rows_in=c.rows_in, rows_out=c.rows_out, late_rows=c.late_rows, started_us=to_micros(c.started),
            invalid_rows=c.invalid_rows,
        )
        m.timings.update(c.timings)
        for name, value in (("window_start_us", _micros(c.window_start)), ("window_end_us", _micros(c.window_end)),
                            ("finished_us", _micros(c.finished)), ("plan_version", c.plan_version),
                            ("error", c.error), ("checkpoint", c.checkpoint)):
            if value is not None:
                setattr(m, name, value)
    return out


def cycle_page_from_pb(m: pb.ListCyclesResponse) -> CyclePage:
    cycles = [
        CycleInfo(
            id=c.id, job=c.job, window=c.window, window_start=_instant(c, "window_start_us"),
            window_end=_instant(c, "window_end_us"), attempt=c.attempt, generation=c.generation,
            plan_version=_opt(c, "plan_version"), state=c.state, rows_in=c.rows_in, rows_out=c.rows_out,
            late_rows=c.late_rows, timings=dict(c.timings), error=_opt(c, "error"),
            started=from_micros(c.started_us), finished=_instant(c, "finished_us"), checkpoint=_opt(c, "checkpoint"),
            invalid_rows=c.invalid_rows,
        )
        for c in m.cycles
    ]
    return CyclePage(cycles=cycles, total=m.total, next_before=_opt(m, "next_before"))


def superstep_to_pb(s: SuperstepInfo) -> pb.Superstep:
    m = pb.Superstep(job=s.job, window=s.window, attempt=s.attempt, operator=s.operator, superstep=s.superstep,
                     messages_sent=s.messages_sent, vertices_changed=s.vertices_changed,
                     active_vertices=s.active_vertices, elapsed_ms=s.elapsed_ms, checkpointed=s.checkpointed,
                     resumed=s.resumed)
    if s.halted_by is not None:
        m.halted_by = s.halted_by
    return m


def superstep_from_pb(m: pb.Superstep) -> SuperstepInfo:
    return SuperstepInfo(job=m.job, window=m.window, attempt=m.attempt, operator=m.operator, superstep=m.superstep,
                         messages_sent=m.messages_sent, vertices_changed=m.vertices_changed,
                         active_vertices=m.active_vertices, elapsed_ms=m.elapsed_ms,
                         halted_by=_opt(m, "halted_by"), checkpointed=m.checkpointed, resumed=m.resumed)


def transition_to_pb(t: TransitionInfo) -> pb.Transition:
    m = pb.Transition(job=t.job, to_state=t.to_state, reason=t.reason, at_us=to_micros(t.at))
    if t.from_state is not None:
        m.from_state = t.from_state
    return m


def transition_from_pb(m: pb.Transition) -> TransitionInfo:
    return TransitionInfo(job=m.job, from_state=_opt(m, "from_state"), to_state=m.to_state, reason=m.reason,
                          at=from_micros(m.at_us))


def plan_to_pb(p: PlanInfo) -> pb.Plan:
    return pb.Plan(
        plan_version=p.plan_version, pipeline=p.pipeline, logical_json=json.dumps(p.logical, default=str),
        physical_json=json.dumps(p.physical), state_layout_json=json.dumps(p.state_layout, default=str),
        created_us=to_micros(p.created),
    )


def plan_from_pb(m: pb.Plan) -> PlanInfo:
    return PlanInfo(
        plan_version=m.plan_version, pipeline=m.pipeline, logical=json.loads(m.logical_json),
        physical=json.loads(m.physical_json), state_layout=json.loads(m.state_layout_json),
        created=from_micros(m.created_us),
    )


def event_to_pb(e: JobEvent) -> pb.JobEvent:
    m = pb.JobEvent(kind=e.kind, job=e.job, rows_in=e.rows_in, rows_out=e.rows_out, late_rows=e.late_rows,
                    message=e.message or "", at=e.at)
    if e.window is not None:
        m.window = e.window
    if e.state is not None:
        m.state = e.state
    if e.total_windows is not None:
        m.total_windows = e.total_windows
    for k, v in (e.timings or {}).items():
        m.timings[k] = float(v)
    return m


def event_from_pb(m: pb.JobEvent) -> JobEvent:
    return JobEvent(
        kind=m.kind, job=m.job, window=_opt(m, "window"), state=_opt(m, "state"), rows_in=m.rows_in,
        rows_out=m.rows_out, late_rows=m.late_rows, timings=dict(m.timings), message=m.message, at=m.at,
        total_windows=_opt(m, "total_windows"),
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
