"""A job's events over gRPC: what a client is told is what the controller said, the run's
total (``total_windows`` of ``run_planned``) included, and absent where it was absent."""

from __future__ import annotations

from lockgate.client.base import JobEvent
from lockgate.server import convert


def test_run_planned_keeps_its_total_over_the_wire() -> None:
    e = JobEvent("run_planned", "j", window=12, total_windows=5, message="5 windows to run", at=1.5)
    assert convert.event_from_pb(convert.event_to_pb(e)) == e


def test_an_event_without_a_total_has_none() -> None:
    e = JobEvent("cycle_done", "j", window=12, rows_in=3, rows_out=2, late_rows=1, timings={"read": 4.0})
    back = convert.event_from_pb(convert.event_to_pb(e))
    assert back == e and back.total_windows is None
    zero = JobEvent("run_planned", "j", window=12, total_windows=0, message="0 windows to run")
    assert convert.event_from_pb(convert.event_to_pb(zero)).total_windows == 0
