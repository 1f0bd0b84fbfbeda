"""What reading a state chain costs: a base and a chain of deltas, read by Lockgate's layered
state as a round, a fold and a restore read them.

A base of ``--base-rows`` keys and ``--deltas`` deltas of ``--delta-rows`` random keys each
(the running aggregate's layout: ``key, __n, __total`` and the tombstone flag) are written
once with Spark, in the folder layout of a job's snapshots. Then, in the same warm JVM, each of
three reads is timed ``--reps`` times (median):

- ``deltas``: every delta merged into one (``folded(deltas_only=True)``: the fold into a
  delta, which ranks every delta row by its layer);
- ``fold``: every live row (``folded(deltas_only=False)``: the fold into a new base);
- ``lookup``: the live rows of ``--keys`` random keys (a round's read of the keys it touched).

Each result is written by Spark's no-op sink (computed, not stored) and checked against
pandas applying the same layers in order.

    python -m bench.state_scan --base-rows 1000000 --deltas 24 --delta-rows 20000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SCHEMA_DDL = "key long, __n long, __total long"


def _layers(spark: Any, root: Path, base_rows: int, deltas: int, delta_rows: int, seed: int) -> list[tuple[str, bool]]:
    """Write the chain (``w=<n>-a1/state.main`` per layer, as a job's snapshots are laid out)."""
    from lockgate.runtime.state.layers import DELETED

    rng = np.random.default_rng(seed)
    base = pd.DataFrame({"key": np.arange(base_rows, dtype=np.int64), "__n": np.ones(base_rows, dtype=np.int64),
                         "__total": np.arange(base_rows, dtype=np.int64)})
    folders = [(root / f"w={0:010d}-a1" / "state.main", False)]
    spark.createDataFrame(base).write.parquet(str(folders[0][0]))
    for i in range(1, deltas + 1):
        keys = rng.integers(0, base_rows, delta_rows, dtype=np.int64)
        delta = pd.DataFrame({"key": keys, "__n": np.full(delta_rows, i + 1, dtype=np.int64),
                              "__total": rng.integers(0, 1000, delta_rows, dtype=np.int64)})
        delta = delta.drop_duplicates("key", keep="last")
        delta[DELETED] = False
        folder = root / f"w={i:010d}-a1" / "state.main"
        spark.createDataFrame(delta).coalesce(1).write.parquet(str(folder))
        folders.append((folder, True))
    return [(f"file://{folder}", is_delta) for folder, is_delta in folders]


def _expected(layers: list[tuple[str, bool]]) -> pd.DataFrame:
    """Each key's newest row, applying the layers in order with pandas."""
    frames = []
    for rank, (uri, _is_delta) in enumerate(layers):
        df = pd.read_parquet(uri.removeprefix("file://"), columns=["key", "__n", "__total"])
        frames.append(df.assign(rank=rank))
    every = pd.concat(frames).sort_values(["key", "rank"])
    return every.drop_duplicates("key", keep="last").drop(columns="rank").set_index("key").sort_index()


def _timed(df: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _same(df: Any, want: pd.DataFrame, what: str) -> None:
    got = df.select("key", "__n", "__total").toPandas().set_index("key").sort_index()
    if not got.astype("int64").equals(want.astype("int64")):
        raise AssertionError(f"{what}: the rows differ from pandas applying the layers in order")


def measure(work: Path, base_rows: int, deltas: int, delta_rows: int, keys: int, reps: int) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from lockgate.runtime.session import get_spark
    from lockgate.runtime.state.layers import LayeredState

    spark = get_spark("local[2]")
    layers = _layers(spark, work / "snapshots", base_rows, deltas, delta_rows, seed=7)
    schema = StructType.fromDDL(SCHEMA_DDL)
    identity = ("key",)
    chain = LayeredState(spark, schema, layers, None)
    only_deltas = LayeredState(spark, schema, layers[1:], None)
    rng = np.random.default_rng(11)
    wanted = pd.DataFrame({"key": rng.choice(base_rows, keys, replace=False).astype(np.int64)})
    key_frame = spark.createDataFrame(wanted).cache()
    key_frame.count()

    want_all = _expected(layers)
    want_deltas = _expected(layers[1:])
    folded_deltas = only_deltas.folded(identity, deltas_only=True).filter(~F.col("__lg_del"))
    _same(folded_deltas, want_deltas, "deltas")
    _same(chain.folded(identity, deltas_only=False), want_all, "fold")
    _same(chain.lookup(identity, key_frame, ["key"]), want_all.loc[sorted(wanted["key"])], "lookup")
    return {
        "machine": f"{os.cpu_count()} cores, local[2]",
        "date": datetime.now(UTC).date().isoformat(),
        "base_rows": base_rows,
        "deltas": deltas,
        "delta_rows": int(sum(pd.read_parquet(u.removeprefix("file://")).shape[0] for u, d in layers if d)),
        "lookup_keys": keys,
        "reps": reps,
        "seconds": {
            "deltas": round(_timed(only_deltas.folded(identity, deltas_only=True), reps), 3),
            "fold": round(_timed(chain.folded(identity, deltas_only=False), reps), 3),
            "lookup": round(_timed(chain.lookup(identity, key_frame, ["key"]), reps), 3),
        },
        "checked": "every read equals pandas applying the same layers in order",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-rows", type=int, default=1_000_000)
    p.add_argument("--deltas", type=int, default=24)
    p.add_argument("--delta-rows", type=int, default=20_000)
    p.add_argument("--keys", type=int, default=20_000, help="keys a lookup reads")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--out", default="bench/results/state_scan.json")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="lockgate-state-scan-"))
    try:
        result = measure(work, args.base_rows, args.deltas, args.delta_rows, args.keys, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
