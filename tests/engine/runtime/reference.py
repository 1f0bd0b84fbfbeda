"""Independent references for the operator tests (``test_operators_*.py``).

The tests run pipelines for real through the embedded client; the expected results here
are computed with pandas over the very same records (the Nexmark generator called with
the pipeline's configuration, or the files the test wrote), by code that shares nothing
with the engine's Spark translation.

Timing conventions mirror the engine's contract, not its code: cycle window ``W`` reads
the records whose *slice* time (event time, or nominal arrival time for out-of-order
Nexmark) lies in ``[W * C, (W + 1) * C)``; the watermark after ``W`` is
``(W + 1) * C - lateness``; a windowed result ``[start, end)`` is emitted in the first
cycle whose watermark reaches ``end``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lockgate.nexmark import NexmarkConfig, generate, stream_event_numbers

S = 1_000_000  # microseconds per second
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_US = int(T0.timestamp()) * S
CYCLE_US = 10 * S
#: the cycle window holding T0 (the pipelines' origin is the epoch)
W0 = T0_US // CYCLE_US
T0_ISO = "2026-01-01T00:00:00"


# -- running pipelines ---------------------------------------------------------------------
def embedded_client(home: Path) -> Iterator[Any]:
    """An embedded client on the session's SparkSession (for a module-scoped fixture)."""
    import lockgate as lg

    client = lg.connect("embedded", home=str(home))
    try:
        yield client
    finally:
        client.close()


def read_sink(client: Any, job: str, sink: str) -> pd.DataFrame:
    """A collect sink as pandas: timestamps as int64 microseconds, lists as tuples."""
    table: pa.Table = client.read_sink(job, sink)
    cols = {}
    for name in table.column_names:
        col = table[name]
        if pa.types.is_timestamp(col.type):
            col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
        cols[name] = col
    df = pa.table(cols).to_pandas()
    for name in df.columns:
        if pa.types.is_list(table[name].type):
            df[name] = df[name].map(lambda v: None if v is None else tuple(v))
    return df


# -- Nexmark events ------------------------------------------------------------------------
def nexmark_config(**kw: Any) -> NexmarkConfig:
    """The generator config a ``NexmarkSource(start=T0_ISO, **kw)`` uses."""
    out_of_order = kw.pop("out_of_order", 0.0)
    return NexmarkConfig(start=T0, out_of_order_s=out_of_order, **kw)


def nexmark_events(stream: str, first: int, last: int, **kw: Any) -> pd.DataFrame:
    """The ``stream`` events a pipeline reads in cycle windows ``first..last`` (10 s each),
    with ``n`` (event number), ``nominal_us``, ``ts_us`` (event time) and ``cycle``."""
    conf = nexmark_config(**kw)
    lo = _first_event_at(conf, first * CYCLE_US)
    hi = _first_event_at(conf, (last + 1) * CYCLE_US)
    table = generate(conf, stream, lo, hi)
    n = stream_event_numbers(conf, stream, lo, hi)
    df = table.to_pandas()
    df["n"] = n
    df["nominal_us"] = conf.start_us + (n * S) // conf.events_per_second
    df["ts_us"] = pc.cast(table["date_time"], pa.int64()).to_numpy()
    df["cycle"] = df["nominal_us"] // CYCLE_US
    return df


def _first_event_at(conf: NexmarkConfig, t_us: int) -> int:
    """Smallest event number whose nominal time ``start + n * 1e6 // eps`` is >= ``t_us``."""
    offset = t_us - conf.start_us
    n = max(0, -((-offset * conf.events_per_second) // S))
    return n if conf.max_events is None else min(n, conf.max_events)


# -- windows -------------------------------------------------------------------------------
def emit_cycle(end_us: int | np.ndarray, lateness_us: int = 0) -> Any:
    """The cycle window whose watermark first reaches ``end_us``: ``(W + 1) * C - L >= end``."""
    return -(-(np.asarray(end_us) + lateness_us) // CYCLE_US) - 1


def session_emit_cycle(end_us: int | np.ndarray, lateness_us: int = 0) -> Any:
    """The cycle window whose watermark first passes a session's end: ``(W + 1) * C - L > end``
    (a session ending exactly at the watermark stays open for a record at the watermark)."""
    return (np.asarray(end_us) + lateness_us) // CYCLE_US


def tumbling(df: pd.DataFrame, size_us: int, ts: str = "ts_us") -> pd.DataFrame:
    out = df.copy()
    out["window_start"] = out[ts] - out[ts] % size_us
    out["window_end"] = out["window_start"] + size_us
    return out


def sliding(df: pd.DataFrame, size_us: int, slide_us: int, ts: str = "ts_us") -> pd.DataFrame:
    """One row per (record, window holding it): windows start at multiples of ``slide``."""
    parts = []
    for k in range(math.ceil(size_us / slide_us) + 1):
        part = df.copy()
        part["window_start"] = part[ts] - part[ts] % slide_us - k * slide_us
        part["window_end"] = part["window_start"] + size_us
        parts.append(part[(part["window_start"] <= part[ts]) & (part[ts] < part["window_end"])])
    return pd.concat(parts, ignore_index=True)


def sessions(df: pd.DataFrame, keys: list[str], gap_us: int, ts: str = "ts_us") -> pd.DataFrame:
    """Per key, sorted by time: a new session starts when the gap since the previous record
    is more than ``gap`` (touching sessions merge); a session is ``[first, last + gap)``."""
    out = df.sort_values([*keys, ts], kind="stable").reset_index(drop=True)
    key_change = pd.Series(False, index=out.index)
    for k in keys:
        prev = out[k].shift()
        key_change |= ~((out[k] == prev) | (out[k].isna() & prev.isna()))
    new = key_change | (out[ts] - out[ts].shift() > gap_us)
    out["__sid"] = new.cumsum()
    bounds = out.groupby("__sid")[ts].agg(["min", "max"])
    out["window_start"] = out["__sid"].map(bounds["min"])
    out["window_end"] = out["__sid"].map(bounds["max"]) + gap_us
    return out.drop(columns="__sid")


# -- aggregates ----------------------------------------------------------------------------
def _present(s: pd.Series) -> pd.Series:
    return s[s.notna()]


def _int(v: Any) -> Any:
    return int(v) if isinstance(v, np.integer | int) else v


AGG_FUNCS: dict[str, Callable[[pd.Series], Any]] = {
    "count": lambda s: len(_present(s)),
    "sum": lambda s: _int(_present(s).sum()) if len(_present(s)) else None,
    "min": lambda s: _int(_present(s).min()) if len(_present(s)) else None,
    "max": lambda s: _int(_present(s).max()) if len(_present(s)) else None,
    "avg": lambda s: float(_present(s).astype(float).mean()) if len(_present(s)) else None,
    "collect": lambda s: tuple(sorted(_int(v) for v in _present(s))),
    "approx_distinct": lambda s: _present(s).nunique(),
}


def aggregate(df: pd.DataFrame, by: list[str], aggs: dict[str, tuple[str, str | None]]) -> pd.DataFrame:
    """``aggs``: result name -> (kind, column or None); null keys form their own group."""
    rows = []
    for key, group in df.groupby(by, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = {k: (None if pd.isna(v) else _int(v)) for k, v in zip(by, key, strict=True)}
        for name, (kind, col) in aggs.items():
            row[name] = len(group) if col is None else AGG_FUNCS[kind](group[col])
        rows.append(row)
    out = pd.DataFrame(rows, columns=[*by, *aggs])
    for k in by:  # keep null keys as None, integer keys as integers
        out[k] = pd.Series([r[k] for r in rows], index=out.index, dtype=object)
    return out



def running_totals(records: pd.DataFrame, key: str, aggs: dict[str, tuple[str, str | None]], last: int) -> pd.DataFrame:
    """A running aggregate's output through cycle ``last``: each cycle from ``W0`` emits the totals so
    far of the keys its records touched, with ``lg_window`` the cycle."""
    parts = []
    for w in range(W0, last + 1):
        touched = set(records.loc[records["cycle"] == w, key])
        totals = aggregate(records[records["cycle"] <= w], [key], aggs)
        parts.append(totals[totals[key].isin(touched)].assign(lg_window=w))
    return pd.concat(parts, ignore_index=True)


# -- comparison ----------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, list | tuple | np.ndarray):
        return tuple(_norm(x) for x in v)
    return v


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, "" if v is None else v) for v in row)


def rows(df: pd.DataFrame, cols: Iterable[str]) -> list[tuple]:
    cols = list(cols)
    return sorted((tuple(_norm(v) for v in r) for r in df[cols].itertuples(index=False)), key=_sort_key)


def assert_same_rows(
    actual: pd.DataFrame,
    expected: pd.DataFrame,
    key: list[str],
    approx: Iterable[str] = (),
    hll: Iterable[str] = (),
    what: str = "",
) -> None:
    """Row for row, sorted by ``key`` (which must be unique): exact, except ``approx``
    columns (floats, relative 1e-9) and ``hll`` columns (within 2% or 1 of exact)."""
    approx, hll = set(approx), set(hll)
    cols = list(expected.columns)
    missing = [c for c in cols if c not in actual.columns]
    assert not missing, f"{what}: columns {missing} missing from the result (has {list(actual.columns)})"
    dup = actual[actual.duplicated(key, keep=False)]
    assert dup.empty, f"{what}: {len(dup)} result rows share a key {key}, e.g.\n{dup.head(6)}"
    order = [cols.index(k) for k in key]
    a = {tuple(r[i] for i in order): r for r in rows(actual, cols)}
    e = {tuple(r[i] for i in order): r for r in rows(expected, cols)}
    only_a, only_e = sorted(set(a) - set(e), key=_sort_key), sorted(set(e) - set(a), key=_sort_key)
    assert not only_a and not only_e, (
        f"{what}: {len(only_a)} unexpected result rows {only_a[:5]}, {len(only_e)} missing rows "
        f"{[e[k] for k in only_e[:5]]} (of {len(e)} expected)"
    )
    bad = []
    for k, er in e.items():
        ar = a[k]
        for c, av, ev in zip(cols, ar, er, strict=True):
            if c in approx and av is not None and ev is not None:
                ok = math.isclose(av, ev, rel_tol=1e-9, abs_tol=1e-9)
            elif c in hll and av is not None and ev is not None:
                ok = abs(av - ev) <= max(1, 0.02 * ev)
            else:
                ok = av == ev
            if not ok:
                bad.append((k, c, av, ev))
    assert not bad, f"{what}: {len(bad)} values differ (key, column, got, expected): {bad[:8]}"


def dt(us: int) -> datetime:
    return datetime.fromtimestamp(us / S, tz=UTC)
