"""DeltaSink end to end (delta-rs, real tables): appends and keyed updates through the embedded
client against a pandas reference, a restore that rolls the table back and a later run that
ends where an uninterrupted one does, replays that write nothing (a crash right after the
Delta commit included), a second job and a schema that does not fit refused, a read-only
and a full table folder failing with one line and nothing half-committed."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import lockgate
from lockgate.errors import SinkCommitError, SinkRefusedError, SinkUnavailableError
from lockgate.runtime.committers import DeltaCommitter, committer_for
from lockgate.runtime.sinks import stage_sink

if str(Path(__file__).resolve().parent) not in sys.path:  # lakehouse_workload.py, beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from lakehouse_workload import FIRST, WINDOWS, check_tables, rows, write_pipeline
from lakehouse_workload import staged as stage_window

JOB = "lake_delta"


def read_delta(path: Path) -> pa.Table:
    return DeltaTable(str(path)).to_pyarrow_table()


def test_appends_keyed_updates_restore_and_continue(tmp_path, spark):
    lake = tmp_path / "lake"
    ref = write_pipeline(tmp_path, JOB, f"lg.DeltaSink({str(lake / 'kept')!r})",
                         f"lg.DeltaSink({str(lake / 'totals')!r}, key=['customer'])",
                         f"lg.DeltaSink({str(lake / 'hist')!r}, key=['n'])")
    first, last = FIRST, FIRST + WINDOWS - 1
    client = lockgate.connect("embedded", home=str(tmp_path / "home"))
    try:
        assert client.run(ref, first=first, last=last).state == "FINISHED"
        check_tables(lambda name: read_delta(lake / name), last)
        versions = {name: DeltaTable(str(lake / name)).version() for name in ("kept", "totals", "hist")}
        # every window is one commit carrying the transaction (app id, window), after the creation
        assert versions == {"kept": WINDOWS, "totals": WINDOWS, "hist": WINDOWS}
        assert DeltaTable(str(lake / "hist")).transaction_version(f"lockgate/{JOB}/hist_sink") == last

        # a restore rolls every table back to its state after window first + 1
        client.restore(JOB, first + 1)
        check_tables(lambda name: read_delta(lake / name), first + 1)
        for name, sink in (("kept", "kept"), ("totals", "totals_sink"), ("hist", "hist_sink")):
            assert DeltaTable(str(lake / name)).transaction_version(f"lockgate/{JOB}/{sink}") == first + 1

        # a later run commits the windows again: the tables end as an uninterrupted run's
        res = client.run(ref, first=first, last=last)
        assert res.state == "FINISHED" and res.windows_run == 2
        check_tables(lambda name: read_delta(lake / name), last)
        # a run's recovery retracts after the last checkpoint: nothing to do, nothing written
        version = DeltaTable(str(lake / "hist")).version()
        hist = committer_for(lockgate.DeltaSink(str(lake / "hist"), key=["n"]).to_config(), str(tmp_path / "home"))
        assert hist.retract_after(JOB, "hist_sink", last) == []
        assert DeltaTable(str(lake / "hist")).version() == version
    finally:
        client.close()


# -- the committer on its own ---------------------------------------------------------------
def staged(home: Path, sink: dict, window: int, table: pa.Table, job: str = JOB, attempt: int = 1) -> dict:
    return stage_window(home, sink, window, table, job, attempt)


def test_replays_write_nothing_and_crash_points(tmp_path, monkeypatch):
    home, path = tmp_path / "home", tmp_path / "t"
    sink = lockgate.DeltaSink(str(path)).to_config()
    c = committer_for(sink, str(home))
    assert isinstance(c, DeltaCommitter) and not c.is_committed(JOB, "out", 1)

    s1 = staged(home, sink, 1, rows(1))
    assert c.commit(JOB, "out", 1, s1) == {"target": f"delta:{path}", "rows": 3, "replayed": False}
    assert not Path(s1["uri"]).exists()  # the staged output goes once the window is in
    assert c.commit(JOB, "out", 1, s1)["replayed"] is True  # a replay: nothing appended
    assert c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1), attempt=2))["replayed"] is True
    assert read_delta(path).num_rows == 3 and c.is_committed(JOB, "out", 1)

    # a crash before the table commit: nothing in the table, the replay commits the window
    def crash(_c) -> None:
        raise KeyboardInterrupt("killed")

    s2 = staged(home, sink, 2, rows(2))
    monkeypatch.setattr(DeltaCommitter, "_before_table_commit", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        c.commit(JOB, "out", 2, s2)
    assert not c.is_committed(JOB, "out", 2) and read_delta(path).num_rows == 3
    monkeypatch.setattr(DeltaCommitter, "_before_table_commit", None)
    assert c.commit(JOB, "out", 2, s2)["replayed"] is False
    assert read_delta(path).num_rows == 6

    # a crash right after the Delta commit (the checkpoint row never written): the replay is a no-op
    s3 = staged(home, sink, 3, rows(3))
    monkeypatch.setattr(DeltaCommitter, "_after_table_commit", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        c.commit(JOB, "out", 3, s3)
    monkeypatch.setattr(DeltaCommitter, "_after_table_commit", None)
    assert Path(s3["uri"]).exists() and c.is_committed(JOB, "out", 3)
    version = DeltaTable(str(path)).version()
    assert c.commit(JOB, "out", 3, s3)["replayed"] is True
    assert DeltaTable(str(path)).version() == version and read_delta(path).num_rows == 9
    assert not Path(s3["uri"]).exists()

    # a restore to window 1, twice, then window 2 again and a restore to before the first window
    assert c.retract_after(JOB, "out", 1) == [2, 3]
    assert c.retract_after(JOB, "out", 1) == []
    assert sorted(read_delta(path)["lg_window"].to_pylist()) == [1, 1, 1]
    assert c.commit(JOB, "out", 2, staged(home, sink, 2, rows(2)))["replayed"] is False
    assert c.retract_after(JOB, "out", 0) == [1, 2]
    assert read_delta(path).num_rows == 0 and not c.is_committed(JOB, "out", 1)


def test_second_job_and_schema_that_does_not_fit_are_refused(tmp_path):
    home, path = tmp_path / "home", tmp_path / "t"
    sink = lockgate.DeltaSink(str(path), key=["id"]).to_config()
    c = committer_for(sink, str(home))
    c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))

    with pytest.raises(SinkRefusedError) as other:
        c.commit("intruder", "out", 1, staged(home, sink, 1, rows(1), job="intruder"))
    message = str(other.value)
    assert "\n" not in message and f"Delta table {path} is already written by job '{JOB}' (sink 'out')" in message
    assert "Write to another table" in message
    assert read_delta(path).num_rows == 3

    # a table of other columns: refused, naming the table, the columns and the fix
    other_path = tmp_path / "other"
    write_deltalake(str(other_path), pa.table({"id": pa.array([1], pa.int32()), "extra": [1.5]}))
    c2 = committer_for({**sink, "path": str(other_path)}, str(home))
    with pytest.raises(SinkRefusedError) as misfit:
        c2.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    message = str(misfit.value)
    assert "\n" not in message and f"Delta table {other_path} does not fit the stream" in message
    assert "the table lacks name, lg_window" in message and "the stream does not write extra" in message
    assert "id int32 (the stream's is int64)" in message
    assert "write to a new table, or change the table to these columns" in message
    assert DeltaTable(str(other_path)).version() == 0  # not claimed, not written

    # a table made outside Lockgate with the right columns is claimed by its first window
    made = tmp_path / "made"
    write_deltalake(str(made), pa.table({"id": pa.array([7], pa.int64()), "name": ["old"],
                                         "lg_window": pa.array([0], pa.int64())}))
    c3 = committer_for({**sink, "path": str(made)}, str(home))
    c3.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    assert DeltaTable(str(made)).metadata().configuration["lockgate.job"] == JOB
    assert read_delta(made).num_rows == 4
    assert c3.retract_after(JOB, "out", 0) == [1]  # back to the table as it was claimed
    assert read_delta(made)["name"].to_pylist() == ["old"]


def test_read_only_and_full_table_folders(tmp_path, read_only_disk):
    home = tmp_path / "home"
    sink = lockgate.DeltaSink(str(read_only_disk / "t")).to_config()
    with pytest.raises(SinkRefusedError) as refused:
        committer_for(sink, str(home)).commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    message = str(refused.value)
    assert message.startswith(f"job '{JOB}', sink 'out', window 1: Delta table {read_only_disk}/t failed while ")
    assert "\n" not in message and "Make the table's folder writable" in message


def test_full_table_folder_then_room_again(tmp_path, small_disk):
    home = tmp_path / "home"
    path = small_disk.path / "t"
    sink = lockgate.DeltaSink(str(path)).to_config()
    c = committer_for(sink, str(home))
    c.commit(JOB, "out", 1, staged(home, sink, 1, rows(1)))
    s2 = staged(home, sink, 2, rows(2, 2000))
    small_disk.fill()
    with pytest.raises(SinkUnavailableError) as full:
        c.commit(JOB, "out", 2, s2)
    message = str(full.value)
    assert isinstance(full.value, SinkCommitError) and "\n" not in message
    assert message.startswith(f"job '{JOB}', sink 'out', window 2: Delta table {path} failed while committing window 2")
    assert "nothing of the window was committed" in message
    assert not c.is_committed(JOB, "out", 2) and read_delta(path).num_rows == 3  # nothing half-committed
    small_disk.free()
    assert c.commit(JOB, "out", 2, s2)["replayed"] is False
    assert read_delta(path).num_rows == 2003


def test_window_staged_by_spark(tmp_path, spark):
    """A window staged by Spark's writer (not the driver's) commits the same rows."""
    from pyspark.sql import functions as F

    home, path = tmp_path / "home", tmp_path / "t"
    sink = lockgate.DeltaSink(str(path), key=["id"]).to_config()
    df = spark.range(0, 5).select(F.col("id"), F.concat(F.lit("r"), F.col("id").cast("string")).alias("name"),
                                  F.timestamp_seconds(F.col("id") + 1_700_000_000).alias("ts"))
    s = stage_sink(df, sink, job=JOB, sink_name="out", window=4, attempt=1, home=str(home))
    assert committer_for(sink, str(home)).commit(JOB, "out", 4, s)["rows"] == 5
    got = read_delta(path).sort_by("id")
    assert got["name"].to_pylist() == [f"r{i}" for i in range(5)] and got["lg_window"].to_pylist() == [4] * 5
    assert [t.timestamp() for t in got["ts"].to_pylist()] == [1_700_000_000 + i for i in range(5)]
