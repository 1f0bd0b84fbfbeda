"""File reads made again over other files: a source's window, a state table's layers.

Every round reads the files of its window and of each state table's layers, and
``spark.read...load(paths)`` costs about 20 ms on the driver each time, little of it the
listing: the reader resolves its data source through the analyzer again, and checks that every
path exists in a thread pool it starts and stops per call. A read of the same format, schema and
options over other files differs from the last one only in its file index, so :class:`FileReads`
makes the first read of each kind with ``spark.read`` and every later one as that read's relation
with a new index of the new paths: one listing and a few Py4J calls (about 6 ms). The first
read is made both ways (Spark's checks it; the copy is what is returned), so that every read of a
kind names its paths alike and two reads of the same files are the same relation.

The copy is the relation ``spark.read`` would build (the same format, data schema, options),
so Spark plans and reads it alike. Reads whose relation is not a plain file relation (partition
columns, buckets, a catalog table) are always made by ``spark.read``, and so is a read whose
listing misses a path: Spark's own reader then raises its error for that path.

    >>> reads = FileReads(spark)                                            # doctest: +SKIP
    >>> a = reads.load("parquet", schema, {}, ["/data/w0/part-0.parquet"])  # spark.read
    >>> b = reads.load("parquet", schema, {}, ["/data/w1/part-0.parquet"])  # the copy
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

_HADOOP_FS_RELATION = "org.apache.spark.sql.execution.datasources.HadoopFsRelation"


def enabled() -> bool:
    """Whether reads are copied (``LOCKGATE_FILE_READS=spark`` makes every read with ``spark.read``)."""
    return os.environ.get("LOCKGATE_FILE_READS", "copy").strip().lower() != "spark"


def _classic(spark: SparkSession) -> bool:
    """Whether ``spark`` has a driver JVM here (a classic session, not Spark Connect)."""
    return getattr(spark, "_jsparkSession", None) is not None


def _path_part(uri: str) -> str:
    """The path of ``uri`` without its scheme and authority, and without a trailing slash."""
    path = urlsplit(uri).path if "://" in uri or uri.startswith("file:") else uri
    return path.rstrip("/") or "/"


def _all_found(paths: Sequence[str], files: Sequence[str]) -> bool:
    """Whether each of ``paths`` is one of ``files`` or a folder holding one of them."""
    found = {_path_part(f) for f in files}
    folders = {p[: p.rfind("/")] for p in found}
    for path in paths:
        p = _path_part(path)
        if p in found or p in folders:
            continue
        if not any(f.startswith(p + "/") for f in found):
            return False
    return True


@dataclass
class _Prototype:
    """The first read of one kind: its relation's parts, looked up once."""

    relation: Any
    partition_schema: Any
    data_schema: Any
    bucket_spec: Any
    file_format: Any
    options: Any
    user_schema: Any


#: the reads of each session (:meth:`FileReads.of`)
_OF_SESSION: weakref.WeakKeyDictionary[SparkSession, FileReads] = weakref.WeakKeyDictionary()


class FileReads:
    """Reads of files by format, schema and options, each kind's first read made by ``spark.read``
    and the later ones copied from it (see the module's docstring). On a Spark Connect session every read is
    made by ``spark.read``: a copy needs the driver's JVM."""

    @classmethod
    def of(cls, spark: SparkSession) -> FileReads:
        """The reads of ``spark``, one per session: every round's sources and state layers share
        their first reads."""
        reads = _OF_SESSION.get(spark)
        if reads is None:
            reads = _OF_SESSION[spark] = cls(spark)
        return reads

    def __init__(self, spark: SparkSession, copy: bool | None = None):
        self.spark = spark
        # a copy is built in the driver's JVM: a Spark Connect session has none here, so every read
        # of one is made by ``spark.read`` (the server resolves it)
        self.copy = (enabled() if copy is None else copy) and _classic(spark)
        #: (format, schema JSON, options) -> the kind's first read (None: never copied)
        self._prototypes: dict[tuple[Any, ...], _Prototype | None] = {}
        self._jvm: Any = None

    def load(self, fmt: str, schema: StructType, options: Mapping[str, str], paths: Sequence[str]) -> DataFrame:
        """The rows of ``paths`` (files or folders) read as ``fmt`` with ``schema`` and ``options``,
        as ``spark.read.format(fmt).schema(schema).options(**options).load(paths)`` gives them."""
        if not paths:
            raise ValueError("a file read needs at least one path")
        key = (fmt, schema.json(), tuple(sorted(options.items())))
        proto = self._prototypes.get(key)
        if proto is not None:
            df = self._copied(proto, paths)
            if df is not None:
                return df
        df = self.spark.read.format(fmt).schema(schema).options(**options).load(list(paths))
        if key not in self._prototypes:
            proto = self._prototypes[key] = self._prototype(df) if self.copy else None
            # the first read is a copy too: every read of a kind then names its paths alike (Spark's
            # own reader qualifies them), so two reads of the same files are the same relation,
            # which is how a round template finds its inputs in a round's plan
            copied = None if proto is None else self._copied(proto, paths)
            if copied is not None:
                return copied
        return df

    def parquet(self, schema: StructType, paths: Sequence[str]) -> DataFrame:
        """``spark.read.schema(schema).parquet(*paths)``, copied when it can be."""
        return self.load("parquet", schema, {}, paths)

    def _prototype(self, df: DataFrame) -> _Prototype | None:
        plan = df._jdf.queryExecution().analyzed()
        if plan.nodeName() != "LogicalRelation" or not plan.catalogTable().isEmpty():
            return None
        rel = plan.relation()
        if rel.getClass().getName() != _HADOOP_FS_RELATION:
            return None
        if not rel.partitionSchema().isEmpty() or rel.bucketSpec().isDefined():
            return None
        jvm = self.spark._jvm
        return _Prototype(rel, rel.partitionSchema(), rel.dataSchema(), rel.bucketSpec(), rel.fileFormat(),
                          rel.options(), jvm.scala.Option.apply(rel.dataSchema()))

    def _copied(self, proto: _Prototype, paths: Sequence[str]) -> DataFrame | None:
        """A read of ``paths`` as a copy of ``proto`` with a new file index; None when the listing
        misses one of them (``spark.read`` raises its error)."""
        jvm = self.spark._jvm
        if self._jvm is None:
            ds = jvm.org.apache.spark.sql.execution.datasources
            self._jvm = (
                ds.InMemoryFileIndex,
                getattr(getattr(ds, "NoopCache$"), "MODULE$"),
                getattr(getattr(ds, "LogicalRelation$"), "MODULE$"),
                jvm.org.apache.spark.sql.classic.Dataset.ofRows,
                jvm.scala.Option.empty(),
                jvm.org.apache.hadoop.fs.Path,
                jvm.org.apache.hadoop.util.StringUtils.join,
            )
        file_index, no_cache, logical_relation, of_rows, none, hadoop_path, join = self._jvm
        session = self.spark._jsparkSession
        roots = jvm.PythonUtils.toSeq([hadoop_path(p) for p in paths])
        index = file_index(session, roots, proto.options, proto.user_schema, no_cache, none, none)
        listed = join("\n", index.inputFiles())
        if not _all_found(paths, listed.split("\n") if listed else []):
            return None
        rel = proto.relation.copy(index, proto.partition_schema, proto.data_schema, proto.bucket_spec,
                                  proto.file_format, proto.options, session)
        return DataFrame(of_rows(session, logical_relation.apply(rel, False)), self.spark)


__all__ = ["FileReads", "enabled"]
