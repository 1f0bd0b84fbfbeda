"""Pipelines in SQL: ``Pipeline.sql("SELECT ...")`` over named streams, compiled to the same
operators the Python API builds.

The query is Spark SQL (parsed by sqlglot in Spark's dialect) over the pipeline's streams,
named as their operators are (``p.source(..., name="bids")`` is the table ``bids``). What it
becomes:

- ``SELECT exprs FROM s [WHERE cond]``: ``filter`` then ``select`` (stateless);
- ``... GROUP BY keys, window(ts, '10 seconds'[, '2 seconds'])``: a tumbling (or sliding)
  windowed aggregate per key, ``window.start``/``window.end`` its ``window_start``/``window_end``;
- ``... GROUP BY keys, session_window(ts, '10 seconds')``: session windows per key;
- ``... GROUP BY keys`` with no window: a running aggregate (an updating result, one row per
  key and round);
- ``HAVING cond`` (windowed aggregates): a filter of the aggregate's output;
- ``FROM (SELECT ...) AS q``: the subquery is compiled first, as its own operators;
- ``FROM a JOIN b ON a.k = b.k AND <time bound>`` (or ``FROM a, b WHERE ...``): an interval join
  when the condition bounds ``a.ts - b.ts`` on both sides (``BETWEEN``, ``>=``, ``<=`` with
  ``INTERVAL``s), a windowed join when it equates the window columns of two windowed
  aggregates of the same window (``a.starttime = b.starttime``) or writes
  ``window(a.ts, '10 seconds') = window(b.ts, '10 seconds')``; ``LEFT``/``RIGHT``/``FULL`` too.
  Of an inner join, the bound (and a key or window equality) may sit in the WHERE after
  ``JOIN ... ON`` (the published Nexmark q7); the rest of WHERE is a filter of the pairs;
- ``SELECT ... FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY keys ORDER BY c DESC) AS rn
  FROM ...) WHERE rn <= N``: top-N, per window when ``PARTITION BY`` holds ``window(ts, ...)``
  or the window columns of a windowed aggregate, else an unbounded top-N per key (an updating
  result, its state bounded to N rows per key).

Aggregates: ``count(*)``, ``count(c)``, ``count(DISTINCT c)``, ``approx_count_distinct(c)``,
``sum``, ``min``, ``max``, ``avg``; an argument that is an expression is computed first.
What cannot run incrementally is a :class:`~lockgate.errors.CompileError` naming the clause
(``ORDER BY``, ``LIMIT``, ``DISTINCT``, a join with no time bound, an ``OVER`` window other than
top-N's ``ROW_NUMBER``): each error says which operator of the Python API does the job.

    >>> p.sql("SELECT auction, window.start AS window_start, count(*) AS bids "
    ...       "FROM bids GROUP BY auction, window(date_time, '10 seconds')", name="q7_counts")
"""

from __future__ import annotations

import re

from ...errors import CompileError
from ..nodes import PipelineNodes
from ..stream import Stream
from .compiler import Compiler
from .scope import DIALECT, Relation, load_sqlglot


def compile_sql(pipeline: PipelineNodes, query: str, name: str | None = None) -> Stream:
    """The stream a SQL query over ``pipeline``'s named streams makes (see the module doc)."""
    sqlglot, exp = load_sqlglot()
    name = pipeline._next_name("sql", name)
    text = query
    # sqlglot reads ``GROUP BY window(`` as the start of a WINDOW clause; quoted, it is the function
    query = re.sub(r"(?i)\b(GROUP\s+BY\s+)window\s*\(", r"\1`window`(", query)
    try:
        tree = sqlglot.parse_one(query, read=DIALECT)
    except sqlglot.errors.ParseError as err:
        raise CompileError(f"SQL does not parse: {str(err).splitlines()[0]}", name) from None
    rel = Compiler(pipeline, exp, name).select(tree, name)
    pipeline._sql_relations[rel.stream.node] = rel
    pipeline.sql_queries[rel.stream.node] = text.strip()
    return rel.stream


__all__ = ["Relation", "compile_sql"]
