"""Supersteps of small graphs: on the driver (the default under 10,000 vertices) against Spark jobs.

A graph of at most ``lockgate.graph.local.LOCAL_VERTICES`` vertices and ``LOCAL_EDGES`` edges runs
its supersteps on the driver (``lockgate.graph.local``); ``local_vertices=0`` runs the same program
as Spark jobs, the path of large graphs. This runs both, interleaved, on seeded random graphs of
1,500, 5,000 and 10,000 vertices (4 edges per vertex), for connected components (no aggregates)
and PageRank (20 iterations, tolerance 0: three aggregates a superstep), and records per superstep
(after superstep 0): the median milliseconds, the Spark jobs and the Py4J calls. Every result is
checked: the two paths give the same components (and networkx's), ranks within 1e-12.

    python -m bench.graph_small                  # about 5 minutes
    python -m bench.graph_small --quick          # the smoke check
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import networkx as nx

SEED = 11
RESULTS = Path(__file__).resolve().parent / "results"


class Py4jCalls:
    """Counts the calls the driver makes to the JVM (py4j's ``send_command``)."""

    def __init__(self) -> None:
        import py4j.clientserver as cs

        self.count = 0
        original = cs.ClientServerConnection.send_command

        def counted(conn: Any, command: str) -> Any:
            self.count += 1
            return original(conn, command)

        cs.ClientServerConnection.send_command = counted


def random_graph(n: int, m: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    while len(edges) < m:
        a, b = rng.randrange(n), rng.randrange(n)
        if a != b:
            edges.add((a, b))
    return sorted(edges)


def run_one(spark: Any, calls: Py4jCalls, program: Any, edges: Any, folder: str, local_vertices: int | None
            ) -> dict[str, Any]:
    """One run of ``program``; per superstep after superstep 0: ms, Spark jobs, Py4J calls."""
    from lockgate.graph import SuperstepDriver

    sc = spark.sparkContext
    group = f"bench-graph-small-{time.monotonic_ns()}"
    marks: list[tuple[float, int, int]] = []

    def seen(stats: Any) -> None:
        marks.append((stats.elapsed_ms, len(sc.statusTracker().getJobIdsForGroup(group)), calls.count))

    sc.setJobGroup(group, "bench.graph_small")
    started = time.perf_counter()
    try:
        driver = SuperstepDriver(program, folder, spark=spark, on_superstep=seen, local_vertices=local_vertices)
        result = driver.run(edges)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    seconds = time.perf_counter() - started
    steps = marks[1:]
    jobs = [b[1] - a[1] for a, b in zip(marks, steps, strict=False)]
    py4j = [b[2] - a[2] for a, b in zip(marks, steps, strict=False)]
    return {
        "seconds": round(seconds, 2),
        "supersteps": len(steps),
        "ms_median": round(statistics.median(m[0] for m in steps), 1),
        "ms_all": [m[0] for m in steps],
        "jobs_per_superstep": round(statistics.mean(jobs), 2),
        "py4j_per_superstep": round(statistics.mean(py4j), 1),
        "output": {r[0]: r[1] for r in result.output.collect()},
    }


def machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {subprocess.getoutput('nproc')} cores, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1500,5000,10000", help="vertices of the graphs (4 edges per vertex)")
    ap.add_argument("--iterations", type=int, default=20, help="PageRank iterations")
    ap.add_argument("--quick", action="store_true",
                    help="one graph of 300 vertices, 3 PageRank iterations, no warm-up (the smoke check)")
    ap.add_argument("--out", default=str(RESULTS / "graph_small.json"))
    args = ap.parse_args()
    sizes = [300] if args.quick else [int(s) for s in args.sizes.split(",")]
    iterations = 3 if args.quick else args.iterations

    from lockgate.graph.library import ConnectedComponents, PageRank
    from lockgate.runtime.session import get_spark

    spark = get_spark()
    spark.sparkContext.setLogLevel("ERROR")
    calls = Py4jCalls()
    work = Path(tempfile.mkdtemp(prefix="lockgate-graph-small-"))
    programs = {"components": ConnectedComponents(), "pagerank": PageRank(tolerance=0.0, max_iterations=iterations)}
    warm = spark.createDataFrame(random_graph(200, 800, SEED), "src long, dst long")
    for name, program in programs.items() if not args.quick else ():  # compile both paths' code, untimed
        for mode, limit in (("driver", None), ("spark", 0)):
            run_one(spark, calls, program, warm, str(work / f"warm-{name}-{mode}"), limit)

    rows = []
    for n in sizes:
        pairs = random_graph(n, 4 * n, SEED + n)
        edges = spark.createDataFrame(pairs, "src long, dst long").localCheckpoint(eager=True)
        for name, program in programs.items():
            got = {}
            for mode, limit in (("driver", None), ("spark", 0)):
                got[mode] = run_one(spark, calls, program, edges, str(work / f"{n}-{name}-{mode}"), limit)
                print(f"{n} vertices, {name}, {mode}: {got[mode]['ms_median']} ms a superstep "
                      f"({got[mode]['supersteps']}), {got[mode]['jobs_per_superstep']} jobs", flush=True)
            a, b = got["driver"].pop("output"), got["spark"].pop("output")
            if name == "pagerank":
                same = a.keys() == b.keys() and max(abs(a[v] - b[v]) for v in a) < 1e-12
            else:
                g = nx.Graph(pairs)
                ref = {v: min(c) for c in nx.connected_components(g) for v in c}
                same = a == b == ref
            if not same:
                raise SystemExit(f"{n} vertices, {name}: the driver and Spark paths differ")
            rows.append({"vertices": n, "edges": len(pairs), "program": name, **got,
                         "speedup": round(got["spark"]["ms_median"] / got["driver"]["ms_median"], 2),
                         "checked": True})

    commit = subprocess.getoutput("git rev-parse --short HEAD")
    result = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "commit": commit, "machine": machine(),
              "spark": spark.version, "master": spark.sparkContext.master, "iterations": iterations, "rows": rows}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "### Supersteps of small graphs",
        "",
        f"Measured {r['date']} on the code at commit `{r['commit']}` with `python -m bench.graph_small`. "
        f"Machine: {r['machine']}; Spark {r['spark']} `{r['master']}`. Random graphs of 4 edges per vertex; "
        f"PageRank {r['iterations']} iterations (tolerance 0); the driver and the Spark path interleaved, "
        "per superstep after superstep 0; every result checked (same components as networkx, same ranks "
        "to 1e-12).",
        "",
        "| vertices | program | driver ms (median) | Spark path ms | speedup | supersteps | Spark jobs a superstep "
        "(driver / Spark) | Py4J calls a superstep (driver / Spark) | run s (driver / Spark) |",
        "|---:|---|---:|---:|---:|---:|---|---|---|",
    ]
    for x in r["rows"]:
        d, s = x["driver"], x["spark"]
        lines.append(
            f"| {x['vertices']:,} | {x['program']} | {d['ms_median']:.0f} | {s['ms_median']:.0f} | "
            f"{x['speedup']:.1f}x | {d['supersteps']} | {d['jobs_per_superstep']:g} / {s['jobs_per_superstep']:g} | "
            f"{d['py4j_per_superstep']:.0f} / {s['py4j_per_superstep']:.0f} | {d['seconds']:.1f} / {s['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
