"""The embedded client's own lifecycle: a run started without waiting (``start_run``) and a
continuous job (``start``), both stopped at a window boundary by ``stop()``; the time range
to window translation."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from lockgate.client.embedded import EmbeddedClient
from lockgate.errors import InvalidArgumentError

FIRST = 353_445_120  # 2026-01-01T00:00:00Z in 5 s cycle windows since the epoch
WINDOWS = 6

PIPELINE = '''
from datetime import timedelta

import lockgate as lg

pipeline = lg.Pipeline("stoppable", cycle_window=timedelta(seconds=5), parallelism=2)
bids = pipeline.source(
    lg.NexmarkSource("bid", events_per_second=400, seed=3, start="2026-01-01T00:00:00", max_events=12_000),
    name="bids",
)
(bids.key_by("bidder").aggregate(bids=lg.count(), spent=lg.sum("price"), name="bidder_totals")
     .sink(lg.CollectSink("bidders"), name="bidders_out"))
'''


def _rows(table) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in table.to_pylist())


@pytest.fixture
def pipeline_ref(tmp_path):
    path = tmp_path / "stoppable.py"
    path.write_text(PIPELINE)
    return f"{path}:pipeline"


def test_stop_of_a_started_run_drains_at_a_window_boundary_and_the_rerun_is_exact(tmp_path, pipeline_ref, spark):
    reference = EmbeddedClient(home=str(tmp_path / "ref"))
    try:
        assert reference.run(pipeline_ref, first=FIRST, last=FIRST + WINDOWS - 1).state == "FINISHED"
        expected = _rows(reference.read_sink("stoppable", "bidders"))
    finally:
        reference.close()

    client = EmbeddedClient(home=str(tmp_path / "home"))
    try:
        info = client.start_run(pipeline_ref, first=FIRST, last=FIRST + WINDOWS - 1)
        assert info.state in ("SCHEDULING", "RUNNING")

        def committed() -> int:
            return len(client.list_checkpoints("stoppable"))

        deadline = threading.Event()
        while committed() < 2 and not deadline.wait(0.05):
            pass
        stopped = client.stop("stoppable", drain=True, timeout=300)
        assert stopped.state == "STOPPED", stopped
        # drained at a window boundary: every window up to the last checkpoint committed, no more
        assert FIRST + 1 <= stopped.last_window < FIRST + WINDOWS - 1
        cps = [c.window for c in client.list_checkpoints("stoppable")]
        assert cps == list(range(FIRST, stopped.last_window + 1))

        # the next run resumes after the last complete window; the output is the uninterrupted run's
        res = client.run(pipeline_ref, first=FIRST, last=FIRST + WINDOWS - 1)
        assert res.state == "FINISHED"
        assert res.windows_skipped == stopped.last_window - FIRST + 1
        assert _rows(client.read_sink("stoppable", "bidders")) == expected
    finally:
        client.close()


def test_continuous_job_enters_running_once_and_stops_at_a_boundary(tmp_path, pipeline_ref, spark):
    client = EmbeddedClient(home=str(tmp_path / "home"))
    try:
        client.start(pipeline_ref)
        deadline = threading.Event()
        while (client.get_job("stoppable").last_window or 0) < FIRST + WINDOWS - 1 and not deadline.wait(0.1):
            pass
        stopped = client.stop("stoppable", drain=True, timeout=300)
        assert stopped.state == "STOPPED" and stopped.last_window == FIRST + WINDOWS - 1
        states = [t.to_state.value for t in client.catalog.transitions("stoppable")]
        assert states == ["CREATED", "COMPILING", "SCHEDULING", "RUNNING", "STOPPING", "STOPPED"]
    finally:
        client.close()


def test_windows_for_covers_the_range_and_refuses_an_empty_one(pipeline_ref):
    client = EmbeddedClient.__new__(EmbeddedClient)  # windows_for needs no Spark and no catalog
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert client.windows_for(pipeline_ref, t0, t0 + timedelta(seconds=10)) == (FIRST, FIRST + 1)
    assert client.windows_for(pipeline_ref, t0 + timedelta(seconds=1), t0 + timedelta(seconds=6)) == (FIRST, FIRST + 1)
    for end in (t0, t0 - timedelta(seconds=1)):
        with pytest.raises(InvalidArgumentError, match="end of the range must be after its start"):
            client.windows_for(pipeline_ref, t0, end)
