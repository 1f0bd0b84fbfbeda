"""Schema inference on Spark: the analysis :func:`lockgate.plan.compile.compile_pipeline` is handed.

Every operator is translated over empty inputs with Spark's analyzer (the same
:func:`~lockgate.runtime.translate.translate` a cycle round runs), so an unknown column
or a type error is reported at compile time, naming the operator and the fix, exactly as
it would fail at run time. :class:`SparkSchemaInference` fills in every vertex's schema,
event-time column and state layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from ..errors import CompileError
from ..plan.logical import Column, Partitioning, PipelineGraph, PipelineVertex
from .context import CycleContext
from .sources import source_schema
from .translate import translate


class SparkSchemaInference:
    """A :class:`~lockgate.plan.compile.SchemaInference` backed by Spark's analyzer.

    With no ``spark``, the process's session is started when the first graph is analysed
    (so a structural error is reported without starting Spark).
    """

    def __init__(self, spark: SparkSession | None = None):
        self.spark = spark

    def __call__(self, graph: PipelineGraph, fns: Mapping[str, Callable[..., Any]]) -> None:
        """Fill in every vertex's schema, event-time column and state layout."""
        if self.spark is None:
            from .session import get_spark

            self.spark = get_spark()
        _analyze(graph, fns, self.spark)


def _columns(schema: StructType) -> list[Column]:
    """Spark fields as plan columns (name, ``simpleString`` type, nullability)."""
    return [Column(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields]


def struct_of(cols: list[Column]) -> StructType:
    """The Spark schema of plan columns."""
    return StructType.fromDDL(", ".join(f"`{c.name}` {c.type}" for c in cols)) if cols else StructType([])


def _is_timestamp(schema: StructType, col: str) -> bool:
    return col in schema.fieldNames() and isinstance(schema[col].dataType, TimestampType | TimestampNTZType)


def _check_columns(v: PipelineVertex, schema: StructType, cols: list[str], what: str, fix: str) -> None:
    names = schema.fieldNames()
    for c in cols:
        if c not in names:
            raise CompileError(f"{what} column '{c}' is not in its input (columns: {', '.join(names)}); {fix}", v.id)


def _analyze(graph: PipelineGraph, fns: Mapping[str, Callable[..., Any]], spark: SparkSession) -> None:
    """Fill in every vertex's schema, event-time column and state layout."""
    ctx = CycleContext(spark, 0, 0, 0, 0, 0, analysis=True)
    frames: dict[str, DataFrame] = {}
    for vid in graph.topological_order():
        v = graph.vertices[vid]
        ins = graph.inputs(vid)
        in_schemas = [frames[e.source].schema for e in ins]
        for e, s in zip(ins, in_schemas, strict=True):
            if e.partitioning == Partitioning.KEY:
                _check_columns(v, s, e.keys, "key_by", "key by a column the stream has")
        if v.op == "source":
            try:
                schema = source_schema(v.config["source"])
            except CompileError as err:
                raise CompileError(str(err), vid) from None
            frames[vid] = spark.createDataFrame([], schema)
            et = v.config["source"]["event_time"]
            _check_columns(v, schema, [et], "event_time", "set event_time= to a timestamp column of the source")
            if not _is_timestamp(schema, et):
                raise CompileError(
                    f"event_time column '{et}' is {schema[et].dataType.simpleString()}, not a timestamp: "
                    "cast it in the source or point event_time= at a TIMESTAMP column",
                    vid,
                )
            v.event_time = et
            v.schema = _columns(schema)
            continue
        _validate_inputs(graph, v, in_schemas)
        _refuse_nondeterminism(v)
        _updates_in(graph, v)
        inputs = [frames[e.source] for e in ins]
        try:
            out = translate(ctx, graph, v, inputs, fns)
            schema = out.schema
        except AnalysisException as err:
            msg = str(err).strip().splitlines()[0]
            cols = ", ".join(in_schemas[0].fieldNames()) if in_schemas else ""
            raise CompileError(f"{msg} (input columns: {cols})", vid) from None
        dupes = sorted({n for n in schema.fieldNames() if schema.fieldNames().count(n) > 1})
        if dupes:
            raise CompileError(
                f"output has duplicate column names {', '.join(dupes)}: give each its own name (in SQL, "
                f"`{dupes[0]} AS other_name` in the SELECT list; in Python, rename the aggregate, the column "
                "or a key called like an aggregate or window_start)",
                vid,
            )
        frames[vid] = out
        v.schema = _columns(schema)
        v.state = {
            k.split(".", 1)[1]: _columns(d.upserts.schema) for k, d in ctx.state_out.items() if k.startswith(vid + ".")
        }
        _propagate_event_time(graph, v, schema)
        _updates_out(v, schema)


#: ``column AS name`` in a select: a plain rename
_RENAME = re.compile(r"\s*`?(\w+)`?\s+(?:[aA][sS]\s+)?`?(\w+)`?\s*")
#: operators that take an updating stream as it is (its key kept through them)
_KEEPS_UPDATES = ("select", "with_column", "sink")
#: how an error names an operator: the call that made it
_CALLS = {"filter": "filter()", "sql": "sql()", "map_batches": "map_batches()", "union": "union()",
          "window_aggregate": "a windowed aggregate", "window_top_n": "top_n()", "over_aggregate": "over()",
          "deduplicate": "deduplicate()", "join": "join()", "interval_join": "join(between=... or ttl=...)",
          "lookup_join": "lookup()", "graph_compute": "a graph computation (compute())",
          "graph_traverse": "a graph traversal (traverse())"}


def _updates_in(graph: PipelineGraph, v: PipelineVertex) -> None:
    """Check what an operator does with an updating input, before it is translated: a running
    aggregate over one becomes an aggregate over the table it describes (``over_updates``, the
    input's key); ``select``, ``with_column`` and sinks keep it updating; anything else would
    treat each update as a new record, so it is refused, naming the operator."""
    ups = [graph.vertices[e.source] for e in graph.inputs(v.id)]
    updating = next((u for u in ups if u.upsert_key is not None), None)
    if v.op == "running_aggregate":
        if updating is not None:
            v.config["over_updates"] = list(updating.upsert_key)
        else:
            v.config.pop("over_updates", None)
        v.upsert_key = list(v.config["keys"])
        return
    if v.op == "graph_compute" and updating is None:
        v.upsert_key = ["id"]  # each window's results replace the vertices' earlier ones
        return
    if updating is None:
        return
    if v.op in _KEEPS_UPDATES:
        v.upsert_key = list(updating.upsert_key)
        return
    key = ", ".join(updating.upsert_key) or "one row"
    raise CompileError(
        f"{_CALLS.get(v.op, v.op)} over an updating stream is not supported: '{updating.id}' replaces its rows by key ({key}) "
        "round after round, and this operator would take every replaced row as a new record. Aggregate it "
        "again with key_by(...).aggregate(...) (which takes back a key's old row), select or add columns, or "
        "sink it (PostgresSink(key=[...]) keeps the current rows); filter or window the records before the "
        "aggregate that makes the updates",
        v.id,
    )


def _updates_out(v: PipelineVertex, schema: StructType) -> None:
    """An updating output must keep its key columns (a select dropping them is refused); a
    keyed sink's key must be columns of its input."""
    if v.op == "sink":
        key = v.config["sink"].get("key") or []
        _check_columns(v, schema, key, "the sink's key", "key the sink by columns of the stream it writes")
        return
    if v.upsert_key is None:
        return
    if v.op == "select":  # a key column renamed (``c AS d``) is the key under its new name
        renamed = {}
        for e in v.config["exprs"]:
            m = _RENAME.fullmatch(e)
            if m:
                renamed[m.group(1)] = m.group(2)
        v.upsert_key = [k if k in schema.fieldNames() else renamed.get(k, k) for k in v.upsert_key]
    missing = [c for c in v.upsert_key if c not in schema.fieldNames()]
    if missing:
        raise CompileError(
            f"the output updates rows by key ({', '.join(v.upsert_key)}) but drops {', '.join(missing)}: "
            "keep the key columns (a consumer could not tell which row an update replaces)",
            v.id,
        )


#: SQL functions whose value differs between a run and its replay (wall clock, randomness)
_NONDETERMINISTIC = re.compile(
    r"\b(current_timestamp|current_date|current_time|localtimestamp|now|curdate|rand|randn|random|uuid|"
    r"shuffle)\s*\(|\bunix_timestamp\s*\(\s*\)|\b(current_timestamp|current_date|localtimestamp)\b(?!\s*\()",
    re.IGNORECASE,
)


def _expressions(v: PipelineVertex) -> list[str]:
    cfg = v.config
    if v.op == "select":
        return list(cfg["exprs"])
    if v.op == "with_column":
        return [cfg["expr"]]
    if v.op == "filter":
        return [cfg["condition"]]
    if v.op == "sql":
        return [cfg["query"]]
    return []


def _refuse_nondeterminism(v: PipelineVertex) -> None:
    """Refuse expressions whose value a replay would not reproduce: a window restored after
    a failure must compute exactly what it computed before (processing time included)."""
    for expr in _expressions(v):
        found = _NONDETERMINISTIC.search(expr)
        if found:
            fn = (found.group(1) or found.group(2) or "unix_timestamp").lower()
            raise CompileError(
                f"'{expr}' uses {fn}(), whose value differs on every run: a window replayed after a "
                "failure would compute another result, so exactly-once could not hold. For processing "
                "time, give the source an arrival column (FileSource(..., arrival='arrived')) and "
                "window on it (lg.Tumbling(size, on='arrived')); for sampling, hash a column "
                "(e.g. 'abs(hash(id)) % 100 < 10')",
                v.id,
            )


def _validate_inputs(graph: PipelineGraph, v: PipelineVertex, in_schemas: list[StructType]) -> None:
    cfg = v.config
    up = [graph.vertices[e.source] for e in graph.inputs(v.id)]
    if v.op == "over_aggregate" and (up[0].event_time is None or not _is_timestamp(in_schemas[0], up[0].event_time)):
        raise CompileError(
            f"the stream from '{up[0].id}' has no event-time column (an operator before dropped it): an OVER "
            "aggregation orders each key's records by event time; keep the source's event-time column",
            v.id,
        )
    if v.op in ("window_aggregate", "running_aggregate", "deduplicate", "over_aggregate"):
        s = in_schemas[0]
        _check_columns(v, s, cfg["keys"], "key", "key_by a column the stream has")
        for name, a in cfg.get("aggs", {}).items():
            if a["column"]:
                _check_columns(v, s, [a["column"]], f"aggregate '{name}'", "aggregate a column the stream has")
    if v.op == "window_top_n":
        _check_columns(v, in_schemas[0], cfg["keys"], "key", "key_by a column the stream has")
        _check_columns(v, in_schemas[0], cfg["by"], "top_n order", "order by a column the stream has")
    if v.op in ("window_aggregate", "window_top_n", "join"):
        spec = cfg["window"]
        for u, s in zip(up, in_schemas, strict=False):
            col = spec.get("on") or u.event_time
            if col is None:
                raise CompileError(
                    f"the stream from '{u.id}' has no event-time column (an operator before dropped it): "
                    "keep the source's event-time column, or pass on= to the window",
                    v.id,
                )
            if not _is_timestamp(s, col):
                typ = s[col].dataType.simpleString() if col in s.fieldNames() else "missing"
                raise CompileError(
                    f"window on column '{col}' of type {typ}: windows need a TIMESTAMP column; convert it "
                    f"first, e.g. .with_column('{col}', 'timestamp_millis({col})')",
                    v.id,
                )
    if v.op in ("join", "interval_join") and cfg.get("times"):  # a join written in SQL names its time columns
        for u, col, side in zip(up, cfg["times"], ("left", "right"), strict=True):
            if col and col != u.event_time:
                raise CompileError(
                    f"the join's time condition compares column '{col}' of the {side} stream '{u.id}', whose "
                    f"event time is {repr(u.event_time) if u.event_time else 'gone (an operator before dropped it)'}"
                    ": a join keeps and drops records by event time, so bound the event-time columns",
                    v.id,
                )
    if v.op == "deduplicate" and up[0].event_time is None:
        pass  # dedup without event time keeps the first record by column order
    if v.op == "lookup_join":
        from .lookup import table_schema

        try:
            ts = table_schema(cfg["table"])
        except CompileError as err:
            raise CompileError(str(err), v.id) from None
        _check_columns(v, in_schemas[0], cfg["left_on"], "lookup key", "look up by columns the stream has")
        _check_columns(v, ts, cfg["right_on"], "lookup table key", "name columns the table has in right_on=")
        for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
            lt, rt = in_schemas[0][lk].dataType.simpleString(), ts[rk].dataType.simpleString()
            if lt != rt:
                raise CompileError(f"lookup key types differ: stream '{lk}' is {lt}, table '{rk}' is {rt}; cast "
                                   "the stream's column with with_column first", v.id)
    if v.op == "interval_join":
        for u, s in zip(up, in_schemas, strict=True):
            if u.event_time is None or not _is_timestamp(s, u.event_time):
                raise CompileError(
                    f"the stream from '{u.id}' has no event-time column (an operator before dropped it): an "
                    "interval join compares both sides' event times; keep the source's event-time column",
                    v.id,
                )
    if v.op in ("join", "interval_join"):
        ls, rs = in_schemas
        _check_columns(v, ls, cfg["left_on"], "join key", "join on columns both streams have")
        _check_columns(v, rs, cfg["right_on"], "join key", "join on columns both streams have")
        for lk, rk in zip(cfg["left_on"], cfg["right_on"], strict=True):
            lt, rt = ls[lk].dataType.simpleString(), rs[rk].dataType.simpleString()
            if lt != rt:
                raise CompileError(
                    f"join key types differ: left '{lk}' is {lt}, right '{rk}' is {rt}; cast one side with "
                    "with_column first",
                    v.id,
                )
    if v.op == "union":
        first = in_schemas[0]
        base = {f.name: f.dataType.simpleString() for f in first.fields}
        for u, s in zip(up[1:], in_schemas[1:], strict=True):
            other = {f.name: f.dataType.simpleString() for f in s.fields}
            if other != base:
                missing = sorted(set(base) ^ set(other))
                typed = sorted(c for c in set(base) & set(other) if base[c] != other[c])
                detail = []
                if missing:
                    detail.append(f"columns only on one side: {', '.join(missing)}")
                if typed:
                    detail.append(
                        "types differ: " + ", ".join(f"{c} ({base[c]} vs {other[c]})" for c in typed)
                    )
                raise CompileError(
                    f"union of '{up[0].id}' and '{u.id}' has mismatched schemas ({'; '.join(detail)}); "
                    "select the same columns with the same types on every input",
                    v.id,
                )
        ets = {u.event_time for u in up}
        if len(ets) > 1:
            raise CompileError(
                f"union inputs have different event-time columns ({', '.join(sorted(str(e) for e in ets))})",
                v.id,
            )


def _propagate_event_time(graph: PipelineGraph, v: PipelineVertex, schema: StructType) -> None:
    if v.op in ("window_aggregate", "window_top_n", "join"):
        v.event_time, v.event_time_is_end = "window_end", True
        return
    if v.op in ("running_aggregate", "graph_compute"):
        v.event_time, v.event_time_is_end = "as_of", True
        return
    if v.op == "graph_traverse":  # the answers keep their request's event time
        up = graph.vertices[graph.inputs(v.id)[1].source]
        if up.event_time and _is_timestamp(schema, up.event_time):
            v.event_time, v.event_time_is_end = up.event_time, up.event_time_is_end
        else:
            v.event_time, v.event_time_is_end = None, False
        return
    if v.op == "interval_join":
        # a pair is emitted when its later record arrives: neither side's time is on time for
        # a window downstream (an earlier record may be below the watermark by then)
        v.event_time, v.event_time_is_end = None, False
        return
    up = graph.vertices[graph.inputs(v.id)[0].source]
    if up.event_time and _is_timestamp(schema, up.event_time):
        v.event_time, v.event_time_is_end = up.event_time, up.event_time_is_end
    elif up.event_time and v.op == "select":  # the event-time column renamed (``window_end AS endtime``)
        for e in v.config["exprs"]:
            m = _RENAME.fullmatch(e)
            if m and m.group(1) == up.event_time and _is_timestamp(schema, m.group(2)):
                v.event_time, v.event_time_is_end = m.group(2), up.event_time_is_end
                break


__all__ = ["SparkSchemaInference", "struct_of"]
