"""WindowClock: window ids to instants and back, the one place that does it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lockgate.clock import EPOCH, WindowClock, from_micros, to_micros


def test_round_trip_and_bounds():
    origin = datetime(2026, 1, 1, tzinfo=UTC)
    clock = WindowClock.of(timedelta(seconds=20), origin)
    assert clock.window_of(origin) == 0
    assert clock.window_of(origin + timedelta(seconds=19, microseconds=999_999)) == 0
    assert clock.window_of(origin + timedelta(seconds=20)) == 1
    assert clock.window_of(origin - timedelta(microseconds=1)) == -1
    assert clock.bounds(3) == (origin + timedelta(seconds=60), origin + timedelta(seconds=80))
    for w in (-5, 0, 7, 88361280):
        start, end = clock.bounds_us(w)
        assert clock.window_at_us(start) == w and clock.window_at_us(end - 1) == w and clock.window_at_us(end) == w + 1


def test_windows_for_an_interval_and_the_last_one_ending_by_a_bound():
    clock = WindowClock(origin_us=0, size_us=10)
    assert clock.windows_for_us(0, 10) == (0, 0)
    assert clock.windows_for_us(5, 31) == (0, 3)
    assert clock.last_ending_by_us(30) == 2 and clock.last_ending_by_us(29) == 1
    with pytest.raises(ValueError, match="end of the range must be after its start"):
        clock.windows_for_us(10, 10)
    with pytest.raises(ValueError, match="longer than zero"):
        WindowClock(0, 0)


def test_micros_helpers_agree_with_datetime_arithmetic():
    t = datetime(2026, 11, 23, 20, 54, 53, 123_456, tzinfo=UTC)
    assert to_micros(t) == int((t - EPOCH).total_seconds()) * 1_000_000 + 123_456
    assert from_micros(to_micros(t)) == t
    assert to_micros(t.replace(tzinfo=None)) == to_micros(t)  # naive is UTC


def test_pendulum_datetimes_from_airflow_map_like_plain_ones():
    pendulum = pytest.importorskip("pendulum")  # Airflow's data intervals are pendulum DateTimes
    t = pendulum.datetime(2026, 1, 1, 0, 0, 25)
    plain = datetime(2026, 1, 1, 0, 0, 25, tzinfo=UTC)
    clock = WindowClock.of(timedelta(seconds=10))
    assert to_micros(t) == to_micros(plain)
    assert clock.window_of(t) == clock.window_of(plain)
