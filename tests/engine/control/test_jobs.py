"""The job operations shared by the embedded client and the controller (no Spark needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import lockgate as lg
from lockgate.checkpoint.catalog import Catalog
from lockgate.control.jobs import (
    RESET_KEY,
    RUN_REQUEST_KEY,
    JobOperations,
    caught_up,
    resume_point,
    windows_for,
)
from lockgate.errors import InvalidArgumentError
from lockgate.plan.compile import build_graph

START = datetime(2026, 1, 1, tzinfo=UTC)


def _graph(max_events: int | None):
    p = lg.Pipeline("orders", cycle_window=timedelta(seconds=10))
    bids = p.source(
        lg.NexmarkSource("bid", events_per_second=100, seed=1, start=START.isoformat(), max_events=max_events),
        name="bids",
    )
    bids.sink(lg.CollectSink("all"), name="out")
    return build_graph(p)


@pytest.fixture
def ops(tmp_path):
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    yield JobOperations(catalog, str(tmp_path))
    catalog.close()


def test_resume_point_and_caught_up_from_a_bounded_source():
    g = _graph(max_events=1_000)  # 100 events/s: 10 s of data, one 10 s window
    first_window = g.clock.window_of(START)
    assert resume_point(g, "orders", None) == first_window
    assert resume_point(g, "orders", first_window + 4) == first_window + 5
    assert caught_up(g) == first_window  # the data ends inside window `first_window`


def test_caught_up_of_an_unbounded_source_is_the_last_window_that_has_passed():
    g = _graph(max_events=None)
    now = g.clock.start(100) + timedelta(seconds=3)  # window 100 is under way
    assert caught_up(g, now) == 99
    assert caught_up(g, g.clock.start(100) - timedelta(microseconds=1)) == 98  # window 99 not over yet


def test_resume_point_needs_a_start_when_no_source_tells_one(tmp_path):
    p = lg.Pipeline("files", cycle_window=timedelta(seconds=10))
    src = p.source(lg.FileSource(str(tmp_path / "none"), format="parquet", event_time="ts"), name="src")
    src.sink(lg.CollectSink("all"), name="out")
    with pytest.raises(InvalidArgumentError, match="pass the first window"):
        resume_point(build_graph(p), "files", None)


def test_windows_for_an_interval():
    g = _graph(max_events=None)
    w = g.clock.window_of(START)
    assert windows_for(g.clock, g.clock.start_us(w), g.clock.end_us(w + 2)) == (w, w + 2)
    with pytest.raises(InvalidArgumentError, match="end of the range must be after its start"):
        windows_for(g.clock, 10, 10)


def test_register_options_and_the_pending_reset(ops):
    g = _graph(max_events=1_000)
    info = ops.register(g, "p.py:pipeline")
    assert (info.name, info.plan_version, info.state, info.last_window) == ("orders", g.version, "CREATED", None)
    assert ops.graph(g.version).to_json() == g.to_json()
    ops.set_options("orders", {RUN_REQUEST_KEY: {"mode": "range"}, RESET_KEY: 3})
    assert ops.pending_reset("orders") is False  # no checkpoint of window 3
    ops.set_options("orders", {}, drop=[RUN_REQUEST_KEY])
    assert ops.catalog.get_job("orders").options == {RESET_KEY: 3}
    ops.clear_reset("orders")
    assert ops.catalog.get_job("orders").options == {}
    assert ops.pending_reset("no-such-job") is False
    assert [j.name for j in ops.list_jobs()] == ["orders"]
