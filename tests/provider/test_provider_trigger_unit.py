"""The triggers' tolerance of an unreachable controller, against a real gRPC address on
loopback with nothing listening (no Spark, no scheduler, no mock: the engine's gRPC client
really fails to connect)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest

from lockgate_provider.hooks.lockgate import LockgateHook
from lockgate_provider.triggers.lockgate import LockgateCheckpointTrigger, LockgateRunTrigger

POLL = 0.02


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dead_conn(port: int) -> str:
    return json.dumps({"conn_type": "lockgate", "host": "127.0.0.1", "port": port, "extra": {"timeout": 2}})


@pytest.fixture(scope="module")
def _imports_done() -> None:
    """Read a connection and make a gRPC client once, so that the tests time the triggers,
    not the first import of Airflow's connection lookup and of the engine's gRPC client."""

    async def warm() -> None:
        client = await LockgateHook("lg_warm").aget_async_conn()
        await client.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_LG_WARM", _dead_conn(_dead_port()))
        asyncio.run(warm())


@pytest.fixture
def dead_controller(monkeypatch: pytest.MonkeyPatch, _imports_done: None) -> str:
    """The connection ``lg_dead``: a controller at a loopback port with nothing listening."""
    port = _dead_port()
    monkeypatch.setenv("AIRFLOW_CONN_LG_DEAD", _dead_conn(port))
    return f"grpc://127.0.0.1:{port}"


def _first_event(trigger: Any, timeout: float = 30) -> dict[str, Any]:
    async def go() -> Any:
        agen = trigger.run()
        try:
            return await asyncio.wait_for(agen.__anext__(), timeout)
        finally:
            await agen.aclose()

    return asyncio.run(go()).payload


def _log(capfd: pytest.CaptureFixture[str]) -> list[str]:
    """The lines the trigger logged (Airflow's structlog writes them to the console)."""
    out, err = capfd.readouterr()
    return (out + err).splitlines()


def _retries(lines: list[str]) -> list[str]:
    return [ln for ln in lines if "cannot reach Lockgate" in ln]


@pytest.mark.parametrize(
    "make",
    [
        lambda n: LockgateRunTrigger("bids", 10, 12, lockgate_conn_id="lg_dead", poll_interval=POLL,
                                     max_unreachable=n, stop_on_kill=False),
        lambda n: LockgateCheckpointTrigger("bids", 12, lockgate_conn_id="lg_dead", poll_interval=POLL,
                                            max_unreachable=n),
    ],
    ids=["run", "checkpoint"],
)
def test_trigger_polls_through_an_unreachable_controller_up_to_its_tolerance_then_fails_clearly(
    make, dead_controller, capfd
):
    t0 = time.monotonic()
    event = _first_event(make(4))
    elapsed = time.monotonic() - t0
    lines = _log(capfd)

    assert event["status"] == "error", event
    assert event["job"] == "bids" and event["state"] is None
    message = event["message"]
    assert "ControllerUnavailableError" in message
    assert f"cannot reach the Lockgate controller at {dead_controller}" in message
    assert "is `lockgate server` running there" in message
    # three polls failed and were retried, the fourth gave up: polling went on through them
    retries = _retries(lines)
    assert [m.split("retrying (", 1)[1][:4] for m in retries] == ["1/4)", "2/4)", "3/4)"], retries
    assert all(dead_controller in m for m in retries)
    assert any("unreachable 4 polls in a row: giving up" in ln for ln in lines)
    assert elapsed >= 3 * POLL


def test_a_tolerance_of_one_fails_at_the_first_unreachable_poll(dead_controller, capfd):
    event = _first_event(LockgateRunTrigger("bids", 1, 2, lockgate_conn_id="lg_dead", poll_interval=5,
                                            max_unreachable=1, stop_on_kill=False))
    assert event["status"] == "error" and dead_controller in event["message"]
    assert _retries(_log(capfd)) == []  # no retry, and no poll_interval waited (the test is quick)
