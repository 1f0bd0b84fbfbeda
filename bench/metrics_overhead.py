"""What Prometheus metrics cost a round (issue 64): the recorder's own time per round, and a scrape.

The end-to-end figure is two ``bench.run`` runs of one workload, metrics off and on
(``LOCKGATE_BENCH_METRICS=1`` makes the Lockgate contender record and serve them); on a shared
machine their difference drowns in the noise of a round, so this measures what metrics add to
a round directly: the calls the cycle scheduler makes when a round commits
(:meth:`~lockgate.metrics.PrometheusMetrics.round_committed` with a realistic result: every
phase timed, two state tables of a base and 24 deltas each, and the job state), and what one
scrape costs (it runs on the endpoint's thread, not the round's).

    python -m bench.metrics_overhead                      # prints the figures as JSON
    python -m bench.metrics_overhead --round-ms 320 --out bench/results/metrics_overhead/recorder.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _result(window: int) -> Any:
    from lockgate.runtime.results import CycleResult

    def layers(op: str) -> dict[str, Any]:
        ls = [{"snapshot": f"snap/{op}/w={window - 24 + i}", "kind": "base" if i == 0 else "delta",
               "files": [{"path": f"part-{j}.parquet", "size": 40_000 + j} for j in range(2)], "rows": 1000}
              for i in range(25)]
        return {"layers": ls, "rows": 25_000, "horizon": None}

    manifest = {"auction_windows.main": layers("auction_windows"), "bidder_totals.main": layers("bidder_totals")}
    timings = {"read": 40.0, "state_load": 5.0, "plan": 12.0, "snapshot": 60.0, "snapshot_io": 20.0, "stage": 50.0,
               "write": 110.0, "commit": 8.0, "checkpoint": 4.0}
    return CycleResult(window=window, attempt=1, staged={}, snapshot_uri=f"snap/bidder_totals/w={window}",
                       snapshot_manifest=manifest, positions={}, rows_in=4600, rows_out=372, late_rows=0,
                       timings=timings)


def measure(rounds: int = 20_000, jobs: int = 10) -> dict[str, float]:
    """Microseconds the recorder adds to a round, and milliseconds of one scrape of ``jobs`` jobs."""
    from lockgate.clock import WindowClock
    from lockgate.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    graph = SimpleNamespace(clock=WindowClock(0, 10_000_000), watermark={"lateness_us": 0})
    results = [_result(w) for w in range(100, 100 + rounds)]
    samples = []
    for chunk in range(0, rounds, 1000):
        t0 = time.perf_counter()
        for r in results[chunk:chunk + 1000]:
            metrics.round_committed(f"job{r.window % jobs}", r, 0.3, graph)
        samples.append((time.perf_counter() - t0) / 1000 * 1e6)
    # a job state change: once per run at most, a few times per round at the very worst
    t0 = time.perf_counter()
    for i in range(rounds):
        metrics.job_state(f"job{i % jobs}", "RUNNING")
    state_us = (time.perf_counter() - t0) / rounds * 1e6
    scrapes = []
    for _ in range(50):
        t0 = time.perf_counter()
        body = metrics.exposition()
        scrapes.append((time.perf_counter() - t0) * 1000)
    return {
        "round_committed_us_median": round(statistics.median(samples), 2),
        "round_committed_us_max_chunk": round(max(samples), 2),
        "job_state_us": round(state_us, 3),
        "scrape_ms_median": round(statistics.median(scrapes), 2),
        "scrape_bytes": len(body),
        "jobs": jobs,
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20_000)
    p.add_argument("--jobs", type=int, default=10)
    p.add_argument("--round-ms", type=float, default=None, help="a round's median milliseconds, to give the share")
    p.add_argument("--out", default=None, help="write the figures to this JSON file too")
    args = p.parse_args(argv)
    figures: dict[str, Any] = measure(args.rounds, args.jobs)
    if args.round_ms:
        figures["round_ms"] = args.round_ms
        figures["share_of_round_pct"] = round(100 * figures["round_committed_us_median"] / 1000 / args.round_ms, 4)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
