"""check_state_layout: which plan changes a checkpoint's state survives (no Spark: the
layouts and settings are what compiled plans store)."""

from __future__ import annotations

import pytest

from lockgate.control.scheduler import check_state_layout
from lockgate.errors import StateLayoutError

TOP_LAYOUT = {"top": {"main": "window_start bigint, auction bigint, price bigint"}}
TOP_3 = {"top": {"keys": ["auction"], "n": 3, "by": ["price"], "ascending": False,
                 "window": {"type": "tumbling", "size_us": 10_000_000, "on": None}}}


def _with(**changes: object) -> dict:
    return {"top": {**TOP_3["top"], **changes}}


def test_same_layout_and_settings_fit():
    check_state_layout(TOP_LAYOUT, TOP_LAYOUT, "j", 7, TOP_3, _with())


@pytest.mark.parametrize(("changes", "shown"), [
    ({"n": 5}, "n 3 -> 5"),
    ({"ascending": True}, "ascending false -> true"),
    ({"by": ["date_time"]}, 'by ["price"] -> ["date_time"]'),
    ({"window": {"type": "tumbling", "size_us": 20_000_000, "on": None}}, '"size_us": 20000000'),
    ({"lower_us": 0}, "lower_us unset -> 0"),
])
def test_a_changed_setting_with_the_same_columns_is_refused_naming_it(changes, shown):
    with pytest.raises(StateLayoutError) as info:
        check_state_layout(TOP_LAYOUT, TOP_LAYOUT, "j", 7, TOP_3, _with(**changes))
    msg = str(info.value)
    assert "job 'j'" in msg and "checkpoint 7" in msg and "operator 'top' settings changed" in msg
    assert shown in msg and "--reset-state" in msg


def test_layouts_stored_before_settings_were_compared_still_restore():
    """A checkpoint whose plan has no settings to compare (None) is checked on columns alone."""
    check_state_layout(TOP_LAYOUT, TOP_LAYOUT, "j", 7, None, _with(n=5))


def test_a_new_stateful_operator_or_a_dropped_stateless_one_fits():
    new_layout = {**TOP_LAYOUT, "dedup": {"main": "id bigint"}}
    check_state_layout(TOP_LAYOUT, new_layout, "j", 7, TOP_3, {**TOP_3, "dedup": {"keys": ["id"]}})


def test_a_changed_column_and_a_removed_operator_are_both_named():
    with pytest.raises(StateLayoutError) as info:
        check_state_layout({**TOP_LAYOUT, "gone": {"main": "k bigint"}},
                           {"top": {"main": "window_start bigint, auction string, price bigint"}}, "j", 7)
    msg = str(info.value)
    assert "operator 'gone' has state in the checkpoint but is not in the new plan" in msg
    assert "operator 'top' state 'main' changed" in msg
