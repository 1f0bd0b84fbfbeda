"""Driver folds: a chain's layers merged with pyarrow as Spark's merge does, checked against
pandas (each identity's row from the newest layer holding it, an upsert before a tombstone of
the same layer, null keys a key of their own, rows below the horizon gone)."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lockgate.runtime.state.driver_fold import fold, foldable, merge_latest
from lockgate.runtime.state.layers import DELETED

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("v", pa.int64()),
                    ("t", pa.timestamp("us", tz="UTC")), (DELETED, pa.bool_())])


def _layer(rng: random.Random, rows: int, tombstones: bool) -> pa.Table:
    data = {"k": [], "s": [], "v": [], "t": [], DELETED: []}
    seen = set()
    for _ in range(rows):
        key = (rng.choice([None, *range(12)]), rng.choice([None, "a", "b"]))
        if key in seen:  # one row per identity and kind in a layer, as a round writes
            continue
        seen.add(key)
        deleted = tombstones and rng.random() < 0.3
        data["k"].append(key[0])
        data["s"].append(key[1])
        data["v"].append(None if deleted else rng.randint(0, 99))
        data["t"].append(None if deleted else pd.Timestamp(1_700_000_000 + rng.randint(0, 100), unit="s", tz="UTC"))
        data[DELETED].append(deleted)
    return pa.Table.from_pydict(data, schema=SCHEMA)


def _reference(tables: list[pa.Table], identity: list[str], keep_tombstones: bool) -> pd.DataFrame:
    frames = []
    for rank, t in enumerate(tables):
        df = t.to_pandas()
        df["__order"] = rank * 2 + (~df[DELETED]).astype(int)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True).sort_values("__order", kind="stable")
    df = df.drop_duplicates(identity, keep="last").drop(columns="__order")
    if not keep_tombstones:
        df = df[~df[DELETED]].drop(columns=DELETED)
    return df


def _rows(df: pd.DataFrame) -> list[tuple]:
    return sorted((tuple(None if pd.isna(x) else x for x in r) for r in df.itertuples(index=False)), key=repr)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("keep_tombstones", [False, True])
def test_merge_latest_equals_pandas(seed: int, keep_tombstones: bool) -> None:
    rng = random.Random(seed)
    tables = [_layer(rng, 30, tombstones=i > 0) for i in range(rng.randint(1, 5))]
    got = merge_latest(tables, ("k", "s"), keep_tombstones).to_pandas()
    want = _reference(tables, ["k", "s"], keep_tombstones)
    assert len(want) > 5
    assert _rows(got) == _rows(want)


def test_an_upsert_wins_over_a_tombstone_of_its_own_layer_and_a_newer_tombstone_hides_it() -> None:
    old = pa.Table.from_pydict({"k": [1, 2], "s": ["x", "x"], "v": [10, 20], "t": [None, None],
                                DELETED: [False, False]}, schema=SCHEMA)
    new = pa.Table.from_pydict({"k": [1, 1, 2], "s": ["x", "x", "x"], "v": [None, 11, None], "t": [None] * 3,
                                DELETED: [True, False, True]}, schema=SCHEMA)
    assert merge_latest([old, new], ("k", "s"), False).select(["k", "v"]).to_pydict() == {"k": [1], "v": [11]}
    kept = merge_latest([old, new], ("k", "s"), True).sort_by("k")
    assert kept.select(["k", "v", DELETED]).to_pydict() == {"k": [1, 2], "v": [11, None], DELETED: [False, True]}


def test_one_row_and_append_only_tables() -> None:
    rng = random.Random(3)
    tables = [_layer(rng, 5, tombstones=False) for _ in range(3)]
    one = merge_latest(tables, (), False)
    assert one.num_rows == 1 and one.to_pylist()[0] == tables[-1].drop_columns([DELETED]).to_pylist()[-1]
    union = merge_latest(tables, None, False)
    assert union.num_rows == sum(t.num_rows for t in tables)


def test_foldable_identities() -> None:
    assert foldable(("k", "s"), SCHEMA) and foldable(None, SCHEMA) and foldable((), SCHEMA)
    nested = pa.schema([("k", pa.list_(pa.int64())), ("v", pa.int64())])
    assert not foldable(("k",), nested)
    assert not foldable(("missing",), SCHEMA)


def test_a_fold_of_layer_files_with_a_horizon_equals_pandas(tmp_path: Path) -> None:
    rng = random.Random(7)
    tables = [_layer(rng, 40, tombstones=i > 0) for i in range(4)]
    layers = []
    for i, t in enumerate(tables):
        folder = tmp_path / f"w={i:010d}-a0" / "op.main"
        folder.mkdir(parents=True)
        body = t if i else t.drop_columns([DELETED])  # a base's files have no tombstone flag
        pq.write_table(body, folder / "part-00000-driver.parquet")
        layers.append({"snapshot": str(tmp_path / f"w={i:010d}-a0"), "kind": "delta" if i else "base",
                       "files": [{"path": "part-00000-driver.parquet"}], "rows": t.num_rows})
    delta = _layer(rng, 30, tombstones=True)
    horizon = ("v", 20)
    for deltas_only in (False, True):
        folded = layers[1:] if deltas_only else layers
        got = fold(folded, "op.main", delta, ("k", "s"), horizon, deltas_only)
        assert got.schema.names == (SCHEMA.names if deltas_only else SCHEMA.names[:-1])
        kept = [t.filter(pa.compute.greater_equal(t["v"], 20)) for t in [*tables[len(tables) - len(folded):], delta]]
        want = _reference(kept, ["k", "s"], keep_tombstones=deltas_only)
        assert _rows(got.to_pandas()) == _rows(want)
