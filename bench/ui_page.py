"""How fast the Lockgate plugin's job page loads for a job of 10,000 windows::

    python -m bench.ui_page --windows 10000 --reps 5

A real job runs two windows (local Spark, the SQLite catalog) so that its plan and its rounds
are real; its catalog is then filled to ``--windows`` rounds and checkpoints (copies of the
real rows, later windows). A real ``airflow api-server`` with the plugin serves it, and Debian's
Chromium (Playwright) logs in and loads the job's page inside Airflow, ``--reps`` times:
the figure is the time from navigation until the first page of the timeline (100 rounds) is on
screen, inside Airflow (its own UI loads first) and for the plugin's page alone; Airflow's own DAG
list page, timed the same way, is the reference.
The plugin's API calls are timed on their own too. Results: ``bench/results/ui_page.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "ui_page.json"
PIPELINE = '''
from datetime import timedelta
import lockgate as lg
pipeline = lg.Pipeline("ui_bench", cycle_window=timedelta(minutes=1), parallelism=1)
bids = pipeline.source(lg.NexmarkSource("bid", events_per_second=2, seed=5, start="2026-01-01T00:00:00"), name="bids")
bids.key_by("bidder").aggregate(bids=lg.count(), name="totals").sink(lg.CollectSink("totals"), name="out")
'''
W0 = 29453760


def _fill(home: Path, windows: int) -> None:
    """Copy the job's real rounds and checkpoints forward until it has ``windows`` of them."""
    from lockgate.checkpoint.catalog.schema import checkpoints_table, cycles_table

    engine = sa.create_engine(f"sqlite:///{home / 'catalog.db'}")
    with engine.begin() as conn:
        cyc = dict(conn.execute(sa.select(cycles_table).order_by(cycles_table.c.id.desc())).mappings().first())
        cp = dict(conn.execute(sa.select(checkpoints_table).order_by(checkpoints_table.c.id.desc())).mappings().first())
        first_id = cyc["id"] + 1
        cycles, cps = [], []
        for i in range(windows - 2):
            cycles.append({**cyc, "id": first_id + i, "window": cyc["window"] + 1 + i})
            # as retention leaves them (keep_checkpoints=10): the newest ten COMPLETE, the others EXPIRED
            status = "COMPLETE" if i >= windows - 12 else "EXPIRED"
            cps.append({**{k: v for k, v in cp.items() if k != "id"}, "window": cp["window"] + 1 + i,
                        "cycle_id": first_id + i, "status": status})
        conn.execute(sa.update(checkpoints_table).values(status="EXPIRED"))
        conn.execute(sa.insert(cycles_table), cycles)
        conn.execute(sa.insert(checkpoints_table), cps)
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockgate-ui-bench-"))
    home, af_home = work / "home", work / "airflow"
    af_home.mkdir()
    (work / "pipeline.py").write_text(PIPELINE)

    import lockgate

    client = lockgate.connect("embedded", home=str(home))
    client.run(f"{work / 'pipeline.py'}:pipeline", job="ui_bench", first=W0, last=W0 + 1)
    client.close()
    _fill(home, args.windows)

    port = 28000 + os.getpid() % 1000
    base = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}, "AIRFLOW_HOME": str(af_home),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__BASE_URL": base, "LOCKGATE_HOME": str(home),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin"}
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    log = open(work / "api-server.log", "wb")  # noqa: SIM115 - closed with the server
    server = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port",
                               str(port), "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{base}/api/v2/version", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        password = json.loads((af_home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        token = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": password}).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        api: dict[str, list[float]] = {}
        for path in ("/lockgate/api/jobs", "/lockgate/api/jobs/ui_bench", "/lockgate/api/jobs/ui_bench/cycles?limit=100",
                     "/lockgate/api/jobs/ui_bench/plan", "/lockgate/api/jobs/ui_bench/checkpoints",
                     "/lockgate/api/jobs/ui_bench/transitions"):
            for _ in range(args.reps + 1):
                t = time.perf_counter()
                r = httpx.get(f"{base}{path}", headers=headers, timeout=60)
                r.raise_for_status()
                api.setdefault(path, []).append((time.perf_counter() - t) * 1000)
        assert httpx.get(f"{base}/lockgate/api/jobs/ui_bench/cycles", headers=headers).json()["total"] == args.windows

        from playwright.sync_api import sync_playwright

        page_ms: list[float] = []
        alone_ms: list[float] = []
        airflow_ms: list[float] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page()
            page.goto(f"{base}/auth/login")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(password)
            page.locator("button[type=submit]").click()
            page.wait_for_url(lambda url: "/auth/login" not in url)
            for _ in range(args.reps + 1):
                t = time.perf_counter()
                page.goto(f"{base}/plugin/lockgate/lockgate/ui/jobs/ui_bench")
                page.frame_locator("iframe").locator("#timeline tbody tr").nth(99).wait_for()
                page_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                page.goto(f"{base}/lockgate/ui/jobs/ui_bench")
                page.locator("#timeline tbody tr").nth(99).wait_for()
                alone_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()  # the reference: Airflow's own DAG list, to the same point
                page.goto(f"{base}/dags")
                page.get_by_text("No Dags found", exact=False).or_(page.locator("table")).first.wait_for()
                airflow_ms.append((time.perf_counter() - t) * 1000)
            browser.close()
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    result: dict[str, Any] = {
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({os.cpu_count()} cores), {platform.platform()}",
        "windows": args.windows, "reps": args.reps, "first run discarded": True,
        "load": os.getloadavg()[0],
        # inside Airflow: Airflow's own UI loads first, then the plugin's page in its iframe
        "page_in_airflow_ms_median": round(statistics.median(page_ms[1:]), 1),
        "page_in_airflow_ms": [round(x, 1) for x in page_ms[1:]],
        "plugin_page_alone_ms_median": round(statistics.median(alone_ms[1:]), 1),
        "airflow_dag_list_ms_median": round(statistics.median(airflow_ms[1:]), 1),
        "api_ms_median": {p: round(statistics.median(v[1:]), 1) for p, v in api.items()},
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
