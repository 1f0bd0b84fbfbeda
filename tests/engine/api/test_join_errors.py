"""join() called without the tumbling window both sides share (or without keys) is refused
at the call with a CompileError naming the join and the fix, not a bare TypeError."""

from __future__ import annotations

from datetime import timedelta

import pytest

import lockgate as lg
from lockgate.errors import CompileError


def _two_streams() -> tuple[lg.Pipeline, lg.Stream, lg.Stream]:
    p = lg.Pipeline("joins", cycle_window=timedelta(seconds=10))
    bids = p.source(lg.NexmarkSource("bid", events_per_second=10, max_events=10), name="bids")
    more = p.source(lg.NexmarkSource("bid", events_per_second=10, max_events=10, seed=2), name="more")
    return p, bids, more


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (lg.Session(timedelta(seconds=5)), "got a session window"),
        (lg.Sliding(timedelta(seconds=10), timedelta(seconds=5)), "got a sliding window"),
        (timedelta(seconds=10), "got datetime.timedelta(seconds=10)"),
    ],
)
def test_join_without_a_tumbling_window(window, said):
    p, bids, more = _two_streams()
    with pytest.raises(CompileError) as info:
        bids.join(more, on="auction", window=window)
    err = info.value
    assert err.operator == "join_1"  # the name the join would have had
    assert str(err).startswith("operator 'join_1': join() needs the tumbling window both sides share, ")
    assert said in str(err) and "window=lg.Tumbling(timedelta(...))" in str(err)
    assert "\n" not in str(err)
    assert list(p.nodes) == ["bids", "more"]  # nothing was added


def test_join_without_any_form_says_which_to_pass():
    p, bids, more = _two_streams()
    with pytest.raises(CompileError) as info:
        bids.join(more, on="auction")
    err = info.value
    assert err.operator == "join_1"
    assert str(err).startswith("operator 'join_1': join() takes exactly one of window=, between= or ttl=, got none")
    assert "between=(lower, upper)" in str(err) and "\n" not in str(err)
    assert list(p.nodes) == ["bids", "more"]


def test_join_error_names_the_given_operator_and_missing_keys():
    _, bids, more = _two_streams()
    with pytest.raises(CompileError) as info:
        bids.join(more, window=None, name="matched")
    assert info.value.operator == "matched"
    with pytest.raises(CompileError) as info:
        bids.join(more, window=lg.Tumbling(timedelta(seconds=10)), name="matched")
    assert info.value.operator == "matched" and "on='col'" in str(info.value)
    with pytest.raises(CompileError, match="left_on=.*right_on=.*equal length"):
        bids.join(more, window=lg.Tumbling(timedelta(seconds=10)), left_on=["auction"], right_on=["a", "b"])


def test_a_correct_join_still_builds():
    p, bids, more = _two_streams()
    joined = bids.join(more, on="auction", window=lg.Tumbling(timedelta(seconds=10)))
    assert p.nodes[joined.node].op == "join"
    assert p.nodes[joined.node].config["left_on"] == ["auction"]
