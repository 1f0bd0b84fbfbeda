"""Several DataFrames collected to the driver by one Spark action.

A round ends with its tails: each stateful operator's state delta and each sink's output.
When they are all small, the driver writes them (one Parquet file each), and collecting
them one by one costs a Spark job each: the first computes the round (its cached frames),
the others read it back. :func:`collect_together` collects them as one union instead, each
frame's rows packed in a struct column of their own and tagged with the frame's position,
and unpacks them on the driver into the tables ``toArrow`` would have given one by one
(same columns, same types, same nullability).

This module imports nothing from Lockgate.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

#: the column that says which frame a row of the union came from
TAIL = "__lg_tail"


def _ddl(dt: DataType) -> str:
    """``dt`` as a SQL type with every nested field nullable (a frame's struct is null on the
    other frames' rows, and so are its fields: Arrow refuses nulls in a non-null field).
    Names are quoted, so any column name goes."""
    if isinstance(dt, StructType):
        fields = ", ".join(f"`{f.name.replace('`', '``')}`: {_ddl(f.dataType)}" for f in dt.fields)
        return f"STRUCT<{fields}>"
    if isinstance(dt, ArrayType):
        return f"ARRAY<{_ddl(dt.elementType)}>"
    if isinstance(dt, MapType):
        return f"MAP<{_ddl(dt.keyType)}, {_ddl(dt.valueType)}>"
    return dt.simpleString()


def packable(df: DataFrame) -> bool:
    """Whether ``df``'s rows can travel packed in one struct: columns with distinct names."""
    names = df.columns
    return bool(names) and len(set(names)) == len(names)


def collect_together(frames: list[DataFrame], large_types: bool = False, tasks: int | None = None) -> list[pa.Table]:
    """Each frame's rows, as ``frame.toArrow()`` gives them, from one Spark action (one job, plus
    the broadcasts its plan needs, as any collect).

    ``large_types``: the session's ``spark.sql.execution.arrow.useLargeVarTypes`` (what
    ``toArrow`` would use). ``tasks``: at most this many tasks in the union's last stage (the
    cluster's cores): every task of that stage deserialises the whole union's plan, which for
    a round of many operators costs far more than the task's rows. Every frame must be
    :func:`packable`.

    >>> a = spark.range(3).withColumnRenamed("id", "k")           # doctest: +SKIP
    >>> b = spark.createDataFrame([("x",)], "v string")           # doctest: +SKIP
    >>> [t.num_rows for t in collect_together([a, b])]           # doctest: +SKIP
    [3, 1]
    """
    if len(frames) == 1:
        return [frames[0].toArrow()]
    return unpack(pack(frames, tasks).toArrow(), [df.schema for df in frames], large_types)


def pack(frames: list[DataFrame], tasks: int | None = None) -> DataFrame:
    """The union that :func:`collect_together` collects: each frame's rows in a struct column of
    their own, tagged with the frame's position (``tasks``: at most this many tasks in its last
    stage). A round template keeps it (:mod:`lockgate.runtime.round_template`), so a round bound
    from one does not build and analyse it again."""
    names = [f"__lg_t{i}" for i in range(len(frames))]
    types = [_ddl(df.schema) for df in frames]
    parts = []
    for i, df in enumerate(frames):
        # one expression list per frame: it is parsed in the JVM, one call each
        columns = [f"{i} AS {TAIL}"] + [
            f"CAST({'struct(*)' if j == i else 'NULL'} AS {ddl}) AS {name}"
            for j, (name, ddl) in enumerate(zip(names, types, strict=True))
        ]
        parts.append(df.selectExpr(*columns))
    union = union_all(parts)
    if tasks is not None:
        union = union.coalesce(max(1, tasks))
    return union


def union_all(parts: list[DataFrame]) -> DataFrame:
    """The union of ``parts`` (of one schema, by position) as one ``Union`` of them all, analysed
    once: a chain of ``union`` calls analyses the whole growing union again at every part, which
    for a round of many operators' tails cost more than a second."""
    session = parts[0].sparkSession
    jss = getattr(session, "_jsparkSession", None)
    if jss is None or len(parts) == 1:  # Spark Connect builds its plan on the server
        union = parts[0]
        for part in parts[1:]:
            union = union.union(part)
        return union
    jvm = session._jvm
    plans = jvm.PythonUtils.toSeq([part._jdf.queryExecution().analyzed() for part in parts])
    union = jvm.org.apache.spark.sql.catalyst.plans.logical.Union(plans, False, False)
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(jss, union), session)


def unpack(table: pa.Table, schemas: list[StructType], large_types: bool = False) -> list[pa.Table]:
    """The collected rows of a :func:`pack` of frames of ``schemas``, split back into each frame's
    table as its ``toArrow`` would give it (same columns, types and nullability)."""
    tags = table[TAIL]
    out = []
    for i, schema in enumerate(schemas):
        want = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                               prefers_large_types=large_types)
        rows = table.filter(pc.equal(tags, i))[f"__lg_t{i}"].combine_chunks()
        if len(rows) == 0:
            out.append(want.empty_table())
            continue
        out.append(pa.Table.from_struct_array(rows).cast(want))
    return out


__all__ = ["TAIL", "collect_together", "pack", "packable", "union_all", "unpack"]
