"""Which operators a key bound passes through, and which bound an aggregate's keys can use.

The bounds' frames are never read by these two functions, so the bounds here have no sources; what a
bound does to a running aggregate's rounds is checked against pandas in
``test_operators_interval_join.py``."""

from __future__ import annotations

from lockgate.runtime.state.key_bounds import KeyBound, bound_for, passed


def _bound(*columns: str) -> KeyBound:
    return KeyBound(tuple(columns), ())  # its sources are never read by passed() or bound_for()


def test_a_filter_and_an_unrelated_new_column_keep_the_bounds():
    bounds = [_bound("auction"), _bound("id")]
    assert passed("filter", {"condition": "price > 0"}, bounds) == bounds
    assert passed("with_column", {"column": "cents", "expr": "price * 100"}, bounds) == bounds


def test_a_new_column_that_replaces_a_bound_column_drops_that_bound_whatever_its_case():
    bounds = [_bound("auction"), _bound("id")]
    assert passed("with_column", {"column": "ID", "expr": "id + 1"}, bounds) == [bounds[0]]


def test_any_other_operator_drops_every_bound():
    bounds = [_bound("auction")]
    for op in ("select", "map_batches", "sql", "union", "running_aggregate", "window_aggregate", "interval_join"):
        assert passed(op, {}, bounds) == [], op


def test_an_aggregate_uses_the_widest_bound_within_its_keys():
    one, two = _bound("id"), _bound("id", "seller")
    assert bound_for(["id", "seller", "category"], [one, two]) is two
    assert bound_for(["Seller", "ID"], [one, two]) is two  # Spark's names are case-insensitive
    assert bound_for(["id"], [one, two]) is one
    assert bound_for(["bidder"], [one, two]) is None
    assert bound_for([], [one]) is None  # a global aggregate has no keys to bound
    assert bound_for(["id"], [_bound()]) is None
