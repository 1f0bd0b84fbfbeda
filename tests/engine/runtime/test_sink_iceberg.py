"""IcebergSink end to end (pyiceberg, its SQL catalog, real tables): appends and keyed updates
through the embedded client against a pandas reference, a restore that rolls the tables back
and a later run that ends where an uninterrupted one does, replays that write nothing (a crash
right after the catalog commit included), a second job and a schema that does not fit refused,
the PostgreSQL catalog of service mode, and a read-only warehouse or an unreachable catalog
failing with one line and nothing half-committed."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

import lockgate
from lockgate.errors import SinkRefusedError, SinkUnavailableError
from lockgate.runtime.committers import IcebergCommitter, committer_for
from lockgate.runtime.sinks import stage_sink

if str(Path(__file__).resolve().parent) not in sys.path:  # lakehouse_workload.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from lakehouse_workload import FIRST, WINDOWS, check_tables, rows, write_pipeline
from lakehouse_workload import staged as stage_window

JOB = "lake_iceberg"


def default_catalog(home: Path) -> SqlCatalog:
    """The catalog an IcebergSink without catalog_url= writes, opened as a reader would."""
    return SqlCatalog("lockgate", uri=f"sqlite:///{home}/iceberg/catalog.db",
                      warehouse=f"file://{home}/iceberg/warehouse")


def read(catalog: SqlCatalog, name: str) -> pa.Table:
    return catalog.load_table(name).scan().to_arrow()


def test_appends_keyed_updates_restore_and_continue(tmp_path, spark):
    home = tmp_path / "home"
    ref = write_pipeline(tmp_path, JOB, "lg.IcebergSink('lake.kept')",
                         "lg.IcebergSink('lake.totals', key=['customer'])",
                         "lg.IcebergSink('lake.hist', key=['n'])")
    first, last = FIRST, FIRST + WINDOWS - 1
    client = lockgate.connect("embedded", home=str(home))
    try:
        assert client.run(ref, first=first, last=last).state == "FINISHED"
        catalog = default_catalog(home)
        check_tables(lambda name: read(catalog, f"lake.{name}"), last)
        kept = catalog.load_table("lake.kept")
        summary = kept.current_snapshot().summary.additional_properties
        assert summary["lockgate.job"] == JOB and summary["lockgate.sink"] == "kept"
        assert summary["lockgate.window"] == str(last)
        assert kept.properties["lockgate.job"] == JOB

        # a restore rolls every table back to its state after window first + 1
        client.restore(JOB, first + 1)
        check_tables(lambda name: read(catalog, f"lake.{name}"), first + 1)

        # a later run commits the windows again: the tables end as an uninterrupted run's
        res = client.run(ref, first=first, last=last)
        assert res.state == "FINISHED" and res.windows_run == 2
        check_tables(lambda name: read(catalog, f"lake.{name}"), last)
    finally:
        client.close()


# -- the committer on its own ---------------------------------------------------------------
def staged(home: Path, sink: dict, window: int, table: pa.Table, job: str = JOB, attempt: int = 1) -> dict:
    return stage_window(home, sink, window, table, job, attempt)


def test_replays_write_nothing_and_crash_points(tmp_path, monkeypatch):
    home = tmp_path / "home"
    sink = lockgate.IcebergSink("t").to_config()
    c = committer_for(sink, str(home))
    assert isinstance(c, IcebergCommitter) and not c.is_committed(JOB, "out", 1)
    table = lambda: default_catalog(home).load_table("default.t")  # noqa: E731

    s1 = staged(home, sink, 1, rows(1))
    assert c.commit(JOB, "out", 1, s1) == {"target": "iceberg:default.t", "rows": 3, "replayed": False}
    assert not Path(s1["uri"]).exists()
    assert c.commit(JOB, "out", 1, s1)["replayed"] is True
    assert c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1), attempt=2))["replayed"] is True
    assert table().scan().to_arrow().num_rows == 3 and c.is_committed(JOB, "out", 1)

    def crash(_c) -> None:
        raise KeyboardInterrupt("killed")

    # a crash before the catalog commit: nothing in the table, the replay commits the window
    s2 = staged(home, sink, 2, rows(2))
    monkeypatch.setattr(IcebergCommitter, "_before_table_commit", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        c.commit(JOB, "out", 2, s2)
    assert not c.is_committed(JOB, "out", 2) and table().scan().to_arrow().num_rows == 3
    monkeypatch.setattr(IcebergCommitter, "_before_table_commit", None)
    assert c.commit(JOB, "out", 2, s2)["replayed"] is False

    # a crash right after the catalog commit (no checkpoint row): the replay is a no-op
    s3 = staged(home, sink, 3, rows(3))
    monkeypatch.setattr(IcebergCommitter, "_after_table_commit", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        c.commit(JOB, "out", 3, s3)
    monkeypatch.setattr(IcebergCommitter, "_after_table_commit", None)
    assert Path(s3["uri"]).exists() and c.is_committed(JOB, "out", 3)
    snapshot = table().current_snapshot().snapshot_id
    assert c.commit(JOB, "out", 3, s3)["replayed"] is True
    assert table().current_snapshot().snapshot_id == snapshot and table().scan().to_arrow().num_rows == 9
    assert not Path(s3["uri"]).exists()

    # a restore to window 1, twice, then window 2 again and a restore to before the first window
    assert c.retract_after(JOB, "out", 1) == [2, 3]
    assert c.retract_after(JOB, "out", 1) == []
    assert table().scan().to_arrow()["lg_window"].to_pylist() == [1, 1, 1]
    assert not c.is_committed(JOB, "out", 2)
    assert c.commit(JOB, "out", 2, staged(home, sink, 2, rows(2)))["replayed"] is False
    assert c.committed_windows(JOB, "out") == [1, 2]
    assert c.retract_after(JOB, "out", 0) == [1, 2]
    assert table().scan().to_arrow().num_rows == 0 and not c.is_committed(JOB, "out", 1)


def test_keyed_second_job_and_schema_that_does_not_fit_are_refused(tmp_path):
    home = tmp_path / "home"
    sink = lockgate.IcebergSink("ns.t", key=["id"]).to_config()
    c = committer_for(sink, str(home))
    c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    c.commit(JOB, "out", 2, staged(home, sink, 2, pa.table({"id": pa.array([10, 11], pa.int64()),
                                                            "name": ["new", "gone"], "op": ["+U", "-D"]})))
    got = default_catalog(home).load_table("ns.t").scan().to_arrow().sort_by("id").to_pydict()
    assert got == {"id": [10, 12], "name": ["new", "r1-2"], "lg_window": [2, 1]}

    with pytest.raises(SinkRefusedError) as other:
        c.commit("intruder", "out", 3, staged(home, sink, 3, rows(3), job="intruder"))
    message = str(other.value)
    assert "\n" not in message and "Iceberg table 'ns.t'" in message
    assert f"is already written by job '{JOB}' (sink 'out')" in message and "Write to another table" in message

    catalog = default_catalog(home)
    catalog.create_table("ns.other", pa.schema([("id", pa.int32()), ("extra", pa.float64())]))
    c2 = committer_for({**sink, "table": "ns.other"}, str(home))
    with pytest.raises(SinkRefusedError) as misfit:
        c2.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    message = str(misfit.value)
    assert "\n" not in message and "Iceberg table 'ns.other'" in message and "does not fit the stream" in message
    assert "the table lacks name, lg_window" in message and "the stream does not write extra" in message
    assert "id int32 (the stream's is int64)" in message
    assert catalog.load_table("ns.other").current_snapshot() is None  # not claimed, not written

    # several rows of one key in a window: refused (a keyed table keeps one row per key)
    with pytest.raises(SinkRefusedError, match="1 key.* more than one row in the window"):
        c.commit(JOB, "out", 3, staged(home, sink, 3, pa.table({"id": [5, 5], "name": ["a", "b"]})))


def test_postgres_catalog_of_service_mode(tmp_path, pg_url):
    url = pg_url.replace("postgresql://", "postgresql+psycopg://")
    sink = lockgate.IcebergSink("svc.t", catalog_url=url, warehouse=str(tmp_path / "wh")).to_config()
    home = tmp_path / "home"
    c = committer_for(sink, str(home))
    assert c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))["replayed"] is False
    assert c.commit(JOB, "out", 2, staged(home, sink, 2, rows(2)))["replayed"] is False
    reader = SqlCatalog("lockgate", uri=url, warehouse=f"file://{tmp_path / 'wh'}")
    assert reader.load_table("svc.t").scan().to_arrow().num_rows == 6
    assert c.retract_after(JOB, "out", 1) == [2]
    assert reader.load_table("svc.t").scan().to_arrow().num_rows == 3
    assert not (home / "iceberg").exists()  # no SQLite catalog made beside it

    # a catalog that cannot be reached: one line, retrying helps
    down = {**sink, "catalog_url": "postgresql+psycopg://postgres@127.0.0.1:9/nowhere"}
    with pytest.raises(SinkUnavailableError) as unreachable:
        committer_for(down, str(home)).commit(JOB, "out", 3, staged(home, sink, 3, rows(3)))
    message = str(unreachable.value)
    assert "\n" not in message and message.startswith(f"job '{JOB}', sink 'out', window 3: Iceberg table 'svc.t' "
                                                      "(catalog postgresql+psycopg://postgres@127.0.0.1:9/nowhere)")
    assert "nothing of the window was committed" in message


def test_read_only_warehouse(tmp_path, read_only_disk):
    home = tmp_path / "home"
    sink = lockgate.IcebergSink("t", warehouse=str(read_only_disk / "wh")).to_config()
    c = committer_for(sink, str(home))
    with pytest.raises(SinkRefusedError) as refused:
        c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    message = str(refused.value)
    assert message.startswith(f"job '{JOB}', sink 'out', window 1: Iceberg table 'default.t'")
    assert "\n" not in message and "Make the table's folder writable" in message
    assert not c.is_committed(JOB, "out", 1)


def test_full_warehouse_then_room_again(tmp_path, small_disk):
    home = tmp_path / "home"
    sink = lockgate.IcebergSink("t", warehouse=str(small_disk.path / "wh")).to_config()
    c = committer_for(sink, str(home))
    c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    s2 = staged(home, sink, 2, rows(2, 2000))
    small_disk.fill()
    with pytest.raises(SinkUnavailableError) as full:
        c.commit(JOB, "out", 2, s2)
    message = str(full.value)
    assert "\n" not in message and "nothing of the window was committed" in message
    assert message.startswith(f"job '{JOB}', sink 'out', window 2: Iceberg table 'default.t' ")
    assert "failed while committing window 2" in message
    assert not c.is_committed(JOB, "out", 2) and c.committed_windows(JOB, "out") == [1]  # nothing half-committed
    small_disk.free()
    assert c.commit(JOB, "out", 2, s2)["replayed"] is False
    assert default_catalog(home).load_table("default.t").scan().to_arrow().num_rows == 2003


def test_window_staged_by_spark(tmp_path, spark):
    """A window staged by Spark's writer (not the driver's) commits the same rows."""
    from pyspark.sql import functions as F

    home = tmp_path / "home"
    sink = lockgate.IcebergSink("t", key=["id"]).to_config()
    df = spark.range(0, 5).select(F.col("id"), F.concat(F.lit("r"), F.col("id").cast("string")).alias("name"),
                                  F.timestamp_seconds(F.col("id") + 1_700_000_000).alias("ts"))
    s = stage_sink(df, sink, job=JOB, sink_name="out", window=4, attempt=1, home=str(home))
    assert committer_for(sink, str(home)).commit(JOB, "out", 4, s)["rows"] == 5
    got = read(default_catalog(home), "default.t").sort_by("id")
    assert got["name"].to_pylist() == [f"r{i}" for i in range(5)] and got["lg_window"].to_pylist() == [4] * 5
    assert [t.timestamp() for t in got["ts"].to_pylist()] == [1_700_000_000 + i for i in range(5)]
