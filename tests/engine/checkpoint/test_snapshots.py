"""The snapshot store on real Parquet files written with pyarrow."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lockgate.checkpoint import SnapshotStore, parse_snapshot_uri
from lockgate.errors import InvalidArgumentError, SnapshotError


def write_snapshot(store: SnapshotStore, job: str = "orders", window: int = 3, attempt: int = 1) -> str:
    """Lay a snapshot out as Spark does: part files, plus side files that are not data."""
    uri = store.snapshot_uri(job, window, attempt)
    for operator, parts in (("agg", 2), ("join", 1)):
        folder = store.operator_uri(uri, operator)
        os.makedirs(folder)
        for i in range(parts):
            table = pa.table({"key": list(range(i * 10, i * 10 + 5)), "total": [1.5] * 5})
            pq.write_table(table, f"{folder}/part-{i:05d}.snappy.parquet")
            Path(f"{folder}/.part-{i:05d}.snappy.parquet.crc").write_bytes(b"crc")
        Path(f"{folder}/_SUCCESS").touch()
    os.makedirs(f"{uri}/_temporary")
    return uri


def test_layout(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    uri = store.snapshot_uri("orders", 3, 2)
    assert uri == f"{tmp_path}/snaps/orders/w=0000000003-a2"
    assert store.operator_uri(uri, "agg") == f"{uri}/agg"
    assert parse_snapshot_uri(uri) == ("orders", 3, 2)
    assert parse_snapshot_uri("/not/a/snapshot") is None
    with pytest.raises(InvalidArgumentError):
        store.snapshot_uri("a/b", 1, 1)
    with pytest.raises(InvalidArgumentError):
        store.operator_uri(uri, "_hidden")


def test_manifest_and_verify(tmp_path):
    store = SnapshotStore(str(tmp_path / "snaps"))
    uri = write_snapshot(store)
    manifest = store.manifest(uri)
    assert set(manifest) == {"agg", "join"}
    assert manifest["agg"]["rows"] == 10 and manifest["join"]["rows"] == 5
    agg_files = manifest["agg"]["files"]
    assert [f["path"] for f in agg_files] == ["part-00000.snappy.parquet", "part-00001.snappy.parquet"]
    assert agg_files[0]["size"] == os.path.getsize(f"{uri}/agg/part-00000.snappy.parquet")
    store.verify(uri, manifest)  # intact: no error


def test_verify_names_a_deleted_file(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    uri = write_snapshot(store)
    manifest = store.manifest(uri)
    os.remove(f"{uri}/agg/part-00001.snappy.parquet")
    with pytest.raises(SnapshotError) as info:
        store.verify(uri, manifest)
    message = str(info.value)
    assert "job 'orders' window 3" in message
    assert "operator 'agg': file 'agg/part-00001.snappy.parquet' is missing" in message
    assert "lockgate restore orders --window W" in message and "--reset-state" in message


def test_verify_names_a_truncated_file(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    uri = write_snapshot(store)
    manifest = store.manifest(uri)
    path = f"{uri}/join/part-00000.snappy.parquet"
    size = os.path.getsize(path)
    os.truncate(path, size // 2)
    with pytest.raises(
        SnapshotError, match=rf"file 'join/part-00000.snappy.parquet' changed \({size // 2} bytes"
    ):
        store.verify(uri, manifest)


def test_verify_names_a_corrupt_footer_of_the_same_size(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    uri = write_snapshot(store)
    manifest = store.manifest(uri)
    path = f"{uri}/agg/part-00000.snappy.parquet"
    data = bytearray(Path(path).read_bytes())
    data[-4:] = b"XXXX"  # the PAR1 magic
    Path(path).write_bytes(bytes(data))
    with pytest.raises(
        SnapshotError, match="file 'agg/part-00000.snappy.parquet' has an unreadable Parquet footer"
    ):
        store.verify(uri, manifest)
    with pytest.raises(SnapshotError, match="not a readable Parquet file"):
        store.manifest(uri)


def test_missing_snapshot_list_and_delete(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    assert store.list_snapshots("orders") == []
    with pytest.raises(SnapshotError, match="does not exist"):
        store.manifest(store.snapshot_uri("orders", 0, 1))
    uris = [write_snapshot(store, window=w, attempt=a) for w, a in ((3, 2), (1, 1), (3, 10))]
    assert store.list_snapshots("orders") == [uris[1], uris[0], uris[2]]
    store.delete(uris[0])
    store.delete(uris[0])  # missing is fine
    assert store.list_snapshots("orders") == [uris[1], uris[2]]


def test_file_uri_root(tmp_path):
    store = SnapshotStore(f"file://{tmp_path}/snaps")
    uri = write_snapshot_via_uri(store)
    assert uri.startswith("file://")
    manifest = store.manifest(uri)
    assert manifest["agg"]["rows"] == 3
    store.verify(uri, manifest)
    assert store.list_snapshots("orders") == [uri]
    store.delete(uri)
    assert store.list_snapshots("orders") == []


def write_snapshot_via_uri(store: SnapshotStore) -> str:
    uri = store.snapshot_uri("orders", 0, 1)
    folder = store.operator_uri(uri, "agg").removeprefix("file://")
    os.makedirs(folder)
    pq.write_table(pa.table({"k": [1, 2, 3]}), f"{folder}/part-00000.parquet")
    return uri


def test_driver_written_table_and_operator_manifest(tmp_path):
    store = SnapshotStore(tmp_path / "snaps")
    uri = store.snapshot_uri("orders", 4, 1)
    table = pa.table({"key": [1, 2, 3], "total": [1.0, 2.0, 3.0]})
    entry = store.write_table(uri, "agg.main", table)
    assert entry["rows"] == 3 and [f["path"] for f in entry["files"]] == ["part-00000-driver.parquet"]
    assert entry["files"][0]["size"] == os.path.getsize(f"{uri}/agg.main/part-00000-driver.parquet")
    assert pq.read_table(f"{uri}/agg.main").equals(table)
    # the same entry as a listing of the folder gives (the Spark-written path's manifest)
    assert store.operator_manifest(uri, "agg.main") == entry
    store.verify(uri, {"agg.main": entry})

    # an empty state writes no file, and verifies as it is
    empty = store.write_table(uri, "join.left", table.slice(0, 0))
    assert empty == {"files": [], "rows": 0}
    assert not os.path.exists(f"{uri}/join.left")
    store.verify(uri, {"agg.main": entry, "join.left": empty})

    # a damaged driver-written file is named like any other
    Path(f"{uri}/agg.main/part-00000-driver.parquet").write_bytes(b"x" * entry["files"][0]["size"])
    with pytest.raises(SnapshotError, match="agg.main/part-00000-driver.parquet"):
        store.verify(uri, {"agg.main": entry})
    with pytest.raises(SnapshotError, match="operator folder 'nope' was not written"):
        store.operator_manifest(uri, "nope")
