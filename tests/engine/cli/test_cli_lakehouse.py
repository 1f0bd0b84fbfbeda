"""A NATS JetStream log to Delta and Iceberg tables through the ``lockgate`` command, the
pipeline written in SQL: ``run``, ``restore`` (which rolls both tables back with their own
history) and a run that continues from there. Tables are read back with delta-rs and pyiceberg
and compared with pandas over the published records."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable
from lockgate_command import NOISE, lockgate
from nats_log import Log, next_window

PIPELINE = '''
from datetime import timedelta
import lockgate as lg

pipeline = lg.Pipeline("cli_lake", cycle_window=timedelta(seconds=1),
                       watermark=lg.Watermark(lateness=timedelta(seconds=1)))
pipeline.source(lg.NatsSource({url!r}, {stream!r}, event_time="ts",
                              schema="id BIGINT, k STRING, v BIGINT, ts TIMESTAMP"), name="bids")
per_key = pipeline.sql("SELECT k, window.start AS window_start, count(*) AS n, sum(v) AS total "
                       "FROM bids GROUP BY k, window(ts, '1 second')", name="per_key")
per_key.sink(lg.DeltaSink({delta!r}), name="delta")
totals = pipeline.sql("SELECT k, count(*) AS n, sum(v) AS total FROM bids GROUP BY k", name="totals")
totals.sink(lg.IcebergSink("lake.totals_{{job}}", catalog_url={catalog!r}, warehouse={warehouse!r},
                           key=["k"]), name="iceberg")
'''
JOB = "cli_lake"


@pytest.fixture
def log(nats_url: str) -> Iterator[Log]:
    made = Log(nats_url)
    yield made
    if made.created:
        with contextlib.suppress(Exception):
            made.admin("delete")


def _utc(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series)
    s = s.dt.tz_localize("UTC") if s.dt.tz is None else s.dt.tz_convert("UTC")
    return s.astype("datetime64[us, UTC]")


def per_window(records: pd.DataFrame) -> list[tuple]:
    df = records.assign(window_start=_utc(records["ts"]).dt.floor("1s"))
    out = df.groupby(["window_start", "k"]).agg(n=("v", "size"), total=("v", "sum")).reset_index()
    return sorted((r.window_start, r.k, int(r.n), int(r.total)) for r in out.itertuples())


def totals(records: pd.DataFrame) -> list[tuple]:
    out = records.groupby("k").agg(n=("v", "size"), total=("v", "sum")).reset_index()
    return sorted((r.k, int(r.n), int(r.total)) for r in out.itertuples())


def test_sql_pipeline_from_nats_to_delta_and_iceberg_run_restore_and_continue(log, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    home, delta_path = tmp_path / "home", tmp_path / "lake" / "delta" / "{job}"
    catalog, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", f"file://{tmp_path / 'warehouse'}"
    ref = tmp_path / "pipe.py"
    ref.write_text(PIPELINE.format(url=log.url, stream=log.stream, delta=str(delta_path), catalog=catalog,
                                   warehouse=warehouse))
    a = next_window()  # windows are 1 s from the epoch: window ``a`` is second ``a``
    log.publish(10)
    assert next_window() == a + 1
    log.publish(10)
    assert next_window() == a + 2
    log.publish(6)
    next_window()
    next_window()  # window a + 3 (which closes a + 2's tumbling windows) has ended: it can be read

    proc = lockgate(home, "--json", "run", f"{ref}:pipeline", "--from-window", str(a), "--to-window", str(a + 3))
    res = json.loads(proc.stdout)
    assert res["state"] == "FINISHED" and res["rows_in"] == 26, res
    assert not any(n in proc.stderr for n in NOISE), proc.stderr

    # the job's own tables: ``{job}`` in the path and in the table name
    delta = DeltaTable(str(tmp_path / "lake" / "delta" / JOB))
    reader = SqlCatalog("lockgate", uri=catalog, warehouse=warehouse)
    iceberg = reader.load_table(f"lake.totals_{JOB}")

    def delta_rows(table: DeltaTable) -> list[tuple]:
        got = table.to_pandas()
        got["window_start"] = _utc(got["window_start"])
        return sorted((r.window_start, r.k, int(r.n), int(r.total)) for r in got.itertuples())

    def iceberg_rows() -> list[tuple]:
        got = reader.load_table(f"lake.totals_{JOB}").scan().to_pandas()
        return sorted((r.k, int(r.n), int(r.total)) for r in got.itertuples())

    records = log.frame()
    assert delta_rows(delta) == per_window(records)
    assert iceberg_rows() == totals(records)
    assert delta.transaction_version(f"lockgate/{JOB}/delta") == a + 3
    assert iceberg.current_snapshot().summary.additional_properties["lockgate.window"] == str(a + 3)

    # restore to a + 1: both tables go back to what window a + 1 committed
    restored = lockgate(home, "restore", JOB, "--window", str(a + 1))
    assert f"restored to window {a + 1}" in restored.stdout
    delta = DeltaTable(str(tmp_path / "lake" / "delta" / JOB))
    assert delta.transaction_version(f"lockgate/{JOB}/delta") == a + 1
    assert set(delta.to_pandas()["lg_window"]) <= {a, a + 1}
    snapshot = reader.load_table(f"lake.totals_{JOB}").current_snapshot()
    assert snapshot.summary.additional_properties["lockgate.window"] == str(a + 1)
    assert iceberg_rows() == totals(records[:20])  # the running totals after windows a and a + 1

    # more published since: never read by the windows already run; the rerun replays a + 2 and
    # a + 3 from their recorded sequence ranges, and each table holds every record once
    log.publish(5)
    again = json.loads(lockgate(home, "--json", "run", f"{ref}:pipeline", "--from-window", str(a + 2),
                                "--to-window", str(a + 3)).stdout)
    assert again["state"] == "FINISHED" and again["rows_in"] == 6, again
    assert delta_rows(DeltaTable(str(tmp_path / "lake" / "delta" / JOB))) == per_window(records)
    assert iceberg_rows() == totals(records)
