"""Clients cannot starve the controller: 300 Watch streams on a running job, far past
``--max-streams``, are refused past the bound with RESOURCE_EXHAUSTED naming the flag, while
ListJobs answers at once, the job's worker keeps heartbeating on its own server (it is never
declared lost) and the job commits every window."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from lockgate.server.generated import lockgate_controller_pb2 as pb
from lockgate.server.generated import lockgate_controller_pb2_grpc as pb_grpc

EVENTS = 16000  # 8 cycle windows
CONNECTIONS, PER_CONNECTION = 20, 15  # 300 streams, none past the per-client bound of 16 by itself


async def _open_streams(url: str, job: str, hold: threading.Event, held: list[int],
                        codes: list[tuple[grpc.StatusCode, str]]) -> None:
    # channels of one process share their connection unless told not to: one connection each
    own = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(url, options=own) for _ in range(CONNECTIONS)]

    async def one(channel: grpc.aio.Channel) -> None:
        call = pb_grpc.ControllerStub(channel).Watch(pb.WatchRequest(job=job, timeout_s=600))
        try:
            first = True
            async for _ in call:
                if first:
                    held.append(1)
                    first = False
        except grpc.aio.AioRpcError as err:
            codes.append((err.code(), err.details() or ""))

    # first one connection opens 30 streams: its 17th on are refused by the per-client bound
    greedy = grpc.aio.insecure_channel(url, options=own)
    tasks = [asyncio.ensure_future(one(greedy)) for _ in range(30)]
    await asyncio.sleep(1.0)
    # then 20 connections open 15 each: past 64 in all they are refused by the total bound
    tasks += [asyncio.ensure_future(one(ch)) for ch in channels for _ in range(PER_CONNECTION)]
    while not hold.is_set():
        await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for ch in [*channels, greedy]:
        await ch.close()


@pytest.mark.slow
@pytest.mark.long  # tests/engine/server/test_server_requests.py checks the limits' status codes
def test_many_watch_streams_are_bounded_and_never_starve_workers(make_controller, srv, tmp_path):
    ctl = make_controller("limits", args=("--standby-workers", "1", "--max-streams", "64",
                                          "--max-streams-per-client", "16")).start()
    client = ctl.client()
    ref, _ = srv.write_pipeline(tmp_path / "pipe", "limits", EVENTS)
    n = srv.windows(EVENTS)
    client.start_run(ref, job="limits", first=srv.FIRST, last=srv.FIRST + n - 1)

    hold, held, codes = threading.Event(), [], []
    streams = threading.Thread(target=lambda: asyncio.run(_open_streams(ctl.url[len("grpc://"):], "limits", hold,
                                                                        held, codes)), daemon=True)
    streams.start()
    try:
        refused = srv.wait_for(lambda: len(codes) >= 300 + 30 - 64, 60, "the streams past the bound to be refused")
        assert refused
        assert {c for c, _ in codes} == {grpc.StatusCode.RESOURCE_EXHAUSTED}, codes[:3]
        messages = {m for _, m in codes}
        assert any("--max-streams 64" in m for m in messages), messages
        assert any("--max-streams-per-client 16" in m for m in messages), messages
        # unary calls still answer at once while 64 streams are held
        latencies = []
        for _ in range(5):
            t0 = time.monotonic()
            assert [j.name for j in client.list_jobs()] == ["limits"]
            latencies.append(time.monotonic() - t0)
            time.sleep(0.5)
        assert max(latencies) < 2.0, latencies
        job = srv.wait_for(lambda: (j := client.get_job("limits")).state in ("FINISHED", "FAILED") and j, 240,
                           "the job to finish while the streams are held")
    finally:
        hold.set()
        streams.join(30)
    assert job.state == "FINISHED", job
    assert job.last_window == srv.FIRST + n - 1 and job.generation == 1  # never recovered
    assert len(client.list_checkpoints("limits")) >= min(n, 10)
    # the job's worker was never lost (generation 1 above: no recovery); an idle standby may
    # miss heartbeats on a loaded 2-core runner while it warms Spark up, which says nothing
    # about the streams (the workers' server is a separate server with its own threads)
    assert not [w for w in client.list_workers() if w["state"] == "LOST" and w["job"]]
    log = ctl.log_text()
    assert "missed the heartbeat deadline" not in log  # what starved heartbeats would say
    # a worker that never held a job (generation 0: a standby, or one whose JVM failed to start
    # on the loaded runner and was replaced) says nothing about the streams
    lost = [line for line in log.splitlines() if "worker_lost" in line]
    assert all("generation=0" in line for line in lost), lost
    # once the streams are closed, their slots are free again
    assert isinstance(list(client.watch("limits", timeout=1)), list)
    client.close()
