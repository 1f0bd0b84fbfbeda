"""One location resolver: local paths, file:// URIs and s3a:///s3:// read the same way by
sources, the snapshot store and sink committers (real files, no Spark)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lockgate.checkpoint.snapshots import SnapshotStore
from lockgate.filesystems import (
    arrow_uri,
    delete_path,
    exists,
    is_dir,
    join,
    list_data_files,
    list_dirs,
    location_uri,
    resolve,
)
from lockgate.runtime.availability import available_from, available_until, list_files
from lockgate.runtime.committers import committer_for
from lockgate.runtime.staging import staging_dir_name, staging_uri

#: a region in the URI keeps pyarrow from asking AWS where the bucket is (no network here)
REGION = "?region=us-east-1"


def test_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for location, want in [
        (str(tmp_path / "a"), str(tmp_path / "a")),
        (tmp_path / "a", str(tmp_path / "a")),
        ("rel/b/", str(tmp_path / "rel" / "b")),
        ("rel/../c", str(tmp_path / "c")),
        ("~/d", str(tmp_path / "home" / "d")),
    ]:
        fs, path = resolve(location)
        assert isinstance(fs, pafs.LocalFileSystem)
        assert path == want
        assert location_uri(location) == want


def test_file_uris_are_the_local_file_system(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for location in (f"file://{tmp_path}/x", f"file://{tmp_path}/x/", f"FILE://{tmp_path}/x", f"file:{tmp_path}/x"):
        fs, path = resolve(location)
        assert isinstance(fs, pafs.LocalFileSystem)
        assert path == f"{tmp_path}/x"
    assert resolve("file:rel")[1] == f"{tmp_path}/rel"  # Hadoop's relative file: path
    assert resolve("file:///tmp/a%20b")[1] == "/tmp/a%20b"  # taken literally, as Spark takes it
    assert location_uri(f"file://{tmp_path}/x/") == f"file://{tmp_path}/x"  # URIs keep their form
    assert location_uri(f"file:{tmp_path}/x") == f"{tmp_path}/x"
    assert location_uri("file:///") == "file:///"  # a bare root keeps its slashes
    assert resolve("file:///") == (pafs.LocalFileSystem(), "/")


def test_hadoop_s3_spellings_map_to_pyarrow_s3():
    assert arrow_uri("s3a://bucket/key") == "s3://bucket/key"
    assert arrow_uri("S3N://bucket/key") == "s3://bucket/key"
    assert arrow_uri("s3://bucket/key") == "s3://bucket/key"
    assert arrow_uri("gs://bucket/key") == "gs://bucket/key"
    assert arrow_uri("/local/s3a://odd") == "/local/s3a://odd"
    fs_a, path_a = resolve(f"s3a://bucket/some/key{REGION}")
    fs_s, path_s = resolve(f"s3://bucket/some/key{REGION}")
    assert isinstance(fs_a, pafs.S3FileSystem) and isinstance(fs_s, pafs.S3FileSystem)
    assert fs_a.equals(fs_s)
    assert path_a == path_s == "bucket/some/key"
    assert location_uri("s3a://bucket/out/") == "s3a://bucket/out"  # Spark still gets s3a://


def test_join():
    assert join("/a/b/", "c", "/d/") == "/a/b/c/d"
    assert join("s3a://bucket/x", "lg_window=3") == "s3a://bucket/x/lg_window=3"
    assert join("/", "job") == "/job"
    assert join("file:///", "job") == "file:///job"
    assert join("/a/b/") == "/a/b"
    assert join("/") == "/"


def test_exists_list_delete(tmp_path):
    fs, root = resolve(tmp_path)
    (tmp_path / "d1" / "_hidden").mkdir(parents=True)
    (tmp_path / "d2").mkdir()
    (tmp_path / "d1" / "f.parquet").write_bytes(b"x")
    (tmp_path / "d1" / "_hidden" / "g.parquet").write_bytes(b"x")
    (tmp_path / "d1" / ".f.crc").write_bytes(b"x")
    assert sorted(list_dirs(fs, root)) == ["d1", "d2"]
    assert list_dirs(fs, join(root, "missing")) == []
    assert [i.path for i in list_data_files(fs, root)] == [f"{root}/d1/f.parquet"]
    assert [i.path for i in list_data_files(fs, f"{root}/d1/f.parquet")] == [f"{root}/d1/f.parquet"]
    assert list_data_files(fs, join(root, "missing")) == []
    assert exists(fs, f"{root}/d1/f.parquet") and not is_dir(fs, f"{root}/d1/f.parquet")
    assert is_dir(fs, f"{root}/d1")
    assert delete_path(fs, f"{root}/d1") is True
    assert delete_path(fs, f"{root}/d1") is False
    assert not exists(fs, f"{root}/d1")


@contextmanager
def writing_into(folder, seconds: float) -> Iterator[None]:
    """A thread that keeps adding files to ``folder/op`` for ``seconds`` (or until the
    block ends), recreating the folders a concurrent delete takes away."""
    until = time.monotonic() + seconds
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set() and time.monotonic() < until:
            try:
                (folder / "op").mkdir(parents=True, exist_ok=True)
                (folder / "op" / f"part-{n}").write_bytes(b"x")
            except FileNotFoundError:  # the delete won a race; write again
                pass
            n += 1

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.1)
    try:
        yield
    finally:
        stop.set()
        writer.join()


def test_a_folder_still_written_into_is_deleted_once_the_writer_stops(tmp_path):
    fs, root = resolve(tmp_path)
    folder = tmp_path / "w=0000000001-a2"
    with writing_into(folder, seconds=0.4):
        assert delete_path(fs, f"{root}/{folder.name}") is True
    assert not folder.exists()


def _spellings(folder, monkeypatch) -> list[str]:
    """One folder, named every way a user may name it."""
    monkeypatch.chdir(folder.parent)
    return [str(folder), f"{folder}/", folder.name, f"file://{folder}", f"file:{folder}"]


def test_sources_snapshots_and_committers_resolve_a_location_alike(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ts = pa.array([t0, t0 + timedelta(seconds=5)], pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"ts": ts}), folder / "part-0.parquet")
    home = tmp_path / "home"
    for location in _spellings(folder, monkeypatch):
        # a source reads the folder's files
        assert [f.path for f in list_files(location)] == [f"{folder}/part-0.parquet"]
        cfg = {"kind": "file", "path": location, "format": "parquet", "event_time": "ts"}
        assert available_from(cfg) == int(t0.timestamp()) * 1_000_000
        assert available_until(cfg) == (int(t0.timestamp()) + 5) * 1_000_000 + 1
        # the snapshot store writes under it
        store = SnapshotStore(location)
        snapshot = store.snapshot_uri("orders", 1, 1)
        assert resolve(snapshot)[1] == f"{folder}/orders/w=0000000001-a1"
        # a file sink stages and commits under it
        sink = {"kind": "file", "path": location, "format": "parquet"}
        staged = staging_uri(sink, job="orders", sink_name="out", window=1, attempt=1, home=str(home))
        assert resolve(staged)[1] == f"{folder}/_staging/orders/{staging_dir_name(1, 1)}"
        committer = committer_for(sink, str(home))
        assert resolve(committer.target("orders", "out", 1))[1] == f"{folder}/lg_window=1"


def test_s3a_and_s3_name_the_same_place_for_every_reader():
    locations = [f"{scheme}://bucket/out" for scheme in ("s3a", "s3", "s3n")]
    targets = set()
    for location in locations:
        sink = {"kind": "file", "path": location, "format": "parquet"}
        target = committer_for(sink, "/home").target("orders", "out", 2)
        snapshot = SnapshotStore(location).snapshot_uri("orders", 2, 1)
        fs_t, path_t = resolve(target + REGION)
        fs_s, path_s = resolve(snapshot + REGION)
        assert isinstance(fs_t, pafs.S3FileSystem) and isinstance(fs_s, pafs.S3FileSystem)
        targets.add((path_t, path_s))
    assert targets == {("bucket/out/lg_window=2", "bucket/out/orders/w=0000000002-a1")}


@pytest.mark.parametrize("name", ["f.parquet", "_SUCCESS", ".f.crc"])
def test_a_single_file_location(tmp_path, name):
    (tmp_path / name).write_bytes(b"x")
    fs, path = resolve(tmp_path / name)
    assert [i.path for i in list_data_files(fs, path)] == [os.fspath(tmp_path / name)]
