"""Every example DAG in dags/ runs to success through ``dag.test()`` on the embedded
default (local Spark, SQLite catalog), and its output is checked to the row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pyarrow.dataset as ds

FAILURE_W0 = 29453760  # one-minute windows from 2026-01-01T00:00Z
HOURLY_W0 = 1472688  # twenty-minute windows from 2026-01-01T00:00Z


def _bids(first_n: int, last_n: int) -> int:
    """Bids among Nexmark events ``first_n..last_n-1``: in each block of 50 events the first is
    a person and the next three auctions."""
    return sum(1 for n in range(first_n, last_n) if n % 50 >= 4)


def _asset_events(uri: str) -> list:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        ).scalars().all()
        return [(e.extra, e.source_run_id) for e in rows]


def test_failure_demo_fails_mid_run_then_its_retry_restores_and_the_output_is_exact(lg_env, run_dag):
    res = run_dag("lockgate_failure_demo")
    assert res.state == "success", res.tasks
    assert res.tries("run_windows") == 2  # failed once, on purpose; the retry finished it
    result = res.xcom("run_windows")
    assert (result["first_window"], result["last_window"]) == (FAILURE_W0, FAILURE_W0 + 4)
    report = res.xcom("check_output")
    assert report["bids"] == report["expected_bids"] == 300 * 20 * 46 // 50
    assert report["windows"] == list(range(FAILURE_W0, FAILURE_W0 + 5))
    assert not (lg_env.out / "failure_demo" / "armed").exists()  # the failure happened
    # each committed window: one asset event, with its window and row counts
    events = [extra for extra, run_id in _asset_events("lockgate://jobs/failure_demo") if run_id == res.run_id]
    assert sorted(e["window"] for e in events) == list(range(FAILURE_W0, FAILURE_W0 + 5))
    assert sum(e["rows_in"] for e in events) == 5520 and all(e["rows_out"] > 0 for e in events)
    # the Parquet output holds each window once, and the job resumed rather than re-ran
    import lockgate

    cps = lockgate.connect("embedded", home=str(lg_env.home)).list_checkpoints("failure_demo")
    assert [c.window for c in cps] == list(range(FAILURE_W0, FAILURE_W0 + 5))


def test_hourly_nexmark_catchup_writes_parquet_and_postgresql_exactly(lg_env, run_dag, pg_url, monkeypatch):
    monkeypatch.setenv("LOCKGATE_PG_URL", pg_url)
    for hour in (1, 2):
        res = run_dag("lockgate_nexmark_hourly", logical_date=datetime(2026, 1, 1, hour, tzinfo=UTC))
        assert res.state == "success", res.tasks
        summary = res.xcom("summarize")
        first = HOURLY_W0 + 3 * (hour - 1)
        assert summary["windows"] == [first, first + 2]
        assert summary["hour"] == [f"2026-01-01T0{hour - 1}:00:00+00:00", f"2026-01-01T0{hour}:00:00+00:00"]
        # 5 events per second: 18000 events an hour
        assert summary["bids"] == _bids(18000 * (hour - 1), 18000 * hour)
        assert res.xcom("compile")["windows"]["count"] == 3

    parquet = ds.dataset(str(lg_env.out / "nexmark_hourly" / "per_auction"), format="parquet", partitioning="hive")
    table = parquet.to_table()
    cols = ["lg_window", "window_start", "auction", "bids", "max_price", "total_price"]
    files = sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))
    with psycopg.connect(pg_url) as conn:
        pg = sorted(conn.execute(f"SELECT {', '.join(cols)} FROM nexmark_per_auction").fetchall())
    # the same rows in both sinks, no window twice, every bid of the two hours counted once
    norm = [(w, ws.replace(tzinfo=None), a, b, m, t) for w, ws, a, b, m, t in files]
    assert [(w, ws.replace(tzinfo=None), a, b, m, t) for w, ws, a, b, m, t in pg] == norm
    assert len({(r[1], r[2]) for r in files}) == len(files)
    assert sorted({r[0] for r in files}) == list(range(HOURLY_W0, HOURLY_W0 + 6))
    assert sum(r[3] for r in files) == _bids(0, 36000)


def test_continuous_pipeline_sensor_and_the_report_dag_gated_by_its_asset(lg_env, run_dag):
    res = run_dag("lockgate_nexmark_live", conf={"until": "2026-01-01T00:03:00+00:00", "stop_after": True})
    assert res.state == "success", res.tasks
    cp = res.xcom("wait_for_checkpoint")
    assert cp["window_end"] == "2026-01-01T00:03:00+00:00"
    assert res.xcom("stop_pipeline")["state"] == "STOPPED"
    events = [extra for extra, run_id in _asset_events("lockgate://jobs/nexmark_live") if run_id == res.run_id]
    assert [e["window"] for e in events] == [cp["window"]]

    report = run_dag("lockgate_nexmark_live_report")
    assert report.state == "success", report.tasks
    out = report.xcom("report")
    # 50 events per second for three minutes, each bid counted once in the report
    assert out["through_window"] == cp["window"] and out["bids"] == _bids(0, 50 * 180)
    assert len(out["top_auctions"]) == 5
    assert (lg_env.out / "nexmark_live" / f"report-{cp['window']}.json").exists()


def test_daily_graph_dag_ranks_and_components_equal_networkx_and_a_failed_try_resumes(lg_env, run_dag):
    import importlib.util
    import sys
    from pathlib import Path

    import networkx as nx
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "graph"))
    from graphref import nx_components, nx_pagerank

    spec = importlib.util.spec_from_file_location(
        "graph_daily_dag", Path(__file__).resolve().parents[2] / "dags" / "lockgate_graph_daily.py")
    dag_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dag_module)

    links: list = []
    for day, fail in ((1, ""), (2, "2026-01-02")):
        start = datetime(2026, 1, day, tzinfo=UTC)
        # the run whose data interval is that day is the one at its end
        res = run_dag("lockgate_graph_daily", logical_date=start + timedelta(days=1), conf={"fail_on": fail})
        assert res.state == "success", res.tasks
        assert res.tries("run_day") == (2 if fail else 1)  # the armed day failed once; its retry resumed
        links += dag_module.day_links(start)
        graph = nx.DiGraph(links)
        out = lg_env.out / "graph_daily"
        ranks = {r["id"]: r["rank"] for r in pq.read_table(out / "ranks" / "_current" / "current.parquet").to_pylist()}
        want = nx_pagerank(graph)
        assert ranks.keys() == want.keys() and max(abs(ranks[v] - want[v]) for v in want) < 1e-6
        components = pq.read_table(out / "components" / "_current" / "current.parquet").to_pylist()
        assert {r["id"]: r["component"] for r in components} == nx_components(graph)
        summary = res.xcom("report")
        assert summary["pages"] == graph.number_of_nodes()
        assert summary["components"] == nx.number_weakly_connected_components(graph)
    assert not (lg_env.out / "graph_daily" / "armed").exists()  # the failure happened
    import lockgate

    with lockgate.connect("embedded", home=str(lg_env.home)) as client:
        w1 = int(datetime(2026, 1, 2, tzinfo=UTC).timestamp()) // 86_400
        attempts = {s.attempt for s in client.list_supersteps("graph_daily", w1)}
        assert attempts == {2}, "the failed try ran no superstep: it failed before the graph"
        assert [c.window for c in client.list_checkpoints("graph_daily")] == [w1 - 1, w1]


def test_nats_bids_dag_counts_every_published_bid_once(lg_env, run_dag, nats_url, monkeypatch):
    import uuid

    from nats_log import Log

    log = Log(nats_url)
    log.stream = f"lg_dag_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("LOCKGATE_NATS_URL", nats_url)
    monkeypatch.setenv("LOCKGATE_NATS_STREAM", log.stream)
    try:
        res = run_dag("lockgate_nats_bids", conf={"seconds": 2, "events_per_second": 50})
        assert res.state == "success", res.tasks
        report = res.xcom("check_output")
        # 100 events: in each block of 50 the first is a person and the next three auctions
        # each bid once: counted in its window, or (published late by a stalled publisher on a busy
        # machine) set aside in the late sink, never dropped
        late = report["late"]
        assert report["bids"] == report["counted"] + late == report["delta_counted"] + late == _bids(0, 100) == 92
        assert report["sequences"] == [1, 92]
        if late:
            import lockgate

            with lockgate.connect("embedded", home=str(lg_env.home)) as client:
                cycles = client.list_cycles(report["job"], limit=100).cycles
            assert sum(c.late_rows for c in cycles) == late
        # the run's job wrote its own Delta table (``{job}`` in the sink's path), one commit a window
        from deltalake import DeltaTable

        table = DeltaTable(str(lg_env.out / "nats_bids" / "delta" / report["job"]))
        rows = table.to_pyarrow_table(columns=["lg_window", "bids"])
        assert sum(rows.column("bids").to_pylist()) == 92 - late
        first, last = report["windows"]
        assert set(rows.column("lg_window").to_pylist()) <= set(range(first, last + 1))
        assert table.version() >= last - first  # windows with no rows commit too
        txn = table.transaction_version(f"lockgate/{report['job']}/delta")
        assert txn == last
    finally:
        log.created = True
        log.admin("delete")
