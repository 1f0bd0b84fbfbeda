"""Checking a vertex program against a graph's columns without running it: the types of its
vertex values, messages and results, found by Spark's analyzer over empty DataFrames.

A pipeline's graph computation is compiled before any record arrives: :func:`probe_program` gives
the state layout (the value type is part of it) and the output columns, and raises the errors a
run would raise at its first supersteps (a function that returns the wrong kind of thing, a
message of the wrong type, a vertex value that changes type), naming the function and the fix.

>>> # state, output = probe_program(spark, ConnectedComponents(), edges.schema, None)
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, NullType, StructField, StructType

from lockgate.graph.compute import AggregateContext, Step, VertexContext, VertexProgram
from lockgate.graph.errors import GraphInputError, ProgramReturnError, step_type_error
from lockgate.graph.superstep import COUNT, IN_DEGREE, INBOX, OUT_DEGREE, VALUE, check_init_type


def _name(t: DataType) -> str:
    return t.simpleString()


def _returned(program: VertexProgram, fn: str, out: Any, kind: type) -> Any:
    if not isinstance(out, kind):
        what = "a Column (the vertex value)" if kind is Column else "a Step(value, send_out=, send_in=)"
        raise ProgramReturnError(
            f"{program.name}.{fn} returned {type(out).__name__} {out!r:.80}, not {what}. Fix: return {what}; "
            "build it from the ctx columns and pyspark.sql.functions (F.lit(x) for a constant)"
        )
    return out


def vertex_schema(edges: StructType, vertices: StructType | None) -> StructType:
    """The vertices' columns: ``id`` (the type of ``src``) and the vertex stream's attributes."""
    for need in ("src", "dst"):
        if need not in edges.fieldNames():
            raise GraphInputError(
                f"the edge stream has no column '{need}' (it has {', '.join(edges.fieldNames())}): select or "
                "rename its columns to src, dst (and any edge attributes)"
            )
    src, dst = edges["src"].dataType, edges["dst"].dataType
    if _name(src) != _name(dst):
        raise GraphInputError(f"edge columns src ({_name(src)}) and dst ({_name(dst)}) differ in type: cast one")
    reserved = [c for c in edges.fieldNames() if c.startswith("__")]
    if reserved:
        raise GraphInputError(f"the edge stream has column '{reserved[0]}': names starting with __ are reserved")
    if vertices is None:
        return StructType([StructField("id", src, True)])
    if "id" not in vertices.fieldNames():
        raise GraphInputError(
            f"the vertex stream has no column 'id' (it has {', '.join(vertices.fieldNames())}): rename its key to id"
        )
    if _name(vertices["id"].dataType) != _name(src):
        raise GraphInputError(
            f"vertex ids are {_name(vertices['id'].dataType)} but edge endpoints are {_name(src)}: cast one"
        )
    bad = [c for c in vertices.fieldNames() if c.startswith("__") or c == "value"]
    if bad:
        raise GraphInputError(
            f"the vertex stream has column '{bad[0]}': 'value' names the vertex value and names starting with "
            "__ are reserved; rename it"
        )
    return StructType([StructField("id", src, True), *[f for f in vertices.fields if f.name != "id"]])


def probe_program(
    spark: SparkSession, program: VertexProgram, edges: StructType, vertices: StructType | None
) -> tuple[StructType, DataFrame]:
    """The program's vertex state columns (``id``, attributes, ``value``) and its output over
    empty inputs (``program.finish``), checking what ``init``, ``compute`` (supersteps 1 and 2),
    ``evolve`` and ``along_edge`` return. Raises the errors a run would raise."""
    vschema = vertex_schema(edges, vertices)
    base = spark.createDataFrame([], StructType([
        *vschema.fields, StructField(OUT_DEGREE, LongType(), True), StructField(IN_DEGREE, LongType(), True)]))
    ctx0 = VertexContext(id=F.col("id"), value=F.lit(None), messages=F.lit(None), message_count=F.lit(0),
                         out_degree=F.col(OUT_DEGREE), in_degree=F.col(IN_DEGREE), superstep=0, num_vertices=1)
    init = _returned(program, "init", program.init(ctx0), Column)
    value_type = base.select(init.alias(VALUE)).schema[VALUE].dataType
    check_init_type(program, value_type)
    message_type = program.message_type or value_type
    attrs = [f for f in vschema.fields if f.name != "id"]
    state = spark.createDataFrame([], StructType([
        vschema["id"], *attrs, StructField(VALUE, value_type, True), StructField(INBOX, message_type, True),
        StructField(COUNT, LongType(), True), StructField(OUT_DEGREE, LongType(), True),
        StructField(IN_DEGREE, LongType(), True)]))
    actx = AggregateContext(id=F.col("id"), value=F.col(VALUE), previous=F.col(VALUE), out_degree=F.col(OUT_DEGREE),
                            in_degree=F.col(IN_DEGREE), superstep=0, num_vertices=1)
    named = program.aggregates(actx)
    aggregates = {name: None for name in named}
    steps = [("compute", 1), ("compute", 2)] + ([("evolve", 1)] if program.has_evolve() else [])
    for fn, superstep in steps:
        ctx = VertexContext(
            id=F.col("id"), value=F.col(VALUE), messages=F.col(INBOX), message_count=F.col(COUNT),
            out_degree=F.col(OUT_DEGREE), in_degree=F.col(IN_DEGREE), superstep=superstep, num_vertices=1,
            aggregates=aggregates, touched=F.lit(True) if fn == "evolve" else None,
            is_new=F.lit(False) if fn == "evolve" else None,
        )
        step = _returned(program, fn, getattr(program, fn)(ctx), Step)
        _check_step(program, fn, superstep, state, step, value_type, message_type, edges)
    out_state = state.select("id", *[a.name for a in attrs], F.col(VALUE).alias("value"))
    return out_state.schema, program.finish(out_state)


def _check_step(
    program: VertexProgram, fn: str, superstep: int, state: DataFrame, step: Step, value_type: DataType,
    message_type: DataType, edges: StructType,
) -> None:
    columns = {"value": step.value, "send_out": step.send_out, "send_in": step.send_in}
    for k, c in columns.items():
        if c is None:
            continue
        t = state.select(c.alias("__probe")).schema["__probe"].dataType
        want = value_type if k == "value" else message_type
        if not isinstance(t, NullType) and _name(t) != _name(want):
            raise step_type_error(program.name, fn, superstep, k, _name(t), _name(want))


__all__ = ["probe_program", "vertex_schema"]
