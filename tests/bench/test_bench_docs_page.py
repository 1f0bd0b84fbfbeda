"""The site's benchmark page (docs/benchmarks.md) and its chart are exactly what
``python -m bench.report --docs`` writes from bench/results/: no figure on it is typed by hand, and it
cannot drift from the results files."""

from __future__ import annotations

import bench.docs_page as docs_page


def test_the_benchmark_page_is_what_the_results_files_give() -> None:
    assert docs_page.stale() == [], "run: python -m bench.report --docs"


def test_the_page_shows_every_published_bench_with_its_results_file() -> None:
    text = docs_page.page()
    for name in ("results.json", "state_growth.json", "restore.json", "backfill.json", "queued_runs.json",
                 "lakehouse.json", "message_log.json", "graph.json", "ui_page.json", "faults.json"):
        assert f"bench/results/{name}" in text, name
    assert "### Targets" in text and "| met |" in text
    assert "images/bench-chart.png" in text
