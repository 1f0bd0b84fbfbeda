"""Helpers of tests that start servers on loopback: a free port, and waiting for a condition."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Call ``pred`` every ``every`` seconds until it returns something true (returned), or
    fail the test after ``timeout`` seconds naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}", pytrace=False)
        time.sleep(every)
