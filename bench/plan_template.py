"""What a round's plan costs built step by step against bound from a template built once.

    python -m bench.plan_template [--rounds 20] [--out bench/results/plan_template.json]

A running sum's round, written as Lockgate's running aggregate builds it (the window's partials
per key, the state's rows of the touched keys from a base and a delta, ranked so that the newest
wins, merged, the touched keys kept), over new files and a new bound every round, in one warm
JVM. Each round is built twice: step by step, as a round is today (every step analysed as it is
made), and bound from a :class:`lockgate.runtime.plan_template.PlanTemplate` built in the first
round. Timed per round: building the frame (Python, Py4J, analysis), then the optimizer and the
physical planning of it (Spark does both for either). Both frames' rows are checked against
pandas every round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

WINDOW = "k long, v long"
STATE = "k long, total long, n long, __deleted boolean"


def _steps(rows: Any, base: Any, delta: Any, low: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = rows.filter(F.col("v") >= low)
    new = rows.groupBy("k").agg(F.sum("v").alias("total"), F.count(F.lit(1)).alias("n"),
                                (F.count(F.lit(1)) > 0).cast("int").alias("__touched"))
    keys = F.broadcast(new.select(F.col("k").alias("__lg_k_k")).distinct())
    layers = []
    for rank, layer in enumerate((base, delta)):
        layer = layer.withColumn("__rank", F.lit(rank))
        layers.append(layer.join(keys, layer["k"].eqNullSafe(keys["__lg_k_k"]), "left_semi"))
    union = layers[0].unionByName(layers[1])
    newest = F.row_number().over(Window.partitionBy("k").orderBy(F.col("__rank").desc(), F.col("__deleted").asc()))
    old = (union.withColumn("__lg_n", newest).filter(F.col("__lg_n") == 1).drop("__lg_n", "__rank")
           .filter(~F.col("__deleted")).select("k", "total", "n"))
    merged = (old.withColumn("__touched", F.lit(0)).unionByName(new).groupBy("k")
              .agg(F.sum("total").alias("total"), F.sum("n").alias("n"), F.max("__touched").alias("__touched")))
    return merged.filter(F.col("__touched") == 1).drop("__touched")


def _files(folder: Path, rng: np.random.Generator, i: int) -> tuple[dict[str, str], dict[str, pd.DataFrame]]:
    keys = np.arange(2000)
    frames = {
        "rows": pd.DataFrame({"k": rng.integers(0, 2000, 5000), "v": rng.integers(0, 1000, 5000)}),
        "base": pd.DataFrame({"k": keys, "total": rng.integers(0, 10**6, 2000), "n": rng.integers(1, 99, 2000),
                              "__deleted": False}),
        "delta": pd.DataFrame({"k": keys[::3], "total": rng.integers(0, 10**6, 667), "n": rng.integers(1, 9, 667),
                               "__deleted": rng.random(667) < 0.1}),
    }
    paths = {}
    for name, frame in frames.items():
        d = folder / f"r{i}" / name
        d.mkdir(parents=True)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), d / "part-0.parquet")
        paths[name] = str(d)
    return paths, frames


def _pandas(f: dict[str, pd.DataFrame], low: int) -> pd.DataFrame:
    rows = f["rows"][f["rows"].v >= low]
    new = rows.groupby("k", as_index=False).agg(total=("v", "sum"), n=("v", "size"))
    layers = pd.concat([f["base"].assign(r=0), f["delta"].assign(r=1)])
    layers = layers[layers.k.isin(new.k)].sort_values(["k", "r"]).groupby("k").tail(1)
    old = layers[~layers.__deleted][["k", "total", "n"]]
    return pd.concat([old, new]).groupby("k", as_index=False)[["total", "n"]].sum().sort_values("k").reset_index(drop=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from lockgate.runtime.plan_template import PlanTemplate
    from lockgate.runtime.session import get_spark, stop_spark

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default="bench/results/plan_template.json")
    args = ap.parse_args(argv)
    spark = get_spark("local[2]")
    rng = np.random.default_rng(28)
    reads = {"rows": WINDOW, "base": STATE, "delta": STATE}
    timings: dict[str, list[float]] = {"build": [], "bind": [], "plan_built": [], "plan_bound": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            template = None
            for i in range(args.rounds):
                paths, frames = _files(Path(tmp), rng, i)
                low = int(rng.integers(0, 300))

                def inputs(paths: dict[str, str] = paths) -> dict[str, Any]:
                    return {n: spark.read.schema(reads[n]).parquet(p) for n, p in paths.items()}

                if template is None:
                    template = PlanTemplate.build(
                        spark, lambda i, p: _steps(i["rows"], i["base"], i["delta"], p["low"]), inputs(), ["low"])
                t = time.perf_counter()
                built = _steps(*inputs().values(), F.lit(low))
                t1 = time.perf_counter()
                bound = template.bind(inputs(), {"low": low})
                t2 = time.perf_counter()
                built._jdf.queryExecution().executedPlan()
                t3 = time.perf_counter()
                bound._jdf.queryExecution().executedPlan()
                t4 = time.perf_counter()
                want = _pandas(frames, low)
                for df in (built, bound):
                    got = df.toPandas().sort_values("k").reset_index(drop=True)
                    pd.testing.assert_frame_equal(got, want, check_dtype=False)
                if i:  # the first round builds the template and warms the JVM
                    for k, v in zip(timings, (t1 - t, t2 - t1, t3 - t2, t4 - t3), strict=True):
                        timings[k].append(v * 1000)
    finally:
        stop_spark()
    result = {
        "date": date.today().isoformat(),
        "rounds": args.rounds,
        "median_ms": {k: round(statistics.median(v), 1) for k, v in timings.items()},
        "checked": "both frames' rows equal pandas every round",
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
