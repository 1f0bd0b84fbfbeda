"""Triggers: they serialise cleanly (through Airflow's own trigger row), and follow real
jobs: the embedded engine's catalog, and a controller over gRPC (on_kill included)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

START = datetime(2026, 1, 1, tzinfo=UTC)


def _first_event(trigger, timeout: float = 240):
    async def go():
        agen = trigger.run()
        try:
            return await asyncio.wait_for(agen.__anext__(), timeout)
        finally:
            await agen.aclose()

    return asyncio.run(go()).payload


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.LockgateRunTrigger(job="bids", first_window=10, last_window=12, lockgate_conn_id="lg",
                                       poll_interval=0.5, max_unreachable=3, stop_on_kill=False),
        lambda m: m.LockgateCheckpointTrigger(job="bids", window=12, lockgate_conn_id="lg", poll_interval=2,
                                              wait_for_job=False),
    ],
    ids=["run", "checkpoint"],
)
def test_triggers_serialise_round_trip(make, airflow_db):
    import importlib

    from airflow.models.trigger import Trigger

    import lockgate_provider.triggers.lockgate as m

    trigger = make(m)
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # plain JSON values only
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    # the way the triggerer stores and reloads it: an encrypted trigger row
    row = Trigger.from_object(trigger)
    assert row.classpath == classpath
    again = getattr(importlib.import_module(module), name)(**row.kwargs)
    assert again.serialize() == (classpath, kwargs)


def test_run_and_checkpoint_triggers_follow_embedded_jobs(lg_env, tiny_pipeline):
    import lockgate
    from lockgate_provider.triggers.lockgate import LockgateCheckpointTrigger, LockgateRunTrigger

    ref = tiny_pipeline("trig_ok")
    client = lockgate.connect("embedded", home=str(lg_env.home))
    first, _ = client.windows_for(ref, START, START + timedelta(minutes=1))
    client.run(ref, first=first, last=first + 1)

    ev = _first_event(LockgateRunTrigger("trig_ok", first, first + 1, poll_interval=0.2))
    assert ev["status"] == "success", ev
    assert [c["window"] for c in ev["checkpoints"]] == [first, first + 1]
    # 2 events/s for 120 s; in each block of 50 Nexmark events the first 4 are a person and auctions
    assert sum(c["rows_in"] for c in ev["checkpoints"]) == sum(1 for n in range(240) if n % 50 >= 4)

    ev = _first_event(LockgateRunTrigger("trig_ok", first, first + 5, poll_interval=0.2))
    assert ev["status"] == "incomplete" and ev["last_complete"] == first + 1 and ev["state"] == "FINISHED"

    ev = _first_event(LockgateCheckpointTrigger("trig_ok", first + 1, poll_interval=0.2))
    assert ev["status"] == "success" and ev["checkpoint"]["window"] == first + 1

    ev = _first_event(LockgateCheckpointTrigger("no_such_job", first, poll_interval=0.2, wait_for_job=False))
    assert ev["status"] == "error" and "no_such_job" in ev["message"]

    bad = tiny_pipeline(
        "trig_bad",
        'def boom(b):\n    raise RuntimeError("boom: the tiny pipeline fails")\n'
        'bids.map_batches(boom, name="boom").sink(lg.CollectSink("out"), name="sink")',
    )
    with pytest.raises(Exception, match="boom"):
        client.run(bad, first=first, last=first + 2)
    ev = _first_event(LockgateRunTrigger("trig_bad", first, first + 2, poll_interval=0.2))
    assert ev["status"] == "error" and "boom: the tiny pipeline fails" in ev["message"]
    ev = _first_event(LockgateCheckpointTrigger("trig_bad", first + 2, poll_interval=0.2))
    assert ev["status"] == "error" and "FAILED" in ev["message"] and "boom" in ev["message"]


def test_run_trigger_follows_a_controller_and_on_kill_stops_at_a_window_boundary(grpc_env, tiny_pipeline):
    from lockgate_provider.triggers.lockgate import LockgateRunTrigger

    client = grpc_env.client()
    ref = tiny_pipeline("trig_grpc")
    first, _ = client.windows_for(ref, START, START + timedelta(minutes=1))
    client.start_run(ref, job="trig_grpc", first=first, last=first + 1)
    ev = _first_event(LockgateRunTrigger("trig_grpc", first, first + 1, poll_interval=0.5))
    assert ev["status"] == "success", ev
    assert [c["window"] for c in ev["checkpoints"]] == [first, first + 1]

    # a long run, killed while deferred: the trigger's on_kill drains it to a window boundary
    client.start_run(ref, job="trig_grpc", first=first + 2, last=first + 400)
    trigger = LockgateRunTrigger("trig_grpc", first + 2, first + 400, poll_interval=0.5)

    async def kill_after_a_window():
        c = await trigger._client()
        try:
            while (job := await c.get_job("trig_grpc")).last_window < first + 2:
                if job.state == "FAILED":  # say why, whole: the job's message and the controller's log
                    logs = sorted((grpc_env.home / "logs" / "workers").glob("*.log"))
                    pytest.fail(f"the long run failed: {job.last_error}\n"
                                + grpc_env.log.read_text(errors="replace")[-6000:]
                                + "".join(f"\n--- {p.name}:\n" + p.read_text(errors="replace")[-3000:] for p in logs),
                                pytrace=False)
                await asyncio.sleep(0.5)
        finally:
            await c.close()
        await trigger.on_kill()

    try:
        asyncio.run(asyncio.wait_for(kill_after_a_window(), 240))
    except TimeoutError:  # say where the run stood, and what the controller logged
        pytest.fail(f"no window of the long run within 240 s: {client.get_job('trig_grpc')}\n"
                    + grpc_env.log.read_text(errors="replace")[-6000:], pytrace=False)
    job = client.get_job("trig_grpc")
    assert job.state == "STOPPED", job
    assert first + 2 <= job.last_window < first + 400
    windows = [c.window for c in client.list_checkpoints("trig_grpc")]
    assert windows[-1] == job.last_window and windows == sorted(windows)
    ev = _first_event(LockgateRunTrigger("trig_grpc", first + 2, first + 400, poll_interval=0.5))
    assert ev["status"] == "incomplete" and ev["state"] == "STOPPED"
