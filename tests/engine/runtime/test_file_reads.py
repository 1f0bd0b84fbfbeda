"""File reads copied from a first read: the same rows, files and plan as ``spark.read`` over the
same paths (checked against pandas reading the files), and Spark's own error for a missing path."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lockgate.runtime.file_reads import FileReads

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])


def _parquet_files(tmp_path: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        path = tmp_path / f"part-{i}.parquet"
        pd.DataFrame({"k": [i * 10 + j for j in range(3)], "v": [f"f{i}r{j}" for j in range(3)]}).to_parquet(path)
        out.append(str(path))
    return out


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _pandas_rows(paths: list[str]) -> list[tuple]:
    frame = pd.concat([pd.read_parquet(p) for p in paths])
    return sorted((int(k), v) for k, v in zip(frame["k"], frame["v"], strict=True))


def _relation_kind(df) -> str:
    plan = df._jdf.queryExecution().analyzed()
    return plan.relation().getClass().getSimpleName()


def test_later_reads_are_copies_with_the_rows_of_their_own_files(spark, tmp_path: Path) -> None:
    files = _parquet_files(tmp_path, 6)
    reads = FileReads(spark, copy=True)
    first = reads.parquet(SCHEMA, files[:2])
    assert reads._prototypes, "the first read of a kind is kept"
    for chunk in (files[2:4], files[4:], [files[0], files[5]]):
        copied = reads.parquet(SCHEMA, chunk)
        assert _rows(copied) == _pandas_rows(chunk)
        assert sorted(copied.inputFiles()) == sorted(spark.read.schema(SCHEMA).parquet(*chunk).inputFiles())
        assert copied.schema == first.schema
        assert _relation_kind(copied) == "HadoopFsRelation"
    # a row's file, as the state layers rank their rows by it
    paths = {r[0] for r in reads.parquet(SCHEMA, files[2:4]).select("_metadata.file_path").distinct().collect()}
    assert {Path(p.removeprefix("file:").lstrip("/")).name for p in paths} == {"part-2.parquet", "part-3.parquet"}


def test_folders_are_read_whole(spark, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    files_a = _parquet_files(a, 2)
    files_b = _parquet_files(b, 3)
    reads = FileReads(spark, copy=True)
    reads.parquet(SCHEMA, [f"file://{a}"])
    copied = reads.parquet(SCHEMA, [f"file://{a}", f"file://{b}"])
    assert _rows(copied) == _pandas_rows(files_a + files_b)


def test_a_missing_path_gets_sparks_own_error(spark, tmp_path: Path) -> None:
    files = _parquet_files(tmp_path, 2)
    reads = FileReads(spark, copy=True)
    reads.parquet(SCHEMA, files[:1])
    with pytest.raises(AnalysisException, match="PATH_NOT_FOUND"):
        reads.parquet(SCHEMA, [files[1], str(tmp_path / "gone.parquet")])
    with pytest.raises(AnalysisException, match="PATH_NOT_FOUND"):
        reads.parquet(SCHEMA, [str(tmp_path / "gone")])


def test_partitioned_folders_are_never_copied(spark, tmp_path: Path) -> None:
    for day in ("2024-01-01", "2024-01-02"):
        folder = tmp_path / f"day={day}"
        folder.mkdir()
        pd.DataFrame({"k": [1, 2], "v": ["x", "y"]}).to_parquet(folder / "part-0.parquet")
    reads = FileReads(spark, copy=True)
    first = reads.parquet(SCHEMA, [str(tmp_path)])
    assert "day" in first.columns
    assert list(reads._prototypes.values()) == [None]
    again = reads.parquet(SCHEMA, [str(tmp_path)])
    assert sorted((r.k, r.v, str(r.day)) for r in again.collect()) == [
        (1, "x", "2024-01-01"), (1, "x", "2024-01-02"), (2, "y", "2024-01-01"), (2, "y", "2024-01-02")]


def test_csv_options_travel_with_the_copy(spark, tmp_path: Path) -> None:
    for i in range(2):
        (tmp_path / f"f{i}.csv").write_text(f"k;v\n{i};a{i}\n{i + 10};b{i}\n")
    reads = FileReads(spark, copy=True)
    opts = {"header": "true", "sep": ";"}
    reads.load("csv", SCHEMA, opts, [str(tmp_path / "f0.csv")])
    copied = reads.load("csv", SCHEMA, opts, [str(tmp_path / "f1.csv")])
    assert _rows(copied) == [(1, "a1"), (11, "b1")]
    # other options are another kind of read, not a copy of this one
    other = reads.load("csv", SCHEMA, {"header": "false", "sep": ";"}, [str(tmp_path / "f1.csv")])
    assert sorted(tuple(r) for r in other.collect() if r.k is not None) == [(1, "a1"), (11, "b1")]
    assert [tuple(r) for r in other.collect() if r.k is None] == [(None, "v")]


def test_reads_off_make_every_read_with_spark(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKGATE_FILE_READS", "spark")
    files = _parquet_files(tmp_path, 2)
    reads = FileReads(spark)
    reads.parquet(SCHEMA, files[:1])
    assert list(reads._prototypes.values()) == [None]
    assert _rows(reads.parquet(SCHEMA, files[1:])) == _pandas_rows(files[1:])


def test_one_set_of_reads_per_session(spark) -> None:
    assert FileReads.of(spark) is FileReads.of(spark)


def test_two_reads_of_the_same_files_are_the_same_relation(spark, tmp_path: Path) -> None:
    """What a round template matches a round's inputs by: the first read of a kind included."""
    files = _parquet_files(tmp_path, 3)
    reads = FileReads(spark, copy=True)

    def relation(df):
        return df._jdf.queryExecution().analyzed().relation()

    first, again = reads.parquet(SCHEMA, files[:2]), reads.parquet(SCHEMA, files[:2])
    assert relation(first).equals(relation(again))
    assert not relation(first).equals(relation(reads.parquet(SCHEMA, files[1:])))
