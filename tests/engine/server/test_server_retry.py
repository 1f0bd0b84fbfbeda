"""Which failures a controller's run retries: errors that say the request or the round is
wrong (an out-of-range window, a ValueError, a refused pipeline reference, a round that
failed deterministically in its worker) are never retried; lost workers and passing
failures are."""

from __future__ import annotations

from lockgate.errors import InvalidArgumentError, PipelineRefusedError
from lockgate.server.errors import CycleFailedError, WorkerLostError
from lockgate.server.runner import is_transient
from lockgate.server.worker import is_deterministic


def test_wrong_requests_and_deterministic_rounds_are_never_retried():
    for err in (OverflowError("date value out of range"), ValueError("bad"), TypeError("bad"),
                ZeroDivisionError("x"), InvalidArgumentError("window out of range"), PipelineRefusedError("no"),
                CycleFailedError("window 3 failed: OverflowError", "OverflowError", "", deterministic=True),
                CycleFailedError("window 3 failed", "InvalidArgumentError", "INVALID_ARGUMENT")):
        assert not is_transient(err), err
    for err in (WorkerLostError("gone"), ConnectionError("reset"), RuntimeError("py4j"),
                CycleFailedError("window 3 failed: Py4JNetworkError", "Py4JNetworkError", "")):
        assert is_transient(err), err


def test_the_worker_calls_out_of_range_values_and_value_errors_deterministic():
    assert is_deterministic(OverflowError("date value out of range"))
    assert is_deterministic(ValueError("x")) and is_deterministic(TypeError("x"))
    assert not is_deterministic(InvalidArgumentError("a Lockgate error says so by its code"))
    assert not is_deterministic(ConnectionError("x")) and not is_deterministic(RuntimeError("x"))
