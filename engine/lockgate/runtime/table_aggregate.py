"""An aggregate over an *updating* stream: totals of a table whose rows change.

An updating stream (a running aggregate's output, :attr:`PipelineVertex.upsert_key`) says,
each round, the new row of every key it changed, and ``op = '-D'`` for a key it removed. An
aggregate over it (Nexmark q4: the average of each category's final auction prices, where a
final price is itself a running ``max`` per auction) must take back what the key's old row
contributed before it adds the new one, and move the key to its new group when the grouping
column changed.

State is the input table itself: the latest row of every input key (table ``rows``, identity
the input's key). A round looks up the old rows of the keys it changed, writes the new rows
(and tombstones for deleted keys) as its delta, and recomputes only the groups those old and new
rows belong to, from the rows of those groups: every aggregate, ``max`` and ``min`` included,
is then exactly what a batch aggregate over the current table gives, with no retraction
arithmetic to drift. It emits the new totals of every touched group, and ``op = '-D'`` with
null totals for a group left empty.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from . import aggregates as agg
from .changelog import DELETE, OP, UPSERT
from .context import CycleContext
from .state.layers import StateDelta, anti_join


def input_columns(cfg: dict[str, Any], upstream_key: list[str], columns: list[str]) -> list[str]:
    """The input columns the state keeps: the input's key, the group keys, the aggregated ones."""
    wanted = [*upstream_key, *cfg["keys"]]
    for a in cfg["aggs"].values():
        wanted += [a.get("column"), *a.get("by", ()), *a.get("columns", ())]
    out: list[str] = []
    for c in wanted:
        if c and c in columns and c not in out:
            out.append(c)
    return out


def table_aggregate(ctx: CycleContext, op: str, cfg: dict[str, Any], df: DataFrame) -> DataFrame:
    """The new totals of the groups this round's changes touched (``op`` ``+U``), and ``-D``
    for groups left with no row."""
    upstream_key: list[str] = cfg["over_updates"]
    keys: list[str] = cfg["keys"]
    aggs = cfg["aggs"]
    cols = input_columns(cfg, upstream_key, df.columns)
    deleted = F.col(OP) == F.lit(DELETE) if OP in df.columns else F.lit(False)
    changes = ctx.cut(df.select(*cols, deleted.alias("__lg_gone")))
    upserts = changes.filter(~F.col("__lg_gone")).drop("__lg_gone")
    gone = changes.filter(F.col("__lg_gone")).select(*upstream_key)
    state = ctx.state(op, "rows")
    identity = tuple(upstream_key)
    ctx.set_state(op, StateDelta(upserts, identity, deletes=gone), "rows")
    old = None if state is None else state.lookup(identity, changes, upstream_key)
    touched = upserts.select(*keys)
    if old is not None:
        touched = touched.unionByName(old.select(*keys))
    touched = ctx.cut(touched.distinct())
    # the groups' rows now: the state's rows of those groups, less the changed keys, plus the new rows
    live = upserts
    if state is not None:
        others = state.lookup_where(identity, touched, keys)
        others = anti_join(others, changes, upstream_key) if upstream_key else others.limit(0)
        live = others.select(*cols).unionByName(upserts)
    totals = live.groupBy(*keys).agg(*agg.partial_exprs(aggs, live.schema)).select(*keys, *agg.final_exprs(aggs))
    as_of = F.timestamp_micros(F.lit(ctx.end_us)).alias("as_of")
    updated = totals.select("*", as_of, F.lit(UPSERT).alias(OP))
    emptied = anti_join(touched, totals, keys) if keys else touched.limit(0)
    nulls = [F.lit(None).cast(totals.schema[name].dataType).alias(name) for name in aggs]
    return updated.unionByName(emptied.select(*keys, *nulls, as_of, F.lit(DELETE).alias(OP)))
