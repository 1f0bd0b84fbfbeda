"""The graph library (``lockgate.graph.library``) against plain PySpark loops and igraph::

    python -m bench.graph                 # 1M edges, 20 windows of 50k new edges, 50 supersteps
    python -m bench.graph --quick         # tiny sizes, a few minutes: the smoke check
    python -m bench.graph --edges 300000 --windows 10 --window-edges 20000 --supersteps 30

One seeded R-MAT-like directed graph (numpy, ids scrambled, no self-loops, unique edges) is
generated once and written to Parquet: a base graph of ``--edges`` edges and ``--windows``
windows of ``--window-edges`` new edges each (the next edges of the same stream). Everything
then runs in one process and one SparkSession (``lockgate.runtime.session.get_spark``,
``local[2]``, 8 shuffle partitions, driver memory 4g), state and data in a temporary folder
under /tmp that is deleted at the end:

1. **Static** (the base graph, ``--reps`` interleaved rounds, medians): PageRank with the same
   number of iterations for all (``tolerance=0``, ``--iterations`` 20): Lockgate (``pagerank``,
   every superstep's state written to Parquet, its checkpoint) against the same iterations as a
   plain DataFrame loop
   (join ranks with edges, ``groupBy(dst).sum``, dangling mass, teleport, ``localCheckpoint()``
   each iteration), once reading the edges from Parquet each iteration as Lockgate does and once
   with the edges cached, and igraph's ``Graph.pagerank`` (one core, solved exactly). Weakly
   connected components: Lockgate (``connected_components``), a plain min-label propagation loop
   (only the vertices whose label changed send, ``localCheckpoint()`` each iteration, stop when
   nothing changes) and igraph's ``connected_components(mode="weak")``. Lockgate's ranks are
   checked against the plain loop's (max abs diff), its components against both others'.
2. **Dynamic**: per window, components incrementally (``previous=`` the last window's values,
   ``new_edges=`` the window) against from scratch (on the first and every ``--scratch-every``
   th window; each time checked equal); PageRank warm-started from the last window's ranks
   against a cold start, same tolerance (each of ``--pr-tolerance``), on the last
   ``--pagerank-windows`` windows (each one's cold start is the next one's ``previous``), both
   compared with igraph's exact ranks.
3. **Per-superstep cost**: PageRank with ``tolerance=0`` for ``--supersteps`` iterations on the
   base graph, every superstep's ``elapsed_ms`` (``on_superstep``), and its least-squares slope.

Results: ``bench/results/graph.json`` (every figure) and ``bench/results/graph.md`` (the tables);
``--quick`` writes them to ``/tmp/lockgate-graph-quick.{json,md}`` unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .config import RESULTS
from .provenance import engine_version

SEED = 20260101
DAMPING = 0.85
MASTER = "local[2]"
SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "4g"}


def log(msg: str) -> None:
    print(f"[graph {datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def machine() -> dict[str, Any]:
    """CPU model, cores and memory from /proc."""
    model, mem_kib = "unknown", 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }


class LoadSampler(threading.Thread):
    """The 1-minute load average every ``every`` seconds (the machine may be shared)."""

    def __init__(self, every: float = 15.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.started = every, [], time.perf_counter()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append([round(time.perf_counter() - self.started), round(os.getloadavg()[0], 2)])
            self._stop_event.wait(self.every)

    def summary(self) -> dict[str, Any]:
        self._stop_event.set()
        loads = [x for _, x in self.samples]
        return {"every_s": self.every, "mean": round(statistics.fmean(loads), 2) if loads else None,
                "max": max(loads, default=None), "samples": self.samples}


# -- data ----------------------------------------------------------------------------------------


def rmat_stream(total: int, seed: int = SEED, a: float = 0.57, b: float = 0.19, c: float = 0.19
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """``total`` unique directed edges (no self-loops) of an R-MAT graph over ``2**scale`` ids
    (about 8 edges per id), in the order they were drawn; ids scrambled by a seeded permutation
    so that an id says nothing about its degree. Returns ``src, dst, scale``."""
    scale = max(8, math.ceil(math.log2(max(total, 1) / 8)))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(2**scale).astype(np.int64)
    keys = np.empty(0, dtype=np.int64)
    while True:
        m = int((total - len(keys)) * 1.5) + 1024
        src = np.zeros(m, dtype=np.int64)
        dst = np.zeros(m, dtype=np.int64)
        for _ in range(scale):
            r = rng.random(m)
            src = src * 2 + (r >= a + b)
            dst = dst * 2 + (((r >= a) & (r < a + b)) | (r >= a + b + c))
        keep = src != dst
        cand = np.concatenate([keys, src[keep] << 32 | dst[keep]])
        _, first = np.unique(cand, return_index=True)
        keys = cand[np.sort(first)]  # unique, in the order drawn
        if len(keys) >= total:
            keys = keys[:total]
            break
    return perm[keys >> 32], perm[keys & 0xFFFFFFFF], scale


def write_edges(path: Path, src: np.ndarray, dst: np.ndarray) -> None:
    pq.write_table(pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64())}), path)


# -- plain PySpark loops (the lower bound) --------------------------------------------------------


def plain_pagerank(spark: Any, edge_paths: list[str], iterations: int, cache_edges: bool) -> tuple[Any, float]:
    """networkx's PageRank iteration as a DataFrame loop, ``iterations`` times, lineage cut by
    ``localCheckpoint()`` each iteration. Returns the ranks (``id``, ``rank``) and seconds."""
    from pyspark.sql import functions as F

    t = time.perf_counter()
    e = spark.read.parquet(*edge_paths).select("src", "dst")
    if cache_edges:
        e = e.cache()
        e.count()
    ids = e.select(F.col("src").alias("id")).union(e.select(F.col("dst").alias("id"))).distinct()
    out = e.groupBy(F.col("src").alias("id")).agg(F.count(F.lit(1)).alias("deg"))
    v = ids.join(out, "id", "left").select("id", F.coalesce("deg", F.lit(0)).alias("deg")).localCheckpoint()
    n = v.count()
    ranks = v.select("id", "deg", F.lit(1.0 / n).alias("rank")).localCheckpoint()
    for _ in range(iterations):
        dangling = ranks.where(F.col("deg") == 0).agg(F.sum("rank")).first()[0] or 0.0
        contrib = ranks.where(F.col("deg") > 0).select(F.col("id").alias("src"),
                                                      (F.col("rank") / F.col("deg")).alias("c"))
        sums = e.join(contrib, "src").groupBy(F.col("dst").alias("id")).agg(F.sum("c").alias("s"))
        teleport = (1 - DAMPING) / n + DAMPING * dangling / n
        ranks = ranks.join(sums, "id", "left").select(
            "id", "deg", (F.lit(teleport) + DAMPING * F.coalesce(F.col("s"), F.lit(0.0))).alias("rank")
        ).localCheckpoint()
    seconds = time.perf_counter() - t
    if cache_edges:
        e.unpersist()
    return ranks.select("id", "rank"), seconds


def plain_components(spark: Any, edge_paths: list[str], cache_edges: bool) -> tuple[Any, float, int]:
    """Weakly connected components by min-label propagation as a DataFrame loop: the vertices
    whose label changed send it both ways along their edges, each vertex takes the smallest label
    it got; ``localCheckpoint()`` each iteration, stop when no label changed. Returns the labels
    (``id``, ``component``), seconds and iterations."""
    from pyspark.sql import functions as F

    t = time.perf_counter()
    e = spark.read.parquet(*edge_paths).select("src", "dst")
    if cache_edges:
        e = e.cache()
        e.count()
    ids = e.select(F.col("src").alias("id")).union(e.select(F.col("dst").alias("id"))).distinct()
    labels = ids.select("id", F.col("id").alias("label"), F.lit(True).alias("changed")).localCheckpoint()
    iterations = 0
    while True:
        iterations += 1
        senders = labels.where("changed").select(F.col("id").alias("s"), F.col("label").alias("l"))
        fwd = e.join(senders, e["src"] == senders["s"]).select(F.col("dst").alias("id"), "l")
        bwd = e.join(senders, e["dst"] == senders["s"]).select(F.col("src").alias("id"), "l")
        mins = fwd.union(bwd).groupBy("id").agg(F.min("l").alias("m"))
        smaller = F.coalesce(F.col("m") < F.col("label"), F.lit(False))
        labels = labels.join(mins, "id", "left").select(
            "id", F.when(smaller, F.col("m")).otherwise(F.col("label")).alias("label"), smaller.alias("changed")
        ).localCheckpoint()
        if labels.where("changed").limit(1).count() == 0:
            break
    seconds = time.perf_counter() - t
    if cache_edges:
        e.unpersist()
    return labels.select("id", F.col("label").alias("component")), seconds, iterations


# -- igraph (or networkx) on one core ------------------------------------------------------------


def reference_lib() -> str:
    try:
        import igraph  # noqa: F401

        return "igraph"
    except ImportError:
        return "networkx"


def reference_run(lib: str, src: np.ndarray, dst: np.ndarray) -> dict[str, Any]:
    """Build the graph, PageRank (exact) and weak components. Returns timings and results
    (vertex ids, ranks, component labels as the smallest id of each component)."""
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    s, d = inv[: len(src)], inv[len(src):]
    out: dict[str, Any] = {"lib": lib, "ids": ids}
    if lib == "igraph":
        import igraph as ig

        out["version"] = ig.__version__
        t = time.perf_counter()
        g = ig.Graph(n=len(ids), edges=np.column_stack([s, d]).tolist(), directed=True)
        out["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        ranks = np.asarray(g.pagerank(directed=True, damping=DAMPING))
        out["pagerank_s"] = time.perf_counter() - t
        t = time.perf_counter()
        membership = np.asarray(g.connected_components(mode="weak").membership)
        out["components_s"] = time.perf_counter() - t
    else:
        import networkx as nx

        out["version"] = nx.__version__
        t = time.perf_counter()
        g = nx.DiGraph()
        g.add_nodes_from(range(len(ids)))
        g.add_edges_from(zip(s.tolist(), d.tolist(), strict=True))
        out["build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        pr = nx.pagerank(g, alpha=DAMPING, tol=1e-12, max_iter=1000)
        out["pagerank_s"] = time.perf_counter() - t
        ranks = np.array([pr[i] for i in range(len(ids))])
        t = time.perf_counter()
        membership = np.empty(len(ids), dtype=np.int64)
        for k, comp in enumerate(nx.weakly_connected_components(g)):
            membership[list(comp)] = k
        out["components_s"] = time.perf_counter() - t
    # a component's label: the smallest vertex id in it (what min-label propagation gives)
    smallest = np.full(membership.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smallest, membership, ids)
    out["ranks"], out["labels"] = ranks, smallest[membership]
    out["num_components"] = int(membership.max() + 1)
    return out


# -- helpers -------------------------------------------------------------------------------------


def collect(df: Any, key: str, value: str) -> tuple[np.ndarray, np.ndarray]:
    pdf = df.select(key, value).toPandas().sort_values(key)
    return pdf[key].to_numpy(), pdf[value].to_numpy()


def same_ids(a: np.ndarray, b: np.ndarray) -> None:
    if len(a) != len(b) or not np.array_equal(a, b):
        raise AssertionError(f"the vertex sets differ ({len(a)} vs {len(b)} vertices)")


def rm(path: Path | str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def r3(x: float) -> float:
    return round(x, 3)


def slope(xs: list[float], ys: list[float]) -> float:
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


# -- the benchmark -------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=int, default=1_000_000, help="edges of the base (static) graph")
    ap.add_argument("--windows", type=int, default=20, help="windows of new edges (dynamic)")
    ap.add_argument("--window-edges", type=int, default=50_000, help="new edges per window")
    ap.add_argument("--supersteps", type=int, default=50, help="PageRank iterations for the per-superstep cost")
    ap.add_argument("--iterations", type=int, default=20, help="PageRank iterations of the static comparison")
    ap.add_argument("--scratch-every", type=int, default=5,
                    help="components from scratch on the first and every N-th window (and the last)")
    ap.add_argument("--pagerank-windows", type=int, default=3, help="warm vs cold PageRank on the last N windows")
    ap.add_argument("--pr-tolerance", default="1e-8,1e-10",
                    help="the warm/cold PageRank tolerances, comma-separated (networkx's rule: the ranks' total "
                    "L1 change < vertices * tolerance)")
    ap.add_argument("--reps", type=int, default=2,
                    help="rounds of the static comparisons (Lockgate then the plain loops, each round; medians)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the smoke check, a few minutes)")
    ap.add_argument("--out", default=None, help="the JSON result (the .md beside it)")
    ap.add_argument("--work", default=None, help="data and state folder (default: a new folder under /tmp)")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the .md from the JSON (--out)")
    ap.add_argument("--load-log", default=None,
                    help="with --report-only: 'HH:MM:SS load1 load5 load15' lines sampled during the run, "
                    "stored as the run's load samples when its JSON has none")
    args = ap.parse_args()
    if args.quick:
        args.edges, args.windows, args.window_edges = 20_000, 2, 2_000
        args.supersteps, args.iterations, args.scratch_every, args.pagerank_windows = 5, 3, 1, 1
        args.reps = 1
    out_json = Path(args.out) if args.out else (
        Path("/tmp/lockgate-graph-quick.json") if args.quick else RESULTS / "graph.json")
    out_md = out_json.with_suffix(".md")
    if args.report_only:
        doc = derive(json.loads(out_json.read_text()))
        if args.load_log and "load_1min" not in doc["machine"]:
            loads = [float(ln.split()[1]) for ln in Path(args.load_log).read_text().splitlines() if ln.strip()]
            doc["machine"]["load_1min"] = {"every_s": 15.0, "mean": round(statistics.fmean(loads), 2),
                                           "max": max(loads), "source": "sampled beside the run (--load-log)",
                                           "samples": [ln.split()[:2] for ln in
                                                       Path(args.load_log).read_text().splitlines() if ln.strip()]}
        out_json.write_text(json.dumps(doc, indent=2) + "\n")
        out_md.write_text(markdown(doc))
        print(out_md.read_text())
        return
    pr_windows = max(0, min(args.pagerank_windows, args.windows))
    tolerances = [float(x) for x in str(args.pr_tolerance).split(",") if x.strip()]

    began = time.perf_counter()
    sampler = LoadSampler()
    sampler.start()
    info = machine()
    version = engine_version()
    work = Path(args.work or tempfile.mkdtemp(prefix="lockgate-graph-bench-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    data, state = work / "data", work / "state"
    data.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    log(f"work dir {work}; {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; "
        f"commit {version['commit']}")

    # 1. the data
    t = time.perf_counter()
    total = args.edges + args.windows * args.window_edges
    src, dst, scale = rmat_stream(total)
    paths = [data / "edges-base.parquet"]
    write_edges(paths[0], src[: args.edges], dst[: args.edges])
    for k in range(1, args.windows + 1):
        lo = args.edges + (k - 1) * args.window_edges
        paths.append(data / f"edges-w{k:04d}.parquet")
        write_edges(paths[k], src[lo: lo + args.window_edges], dst[lo: lo + args.window_edges])
    spaths = [str(p) for p in paths]
    base_src, base_dst = src[: args.edges], dst[: args.edges]
    base_vertices = len(np.unique(np.concatenate([base_src, base_dst])))
    all_vertices = len(np.unique(np.concatenate([src, dst])))
    gen_s = time.perf_counter() - t
    log(f"data: {total:,} unique edges (R-MAT scale {scale}), base {args.edges:,} edges / {base_vertices:,} "
        f"vertices, {args.windows} windows of {args.window_edges:,}; {all_vertices:,} vertices in all ({gen_s:.1f} s)")


    from lockgate.graph.library import connected_components, pagerank
    from lockgate.runtime.session import get_spark

    conf = {**SPARK_CONF, "spark.local.dir": str(work / "spark-local")}
    t = time.perf_counter()
    spark = get_spark(MASTER, "lockgate-graph-bench", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    spark_conf = {k: spark.conf.get(k) for k in ("spark.master", "spark.sql.shuffle.partitions", "spark.driver.memory",
                                                 "spark.sql.adaptive.enabled")}
    spark_conf["spark_version"] = spark.version
    log(f"spark {spark.version} up in {time.perf_counter() - t:.1f} s: {spark_conf}")

    def edges(upto: int) -> Any:
        return spark.read.parquet(*spaths[: upto + 1])

    # warm-up (untimed): the JVM's first jobs, every code path once, on a small graph
    t = time.perf_counter()
    warm = data / "warmup.parquet"
    write_edges(warm, base_src[:5000], base_dst[:5000])
    wdf = spark.read.parquet(str(warm))
    pagerank(wdf, str(state / "warm-pr"), tolerance=0.0, max_iterations=3)
    connected_components(wdf, str(state / "warm-cc"))
    plain_pagerank(spark, [str(warm)], 3, cache_edges=False)
    plain_components(spark, [str(warm)], cache_edges=False)
    rm(state / "warm-pr")
    rm(state / "warm-cc")
    log(f"warm-up done ({time.perf_counter() - t:.1f} s)")

    result: dict[str, Any] = {
        "benchmark": "graph",
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": info,
        "code": version,
        "spark": spark_conf,
        "params": {
            "edges": args.edges, "windows": args.windows, "window_edges": args.window_edges,
            "supersteps": args.supersteps, "iterations": args.iterations, "scratch_every": args.scratch_every,
            "pagerank_windows": pr_windows, "pr_tolerance": tolerances, "reps": args.reps, "quick": args.quick,
            "damping": DAMPING, "seed": SEED, "generator": f"R-MAT (a,b,c,d = 0.57,0.19,0.19,0.05), scale {scale}, "
            "ids scrambled, unique edges, no self-loops",
            # the dynamic runs read the windows' edge files in place (stored_edges=), as a pipeline's
            # graph operator reads its edge layers; the static ones copy the edges into their folder
            "dynamic_edges_in_place": True,
        },
        "data": {"base_edges": args.edges, "base_vertices": base_vertices, "total_edges": total,
                 "total_vertices": all_vertices, "generate_s": r3(gen_s)},
    }
    ref_name = reference_lib()

    # 2. static: PageRank, same iterations; --reps rounds, each Lockgate then the plain loops
    times: dict[str, list[float]] = {"lockgate": [], "plain_parquet_edges": [], "plain_cached_edges": []}
    diffs: dict[str, float] = {"plain_parquet_edges": 0.0, "plain_cached_edges": 0.0}
    lg_pr = None
    for rep in range(args.reps):
        log(f"static PageRank, {args.iterations} iterations, round {rep + 1}/{args.reps}: Lockgate ...")
        t = time.perf_counter()
        lg_pr = pagerank(edges(0), str(state / "pr-static"), tolerance=0.0, max_iterations=args.iterations)
        times["lockgate"].append(time.perf_counter() - t)
        lg_ids, lg_ranks = collect(lg_pr.output, "id", "rank")
        log(f"  Lockgate {times['lockgate'][-1]:.1f} s ({lg_pr.superstep} supersteps, halted by {lg_pr.halted_by})")
        rm(state / "pr-static")
        for cached in (False, True):
            name = "plain_cached_edges" if cached else "plain_parquet_edges"
            ranks_df, secs = plain_pagerank(spark, spaths[:1], args.iterations, cache_edges=cached)
            times[name].append(secs)
            ids_p, ranks_p = collect(ranks_df, "id", "rank")
            same_ids(lg_ids, ids_p)
            diffs[name] = max(diffs[name], float(np.max(np.abs(lg_ranks - ranks_p))))
            log(f"  {name} {secs:.1f} s (max |Lockgate - plain| = {diffs[name]:.2e})")
    assert lg_pr is not None
    log(f"static {ref_name} (one core) ...")
    ref = reference_run(ref_name, base_src, base_dst)
    same_ids(lg_ids, ref["ids"])
    log(f"  {ref_name}: build {ref['build_s']:.1f} s, pagerank {ref['pagerank_s']:.2f} s, "
        f"components {ref['components_s']:.2f} s")
    med = {k: statistics.median(v) for k, v in times.items()}
    pr_static = {
        "iterations": args.iterations,
        "reps": args.reps,
        "lockgate": {"seconds": r3(med["lockgate"]), "runs_s": [r3(x) for x in times["lockgate"]],
                     "supersteps": lg_pr.superstep, "halted_by": lg_pr.halted_by},
        **{k: {"seconds": r3(med[k]), "runs_s": [r3(x) for x in times[k]], "max_abs_diff_vs_lockgate": diffs[k]}
           for k in diffs},
        "reference": {"lib": ref_name, "version": ref["version"], "seconds": r3(ref["pagerank_s"]),
                      "build_s": r3(ref["build_s"]), "exact": True,
                      "max_abs_diff_vs_lockgate": float(np.max(np.abs(lg_ranks - ref["ranks"]))),
                      "l1_diff_vs_lockgate": float(np.sum(np.abs(lg_ranks - ref["ranks"])))},
        "ratio_lockgate_vs_plain_parquet": r3(med["lockgate"] / med["plain_parquet_edges"]),
        "ratio_lockgate_vs_plain_cached": r3(med["lockgate"] / med["plain_cached_edges"]),
        "target_ratio": 1.1,  # issue 30
    }
    result["static_pagerank"] = pr_static

    # 2. static: weakly connected components, --reps rounds; the last Lockgate result seeds the windows
    times = {"lockgate": [], "plain_parquet_edges": [], "plain_cached_edges": []}
    equal_plain: dict[str, bool] = {"plain_parquet_edges": True, "plain_cached_edges": True}
    iters_plain: dict[str, int] = {}
    cc_prev = None
    for rep in range(args.reps):
        log(f"static components, round {rep + 1}/{args.reps}: Lockgate ...")
        if cc_prev is not None:
            rm(state / "cc-inc-0000")
        t = time.perf_counter()
        cc_prev = connected_components(edges(0), str(state / "cc-inc-0000"))
        times["lockgate"].append(time.perf_counter() - t)
        lg_cids, lg_labels = collect(cc_prev.output, "id", "component")
        log(f"  Lockgate {times['lockgate'][-1]:.1f} s ({cc_prev.superstep} supersteps)")
        for cached in (False, True):
            name = "plain_cached_edges" if cached else "plain_parquet_edges"
            labels_df, secs, iters = plain_components(spark, spaths[:1], cache_edges=cached)
            times[name].append(secs)
            iters_plain[name] = iters
            ids_p, labels_p = collect(labels_df, "id", "component")
            same_ids(lg_cids, ids_p)
            equal_plain[name] = equal_plain[name] and bool(np.array_equal(lg_labels, labels_p))
            log(f"  {name} {secs:.1f} s ({iters} iterations, equal: {equal_plain[name]})")
    assert cc_prev is not None
    same_ids(lg_cids, ref["ids"])
    med = {k: statistics.median(v) for k, v in times.items()}
    result["static_components"] = {
        "reps": args.reps,
        "lockgate": {"seconds": r3(med["lockgate"]), "runs_s": [r3(x) for x in times["lockgate"]],
                     "supersteps": cc_prev.superstep, "halted_by": cc_prev.halted_by},
        **{k: {"seconds": r3(med[k]), "runs_s": [r3(x) for x in times[k]], "iterations": iters_plain[k],
               "labels_equal_lockgate": equal_plain[k]} for k in equal_plain},
        "reference": {"lib": ref_name, "seconds": r3(ref["components_s"]),
                      "labels_equal_lockgate": bool(np.array_equal(lg_labels, ref["labels"]))},
        "num_components": int(len(np.unique(lg_labels))),
        "largest_component": int(np.max(np.unique(lg_labels, return_counts=True)[1])),
        "ratio_lockgate_vs_plain_parquet": r3(med["lockgate"] / med["plain_parquet_edges"]),
        "ratio_lockgate_vs_plain_cached": r3(med["lockgate"] / med["plain_cached_edges"]),
    }
    checks_ok = all(equal_plain.values()) and result["static_components"]["reference"]["labels_equal_lockgate"]
    del ref

    # 3. dynamic: components per window, incremental against from scratch
    log(f"dynamic components: {args.windows} windows of {args.window_edges:,} new edges")
    scratch_windows = sorted({1, args.windows, *range(args.scratch_every, args.windows + 1, args.scratch_every)}
                             ) if args.windows else []
    windows: list[dict[str, Any]] = []
    for k in range(1, args.windows + 1):
        batch = spark.read.parquet(spaths[k])
        t = time.perf_counter()
        inc = connected_components(edges(k), str(state / f"cc-inc-{k:04d}"), previous=cc_prev.values,
                                   new_edges=batch, stored_edges=spaths[:k])
        inc_s = time.perf_counter() - t
        row: dict[str, Any] = {"window": k, "incremental_s": r3(inc_s), "incremental_supersteps": inc.superstep,
                               "incremental_supersteps_s": r3(sum(x.elapsed_ms for x in inc.stats) / 1000)}
        msg = f"  window {k}: incremental {inc_s:.1f} s ({inc.superstep} supersteps)"
        if k in scratch_windows:
            t = time.perf_counter()
            full = connected_components(edges(k), str(state / f"cc-scratch-{k:04d}"), stored_edges=spaths[: k + 1])
            full_s = time.perf_counter() - t
            a_ids, a_lab = collect(inc.output, "id", "component")
            b_ids, b_lab = collect(full.output, "id", "component")
            equal = bool(np.array_equal(a_ids, b_ids) and np.array_equal(a_lab, b_lab))
            checks_ok = checks_ok and equal
            row.update({"scratch_s": r3(full_s), "scratch_supersteps": full.superstep, "equal": equal,
                        "scratch_supersteps_s": r3(sum(x.elapsed_ms for x in full.stats) / 1000),
                        "speedup": r3(full_s / inc_s), "components": int(len(np.unique(b_lab)))})
            msg += f", from scratch {full_s:.1f} s ({full.superstep} supersteps), equal: {equal}"
            rm(state / f"cc-scratch-{k:04d}")
        log(msg)
        windows.append(row)
        rm(state / f"cc-inc-{k - 1:04d}")
        cc_prev = inc
    rm(state / f"cc-inc-{args.windows:04d}")
    inc_times = [w["incremental_s"] for w in windows]
    scr = [w for w in windows if "scratch_s" in w]
    inc_on_scr = [w["incremental_s"] for w in scr]
    result["dynamic_components"] = {
        "windows": windows,
        "scratch_windows": scratch_windows,
        "incremental_median_s": r3(statistics.median(inc_times)) if inc_times else None,
        "incremental_median_supersteps": statistics.median([w["incremental_supersteps"] for w in windows])
        if windows else None,
        "scratch_median_s": r3(statistics.median([w["scratch_s"] for w in scr])) if scr else None,
        "scratch_median_supersteps": statistics.median([w["scratch_supersteps"] for w in scr]) if scr else None,
        "incremental_median_s_on_scratch_windows": r3(statistics.median(inc_on_scr)) if scr else None,
        "speedup_median": r3(statistics.median([w["speedup"] for w in scr])) if scr else None,
        "all_equal": all(w["equal"] for w in scr),
        "target_speedup": 5.0,
    }

    # 3. dynamic: PageRank warm start against cold start on the last windows, per tolerance
    result["dynamic_pagerank"] = []
    first = args.windows - pr_windows + 1
    for tol in tolerances if pr_windows else []:
        log(f"dynamic PageRank (tolerance {tol:g}): cold start of window {first - 1} (the seed) ...")
        t = time.perf_counter()
        seed_run = pagerank(edges(first - 1), str(state / f"pr-cold-{first - 1:04d}"), tolerance=tol)
        seed = {"window": first - 1, "cold_s": r3(time.perf_counter() - t), "cold_supersteps": seed_run.superstep}
        log(f"  window {first - 1}: cold {seed['cold_s']:.1f} s ({seed_run.superstep} supersteps)")
        prev = seed_run
        pr_rows: list[dict[str, Any]] = []
        for k in range(first, args.windows + 1):
            t = time.perf_counter()
            warm_run = pagerank(edges(k), str(state / f"pr-warm-{k:04d}"), tolerance=tol, previous=prev.values,
                                stored_edges=spaths[: k + 1])
            warm_s = time.perf_counter() - t
            t = time.perf_counter()
            cold_run = pagerank(edges(k), str(state / f"pr-cold-{k:04d}"), tolerance=tol, stored_edges=spaths[: k + 1])
            cold_s = time.perf_counter() - t
            w_ids, w_r = collect(warm_run.output, "id", "rank")
            c_ids, c_r = collect(cold_run.output, "id", "rank")
            same_ids(w_ids, c_ids)
            n_k = args.edges + k * args.window_edges
            exact = reference_run(ref_name, src[:n_k], dst[:n_k])
            same_ids(w_ids, exact["ids"])
            row = {"window": k, "warm_s": r3(warm_s), "warm_supersteps": warm_run.superstep,
                   "warm_halted_by": warm_run.halted_by, "cold_s": r3(cold_s),
                   "cold_supersteps": cold_run.superstep, "cold_halted_by": cold_run.halted_by,
                   "speedup": r3(cold_s / warm_s), "max_abs_diff_warm_vs_cold": float(np.max(np.abs(w_r - c_r))),
                   "l1_warm_vs_exact": float(np.sum(np.abs(w_r - exact["ranks"]))),
                   "l1_cold_vs_exact": float(np.sum(np.abs(c_r - exact["ranks"])))}
            del exact
            pr_rows.append(row)
            log(f"  window {k}: warm {warm_s:.1f} s ({warm_run.superstep} supersteps), cold {cold_s:.1f} s "
                f"({cold_run.superstep} supersteps), max |warm - cold| = {row['max_abs_diff_warm_vs_cold']:.2e}, "
                f"L1 vs exact: warm {row['l1_warm_vs_exact']:.1e}, cold {row['l1_cold_vs_exact']:.1e}")
            rm(state / f"pr-cold-{k - 1:04d}")
            rm(state / f"pr-warm-{k:04d}")
            prev = cold_run
        rm(state / f"pr-cold-{args.windows:04d}")
        result["dynamic_pagerank"].append({
            "tolerance": tol, "seed": seed, "windows": pr_rows,
            "warm_median_s": r3(statistics.median([r["warm_s"] for r in pr_rows])),
            "cold_median_s": r3(statistics.median([r["cold_s"] for r in pr_rows])),
            "speedup_median": r3(statistics.median([r["speedup"] for r in pr_rows])),
        })

    # 4. per-superstep cost over --supersteps iterations
    log(f"per-superstep cost: PageRank, tolerance 0, {args.supersteps} iterations on the base graph ...")
    stats: list[Any] = []
    t = time.perf_counter()
    run = pagerank(edges(0), str(state / "pr-supersteps"), tolerance=0.0, max_iterations=args.supersteps,
                   on_superstep=stats.append)
    run_s = time.perf_counter() - t
    rm(state / "pr-supersteps")
    ms = {s.superstep: s.elapsed_ms for s in stats}
    steady = [s for s in sorted(ms) if s >= 2]
    picks = [s for s in (2, 5, 10, 25, 50) if s in ms]
    if steady and steady[-1] not in picks:
        picks.append(steady[-1])
    sl = slope(steady, [ms[s] for s in steady]) if len(steady) > 1 else 0.0
    med = statistics.median([ms[s] for s in steady]) if steady else 0.0
    result["superstep_cost"] = {
        "graph": f"base ({args.edges:,} edges, {base_vertices:,} vertices)",
        "iterations": args.supersteps, "supersteps": run.superstep, "total_s": r3(run_s),
        "elapsed_ms": {str(s): ms[s] for s in sorted(ms)},
        "picked_ms": {str(s): ms[s] for s in picks},
        "steady_median_ms": round(med, 1),
        "slope_ms_per_superstep": round(sl, 2),
        "slope_fit_over": f"supersteps {steady[0]}-{steady[-1]}" if steady else None,
        "slope_pct_of_median_per_superstep": round(100 * sl / med, 3) if med else None,
    }
    log(f"  {run.superstep} supersteps in {run_s:.1f} s; median {med:.0f} ms, slope {sl:+.2f} ms/superstep")

    result["checks_ok"] = bool(checks_ok and result["dynamic_components"]["all_equal"] and all(
        v < 1e-12 for v in diffs.values()))
    result["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["machine"]["load_1min"] = sampler.summary()
    result["total_s"] = r3(time.perf_counter() - began)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    derive(result)
    out_json.write_text(json.dumps(result, indent=2) + "\n")
    out_md.write_text(markdown(result))
    log(f"wrote {out_json} and {out_md} (total {result['total_s']:.0f} s, checks ok: {result['checks_ok']})")
    spark.stop()
    rm(work)


def engine_changes(r: dict[str, Any]) -> list[str]:
    # results written before the fix of engine_version() lost the first path's "e" (a stripped " M ")
    return [c if c.startswith("engine/") or not c.startswith("ngine/") else "e" + c
            for c in r["code"].get("engine_changes", [])]


def reps_text(section: dict[str, Any]) -> str:
    reps = section.get("reps", 1)
    if reps <= 1:
        return ""
    runs = "; ".join(f"{k.replace('_', ' ')} {', '.join(f'{x:.1f}' for x in v['runs_s'])} s"
                     for k, v in section.items() if isinstance(v, dict) and "runs_s" in v)
    return (f", the median of {reps} rounds (each round Lockgate, then the plain loops, interleaved so that the "
            f"machine's load falls on all alike; every run: {runs})")


def load_text(m: dict[str, Any]) -> str:
    text = f"1-min load {m['load_avg_start'][0]} at the start, {m['load_avg_end'][0]} at the end"
    lm = m.get("load_1min")
    if lm and lm.get("mean") is not None:
        text += (f", {lm['mean']} on average and {lm['max']} at most during the run: the machine was shared "
                 "with other work, so the figures are slower than on an idle machine" if lm["mean"] > 2.5
                 else f", {lm['mean']} on average during the run")
    return text


def derive(r: dict[str, Any]) -> dict[str, Any]:
    """Add the best-of-rounds figures (the least disturbed run of each) to the static sections."""
    for key in ("static_pagerank", "static_components"):
        sec = r.get(key)
        if not sec or "runs_s" not in sec.get("lockgate", {}):
            continue
        for v in sec.values():
            if isinstance(v, dict) and "runs_s" in v:
                v["best_s"] = min(v["runs_s"])
        for k in ("plain_parquet_edges", "plain_cached_edges"):
            short = "parquet" if "parquet" in k else "cached"
            sec[f"ratio_best_lockgate_vs_plain_{short}"] = r3(sec["lockgate"]["best_s"] / sec[k]["best_s"])
    sc = r.get("superstep_cost")
    if sc:
        ms = {int(k): v for k, v in sc["elapsed_ms"].items() if int(k) >= 2}
        steps = sorted(ms)
        if len(steps) >= 20:
            sc["first_10_median_ms"] = round(statistics.median([ms[s] for s in steps[:10]]), 1)
            sc["last_10_median_ms"] = round(statistics.median([ms[s] for s in steps[-10:]]), 1)
        samples = (r["machine"].get("load_1min") or {}).get("samples") or []
        during = [float(x) for t, x in samples if isinstance(t, (int, float)) and t >= r["total_s"] - sc["total_s"]]
        if during:
            sc["load_1min_during"] = [min(during), max(during)]
    return r


# -- the Markdown section ------------------------------------------------------------------------


def markdown(r: dict[str, Any]) -> str:
    p, m, sp, d = r["params"], r["machine"], r["spark"], r["data"]
    pr, cc, dc = r["static_pagerank"], r["static_components"], r["dynamic_components"]
    ref = pr["reference"]["lib"]
    best = "ratio_best_lockgate_vs_plain_parquet" in pr
    med = " (median)" if best else ""
    best_h = " | best run s (Lockgate / this)" if best else ""

    def bcol(sec: dict[str, Any], k: str, short: str | None) -> str:
        if not best:
            return ""
        ratio = "1.00" if short is None else f"{sec[f'ratio_best_lockgate_vs_plain_{short}']:.2f}"
        return f" {sec[k]['best_s']:.1f} ({ratio}) |"

    sub = "" if not p["quick"] else " (--quick: a smoke run, not figures to publish)"
    lines = [
        f"### Graph library{sub}",
        "",
        f"Measured {r['date']} on the code at commit `{r['code']['commit']}` with `python -m bench.graph"
        + ("" if p["edges"] == 1_000_000 and p["windows"] == 20 and p["window_edges"] == 50_000
           and p["supersteps"] == 50 else
           f" --edges {p['edges']} --windows {p['windows']} --window-edges {p['window_edges']} "
           f"--supersteps {p['supersteps']}") + "`"
        f" ({r['total_s'] / 60:.0f} min in all). Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB "
        f"({load_text(m)}). Spark "
        f"{sp['spark_version']} `{sp['spark.master']}`, one session for everything, "
        f"`spark.sql.shuffle.partitions={sp['spark.sql.shuffle.partitions']}`, driver memory "
        f"{sp['spark.driver.memory']}, `spark.sql.adaptive.enabled={sp['spark.sql.adaptive.enabled']}` "
        "(`lockgate.runtime.session.get_spark`'s default); state and data on local disk."
        + (f" The work tree had uncommitted edits in {', '.join(f'`{c}`' for c in engine_changes(r))}, "
           "none of them in `engine/lockgate/graph/` or what it imports."
           if engine_changes(r) and not any("graph" in c or "filesystems" in c or "session" in c
                                            for c in engine_changes(r)) else
           f" Uncommitted edits in engine/: {', '.join(engine_changes(r))}."
           if engine_changes(r) else ""),
        "",
        f"Data: a seeded R-MAT graph (a,b,c,d = 0.57, 0.19, 0.19, 0.05, ids scrambled, unique edges, no "
        f"self-loops): base {d['base_edges']:,} edges over {d['base_vertices']:,} vertices, then "
        f"{p['windows']} windows of {p['window_edges']:,} new edges ({d['total_edges']:,} edges, "
        f"{d['total_vertices']:,} vertices at the end). One warm-up run of each code path on 5,000 edges "
        "first (untimed). Times include everything a call does: Lockgate's writing the edges to its state "
        "folder, the degrees, and every superstep's state written to Parquet (its checkpoint: for a graph of "
        "at most 200,000 vertices, as here, collected and written from the driver as one file); the plain "
        "loops' vertex and degree set-up.",
        "",
        f"**Static PageRank**, {pr['iterations']} iterations for all (tolerance 0), damping {p['damping']}, "
        f"base graph{reps_text(pr)}:",
        "",
        f"| | seconds{med} | Lockgate / this{med}{best_h} | max abs diff of the ranks vs Lockgate |",
        "|---|---:|---:|" + ("---:|---:|" if best else "---:|"),
        f"| Lockgate `pagerank` ({pr['lockgate']['supersteps']} supersteps, state in Parquet) | "
        f"{pr['lockgate']['seconds']:.1f} | 1.00 |{bcol(pr, 'lockgate', None)} - |",
        f"| plain DataFrame loop, edges read from Parquet each iteration | "
        f"{pr['plain_parquet_edges']['seconds']:.1f} | {pr['ratio_lockgate_vs_plain_parquet']:.2f} |"
        f"{bcol(pr, 'plain_parquet_edges', 'parquet')} {pr['plain_parquet_edges']['max_abs_diff_vs_lockgate']:.1e} |",
        f"| plain DataFrame loop, edges cached | {pr['plain_cached_edges']['seconds']:.1f} | "
        f"{pr['ratio_lockgate_vs_plain_cached']:.2f} |{bcol(pr, 'plain_cached_edges', 'cached')} "
        f"{pr['plain_cached_edges']['max_abs_diff_vs_lockgate']:.1e} |",
        f"| {ref} {pr['reference']['version']} `Graph.pagerank`, one core, exact (graph build "
        f"{pr['reference']['build_s']:.1f} s apart) | {pr['reference']['seconds']:.3f} | "
        f"{pr['lockgate']['seconds'] / max(pr['reference']['seconds'], 1e-9):,.0f} |{' - |' if best else ''} "
        f"{pr['reference']['max_abs_diff_vs_lockgate']:.1e} (L1 {pr['reference']['l1_diff_vs_lockgate']:.1e}: "
        f"{pr['iterations']} iterations against the exact solution) |",
        "",
        f"Target Lockgate / plain loop <= {pr['target_ratio']}: "
        f"{pr['ratio_lockgate_vs_plain_parquet']:.2f} (edges from Parquet), "
        f"{pr['ratio_lockgate_vs_plain_cached']:.2f} (edges cached)"
        + (f"; best runs {pr['ratio_best_lockgate_vs_plain_parquet']:.2f} and "
           f"{pr['ratio_best_lockgate_vs_plain_cached']:.2f}." if best else "."),
        "",
        f"**Static weakly connected components**, base graph ({cc['num_components']:,} components, the largest "
        f"{cc['largest_component']:,} vertices){reps_text(cc)}:",
        "",
        f"| | seconds{med} | supersteps / iterations | Lockgate / this{med}{best_h} | same components as Lockgate |",
        "|---|---:|---:|---:|" + ("---:|---|" if best else "---|"),
        f"| Lockgate `connected_components` | {cc['lockgate']['seconds']:.1f} | {cc['lockgate']['supersteps']} | "
        f"1.00 |{bcol(cc, 'lockgate', None)} - |",
        f"| plain min-label loop, edges read from Parquet | {cc['plain_parquet_edges']['seconds']:.1f} | "
        f"{cc['plain_parquet_edges']['iterations']} | {cc['ratio_lockgate_vs_plain_parquet']:.2f} |"
        f"{bcol(cc, 'plain_parquet_edges', 'parquet')} "
        f"{'yes' if cc['plain_parquet_edges']['labels_equal_lockgate'] else 'NO'} |",
        f"| plain min-label loop, edges cached | {cc['plain_cached_edges']['seconds']:.1f} | "
        f"{cc['plain_cached_edges']['iterations']} | {cc['ratio_lockgate_vs_plain_cached']:.2f} |"
        f"{bcol(cc, 'plain_cached_edges', 'cached')} "
        f"{'yes' if cc['plain_cached_edges']['labels_equal_lockgate'] else 'NO'} |",
        f"| {ref} `connected_components(mode=\"weak\")`, one core | {cc['reference']['seconds']:.3f} | - | "
        f"{cc['lockgate']['seconds'] / max(cc['reference']['seconds'], 1e-9):,.0f} |{' - |' if best else ''} "
        f"{'yes' if cc['reference']['labels_equal_lockgate'] else 'NO'} |",
        "",
        "The plain loop's iteration sends and takes the smallest label at once; Lockgate's superstep 1 sends "
        "every label and takes none, so it runs one superstep more than the loop has iterations.",
        "",
        f"**Dynamic components**: {p['windows']} windows of {p['window_edges']:,} new edges; incremental = "
        "`connected_components(all_edges, folder, previous=last.values, new_edges=window)`, from scratch = "
        f"`connected_components(all_edges, folder)`, run on windows {', '.join(map(str, dc['scratch_windows']))} "
        "and checked equal to the incremental result on each"
        + (" (both with `stored_edges=` the windows' edge files: the edges are read in place, as a pipeline's "
           "graph operator reads its edge layers, not copied into the folder)." if p.get("dynamic_edges_in_place")
           else " (both copy all the edges into their folder)."),
        "",
        "| | median seconds per window | median supersteps |",
        "|---|---:|---:|",
        f"| incremental, all {len(dc['windows'])} windows | {dc['incremental_median_s']:.1f} | "
        f"{dc['incremental_median_supersteps']:g} |",
        f"| incremental, the windows also run from scratch | {dc['incremental_median_s_on_scratch_windows']:.1f} | |",
        f"| from scratch | {dc['scratch_median_s']:.1f} | {dc['scratch_median_supersteps']:g} |",
        "",
        f"Median speedup (from scratch / incremental, same window): {dc['speedup_median']:.2f}x (target >= "
        f"{dc['target_speedup']:g}x); incremental equal to from scratch on every window checked: "
        f"{'yes' if dc['all_equal'] else 'NO'}.",
        "",
        "| window | incremental s (supersteps) | from scratch s (supersteps) | speedup |",
        "|---:|---:|---:|---:|",
    ]
    for w in dc["windows"]:
        sc = f"{w['scratch_s']:.1f} ({w['scratch_supersteps']})" if "scratch_s" in w else "-"
        spd = f"{w['speedup']:.2f}x" if "speedup" in w else "-"
        lines.append(f"| {w['window']} | {w['incremental_s']:.1f} ({w['incremental_supersteps']}) | {sc} | {spd} |")
    dps = r.get("dynamic_pagerank") or []
    for dp in [dps] if isinstance(dps, dict) else dps:
        exact = "l1_warm_vs_exact" in dp["windows"][0] if dp["windows"] else False
        lines += [
            "",
            f"**Dynamic PageRank**, tolerance {dp['tolerance']:g} (networkx's rule: the ranks' total L1 change "
            f"< vertices x tolerance, here about {dp['tolerance'] * r['data']['total_vertices']:.0e}): warm start = "
            "`pagerank(all_edges, folder, previous=last.values)`, `last` the previous window's converged "
            f"(cold-start) ranks (window {dp['seed']['window']}'s cold start, {dp['seed']['cold_s']:.1f} s, "
            f"{dp['seed']['cold_supersteps']} supersteps, seeds the first); cold start = `pagerank(all_edges, folder)`"
            + (", both reading the edges in place (`stored_edges=`)." if p.get("dynamic_edges_in_place") else "."),
            "",
            "| window | warm s (supersteps) | cold s (supersteps) | speedup | max abs diff warm vs cold |"
            + (" L1 distance to the exact ranks, warm / cold |" if exact else ""),
            "|---:|---:|---:|---:|---:|" + ("---:|" if exact else ""),
        ]
        for w in dp["windows"]:
            lines.append(f"| {w['window']} | {w['warm_s']:.1f} ({w['warm_supersteps']}) | {w['cold_s']:.1f} "
                         f"({w['cold_supersteps']}) | {w['speedup']:.2f}x | {w['max_abs_diff_warm_vs_cold']:.1e} |"
                         + (f" {w['l1_warm_vs_exact']:.1e} / {w['l1_cold_vs_exact']:.1e} |" if exact else ""))
    sc = r["superstep_cost"]
    lines += [
        "",
        f"**Per-superstep cost**: PageRank, tolerance 0, {sc['iterations']} iterations ({sc['supersteps']} "
        f"supersteps after the init) on the {sc['graph']} graph, each superstep's `elapsed_ms` (`on_superstep`); "
        f"{sc['total_s']:.0f} s in all.",
        "",
        "| superstep | " + " | ".join(sc["picked_ms"]) + " | median | least-squares slope |",
        "|---|" + "---:|" * (len(sc["picked_ms"]) + 2),
        "| ms | " + " | ".join(f"{v:.0f}" for v in sc["picked_ms"].values())
        + f" | {sc['steady_median_ms']:.0f} | {sc['slope_ms_per_superstep']:+.2f} ms per superstep "
        f"({sc['slope_fit_over']}) |",
        "",
        (f"Median of the first ten of these supersteps {sc['first_10_median_ms']:.0f} ms, of the last ten "
         f"{sc['last_10_median_ms']:.0f} ms" if "first_10_median_ms" in sc else "")
        + (f"; the 1-minute load was {sc['load_1min_during'][0]:g} to {sc['load_1min_during'][1]:g} meanwhile, "
           "so the spread follows the machine's load, not the superstep number." if "load_1min_during" in sc
           else ("." if "first_10_median_ms" in sc else "")),
        "",
        f"All result checks passed: {'yes' if r['checks_ok'] else 'NO'}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
