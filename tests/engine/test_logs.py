"""Structured log events: Lockgate's formatter shows ``event key=value``; a handler that is not
Lockgate's (Airflow's task log, an application's root handler) sees the same fields in the
message, never a bare event name."""

from __future__ import annotations

import io
import json
import logging

from lockgate import logs


def _capture(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO, logging.Handler]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger = logs.get_logger("control.transitions")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger, out, handler


def test_a_foreign_handler_sees_the_fields_in_the_message():
    logger, out, handler = _capture(logging.Formatter("%(message)s [%(name)s]"))
    try:
        logs.log_event(logger, "job_state", job="demo", state="RUNNING", reason="windows 3..5")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue().strip() == 'job_state job=demo state=RUNNING reason="windows 3..5" [lockgate.control.transitions]'


def test_lockgates_formatter_shows_each_field_once():
    logger, out, handler = _capture(logs._Formatter(as_json=False))
    try:
        logs.log_event(logger, "job_state", job="demo", state="RUNNING")
    finally:
        logger.removeHandler(handler)
    line = out.getvalue().strip()
    assert line.endswith("INFO lockgate.control.transitions job_state job=demo state=RUNNING"), line
    assert line.count("job=demo") == 1


def test_the_json_formatter_keeps_the_event_name_and_fields_apart():
    logger, out, handler = _capture(logs._Formatter(as_json=True))
    try:
        logs.log_event(logger, "window_committed", job="demo", window=3)
    finally:
        logger.removeHandler(handler)
    record = json.loads(out.getvalue())
    assert record["event"] == "window_committed" and record["job"] == "demo" and record["window"] == 3
