"""Structured, quiet-by-default logging for the engine.

Modules log through ``get_logger(__name__)`` and ``log_event(logger, "event", key=value)``.
Nothing is printed until :func:`configure` installs a handler (the CLI does, at
``LOCKGATE_LOG_LEVEL``, default WARNING); an application that configures the root logger
receives the records instead. A line reads::

    2026-01-02T03:04:05.678Z INFO lockgate.control window_committed job=demo window=3

:func:`configure` also silences PySpark's own query-context loggers, which print a failed
query's context (with a Java stack trace, ~8 KB of JSON) before Lockgate reports the same
error in one line; ``-vv`` (DEBUG) or ``LOCKGATE_SPARK_LOG_LEVEL`` keeps them.
"""

from __future__ import annotations

import json as _json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

ROOT = "lockgate"
_FIELDS = "lockgate_fields"  # LogRecord attribute holding log_event's key=value fields
_EVENT = "lockgate_event"  # LogRecord attribute holding log_event's event name

logging.getLogger(ROOT).addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` under "lockgate" (``lockgate.x`` stays as is, ``x`` becomes ``lockgate.x``)."""
    if name == ROOT or name.startswith(ROOT + "."):
        return logging.getLogger(name)
    return logging.getLogger(f"{ROOT}.{name}")


class _EventMessage:
    """A record's message: the event and its fields, ``event k=v ...``, as a handler that
    is not Lockgate's (Airflow's task log, an application's root handler) shows it. Lockgate's
    own formatter reads the event and the fields from the record instead."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: dict[str, Any]):
        self.event = event
        self.fields = fields

    def __str__(self) -> str:
        return self.event + "".join(f" {k}={_value(v)}" for k, v in self.fields.items())


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``event`` (a short snake_case name) with structured ``fields``.

    Every handler sees the fields: Lockgate's formatter as ``key=value`` pairs (or JSON keys),
    any other one in the message (``record.getMessage()`` is ``event key=value ...``)."""
    if logger.isEnabledFor(level):
        logger.log(level, _EventMessage(event, fields), extra={_FIELDS: fields, _EVENT: event}, stacklevel=2)


def _value(v: Any) -> str:
    if not isinstance(v, str):  # numbers, None, lists, dicts: as JSON
        return _json.dumps(v, default=str, separators=(",", ":"))
    return _json.dumps(v) if (not v or any(c in v for c in ' ="\n\t')) else v


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool):
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        ts = (
            datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
        fields: dict[str, Any] = dict(getattr(record, _FIELDS, {}))
        event = getattr(record, _EVENT, None) or record.getMessage()
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self.as_json:
            head = {"ts": ts, "level": record.levelname, "logger": record.name, "event": event}
            return _json.dumps({**head, **{k: v for k, v in fields.items() if k not in head}}, default=str)
        kv = "".join(f" {k}={_value(v)}" for k, v in fields.items())
        return f"{ts} {record.levelname} {record.name} {event}{kv}"


_handler: logging.Handler | None = None

#: PySpark's loggers that log every AnalysisException's query context, Java stack trace
#: included, before the exception reaches Lockgate (which reports it as one line).
PYSPARK_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
_OFF = logging.CRITICAL + 10


def quiet_pyspark(quiet: bool = True) -> None:
    """Silence (``quiet``) or restore PySpark's query-context loggers.

    Works before PySpark is imported and without importing it: the loggers are created now,
    silenced, and PySpark then finds and uses them. PySpark calls them with its own keyword
    fields (``logger.exception(msg, errorClass=...)``), which a plain logger accepts only
    while disabled, so restoring one created here removes it for PySpark to create its own.
    """
    loggers = logging.Logger.manager.loggerDict
    for name in PYSPARK_QUERY_LOGGERS:
        existing = loggers.get(name)
        if quiet:
            logger = existing if isinstance(existing, logging.Logger) else logging.getLogger(name)
            logger.setLevel(_OFF)
            logger.propagate = False
        elif isinstance(existing, logging.Logger) and existing.level == _OFF:
            if type(existing) is logging.Logger:  # ours: PySpark makes its own on next use
                del loggers[name]
            else:
                existing.setLevel(logging.WARNING)


def configure(level: str | None = None, json: bool = False) -> None:
    """Print "lockgate" records to stderr at ``level`` (else ``LOCKGATE_LOG_LEVEL``, else WARNING).

    One line per record, ``ts level logger event key=value ...``, or one JSON object per line
    with ``json=True``. Calling it again replaces the previous handler. PySpark's
    query-context loggers are silenced unless ``level`` is DEBUG or
    ``LOCKGATE_SPARK_LOG_LEVEL`` is set (see :func:`quiet_pyspark`).
    """
    global _handler
    name = (level or os.environ.get("LOCKGATE_LOG_LEVEL") or "WARNING").strip().upper()
    name = "WARNING" if name == "WARN" else name
    if not isinstance(logging.getLevelName(name), int):
        raise ValueError(f"unknown log level {name!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    root = logging.getLogger(ROOT)
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(_Formatter(json))
    root.addHandler(_handler)
    root.setLevel(name)
    root.propagate = False
    quiet_pyspark(name != "DEBUG" and not os.environ.get("LOCKGATE_SPARK_LOG_LEVEL", "").strip())
