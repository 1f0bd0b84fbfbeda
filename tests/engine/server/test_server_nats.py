"""A NatsSource job through a controller and its worker (real gRPC): the worker is handed the
restore checkpoint's source positions (``RestorePoint.positions_json``), so a run that resumes a
job reads on right after the last committed sequence."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time

import pytest
from nats_log import Log, next_window

pytestmark = pytest.mark.slow

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("nats_served", cycle_window=timedelta(seconds=1))
bids = pipeline.source(lg.NatsSource({url!r}, {stream!r}, schema="id BIGINT, ts TIMESTAMP"), name="bids")
bids.sink(lg.CollectSink("raw"), name="raw_out")
'''


def ranges(home, job: str) -> dict[int, list[int]]:
    with sqlite3.connect(home / "catalog.db") as conn:
        rows = conn.execute('SELECT "window", positions FROM lg_checkpoints WHERE job = ? AND status = ?',
                            (job, "COMPLETE")).fetchall()
    return {w: json.loads(p)["bids"]["offset_ranges"]["0"] for w, p in rows}


def test_a_served_job_resumes_after_the_last_committed_sequence(make_controller, nats_url, tmp_path):
    """The second run's worker must start window ``a + 1`` at sequence 5, after window ``a``'s
    recorded range: once the stream is purged that is an error naming 5..9 (a worker without the
    positions would start by time and read nothing, silently)."""
    from lockgate.server.errors import CycleFailedError

    log = Log(nats_url)
    try:
        a = next_window()
        log.publish(4)
        assert next_window() == a + 1
        log.publish(5)
        time.sleep(max(0.0, a + 2 + 0.05 - time.time()))
        path = tmp_path / "nats_served.py"
        path.write_text(PIPELINE.format(url=nats_url, stream=log.stream))
        ref = f"{path}:pipeline"
        controller = make_controller("nats").start()
        with contextlib.closing(controller.client()) as client:
            assert client.run(ref, first=a, last=a).state == "FINISHED"
            assert ranges(controller.home, "nats_served") == {a: [1, 4]}
            log.admin("purge")
            with pytest.raises(CycleFailedError) as err:  # the worker's one line, after "window W failed in worker"
                client.run(ref, first=a + 1, last=a + 1)
            assert f"NATS source stream {log.stream!r}" in str(err.value)
            assert "no longer holds sequences 5..9" in str(err.value) and "\n" not in str(err.value)
            assert ranges(controller.home, "nats_served") == {a: [1, 4]}
            raw = client.read_sink("nats_served", "raw")
            assert sorted(raw["id"].to_pylist()) == [0, 1, 2, 3]
    finally:
        log.created = True
        log.admin("delete")
