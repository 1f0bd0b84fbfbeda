"""PlanTemplate: a DataFrame's analysed plan kept and run again on new inputs.

Spark analyses every DataFrame step as it is built (a round of q9 makes 1,225 Py4J calls), so a
round that builds its frames again pays that analysis again, though only its inputs changed: the
window's files, the state's newest layer, the round's bounds. A template is built once from a
function of its inputs and parameters, and :meth:`PlanTemplate.bind` gives the same plan over new
ones, with no step built or analysed again:

- an *input* is a file read (``spark.read...parquet(paths)``): every read of it in the plan (a
  self-join reads it twice) gets the new read's relation, its columns keeping their identities;
- a *parameter* is a long literal, built as a sentinel value that no pipeline writes (e.g. the
  round's watermark in a filter) and replaced by each bind's value.

It works on the analysed plan through Py4J alone (``transformUp`` and ``transformAllExpressions``
take a Scala map as their partial function), so it needs a classic session: Spark Connect has no
driver JVM here (:func:`supported`).

    >>> schema = "k long, v long"                                                # doctest: +SKIP
    >>> t = PlanTemplate.build(spark, lambda i, p: i["rows"].filter(F.col("v") >= p["low"]),
    ...                        {"rows": spark.read.schema(schema).parquet("/data/w0")}, ["low"])
    >>> t.bind({"rows": spark.read.schema(schema).parquet("/data/w1")}, {"low": 5}).count()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

#: the first sentinel: parameter i is FIRST_SENTINEL + i (far below any microsecond timestamp,
#: row count or key a pipeline compares with)
FIRST_SENTINEL = -(2**62) - 7_777_777


class TemplateError(ValueError):
    """A template that cannot be built or bound as asked (the message says what to change)."""


def supported(spark: SparkSession) -> bool:
    """Whether ``spark`` has a driver JVM here to keep plans in (a classic session)."""
    return getattr(spark, "_jsparkSession", None) is not None


def _leaves(plan: Any) -> list[Any]:
    it = plan.collectLeaves().iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out


def _is_file_read(leaf: Any) -> bool:
    return leaf.getClass().getName() == "org.apache.spark.sql.execution.datasources.LogicalRelation"


def _relation_of(df: DataFrame, name: str) -> Any:
    """The relation of ``df``, which must be one file read (nothing on top of it)."""
    plan = df._jdf.queryExecution().analyzed()
    if not _is_file_read(plan):
        raise TemplateError(f"input {name!r} must be a plain file read (spark.read...parquet(paths)), "
                            f"not a plan of {plan.nodeName()}: apply its steps inside the template's function")
    return plan.relation()


@dataclass
class PlanTemplate:
    """The analysed plan of a frame built once, with where its inputs are read and its
    parameters' sentinels (build it with :meth:`build`)."""

    spark: SparkSession
    #: the analysed plan (a Java object)
    plan: Any
    #: every file read of the plan that reads an input: the read's node, the input's name, and
    #: the node's other fields (its columns, catalog table, streaming flag, stream), which a
    #: bind keeps as they are
    reads: list[tuple[Any, str, tuple[Any, ...]]]
    #: input name -> its schema (a Java StructType)
    schemas: dict[str, Any]
    #: parameter name -> its sentinel literal (a Java object)
    params: dict[str, Any]
    #: the JVM's entry points a bind calls, looked up once
    jvm: _Jvm

    @classmethod
    def build(
        cls,
        spark: SparkSession,
        make: Callable[[dict[str, DataFrame], dict[str, Column]], DataFrame],
        inputs: dict[str, DataFrame],
        params: Sequence[str] = (),
    ) -> PlanTemplate:
        """Build ``make(inputs, params)`` once, each parameter a sentinel literal column, and keep its
        analysed plan. Raises :class:`TemplateError` when an input is not a file read, two inputs
        read the same files, or an input or a parameter does not reach the plan."""
        if not supported(spark):
            raise TemplateError("plan templates need a classic Spark session (Spark Connect keeps no plan here)")
        relations = {name: _relation_of(df, name) for name, df in inputs.items()}
        names = list(relations)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if relations[a].equals(relations[b]):
                    raise TemplateError(f"inputs {a!r} and {b!r} read the same files: pass one input and use it twice")
        jvm = _Jvm.of(spark)
        sentinels = {p: FIRST_SENTINEL + i for i, p in enumerate(params)}
        frame = make(dict(inputs), {p: F.lit(v) for p, v in sentinels.items()})
        plan = frame._jdf.queryExecution().analyzed()
        reads = []
        for leaf in _leaves(plan):
            if _is_file_read(leaf):
                rel = leaf.relation()
                fields = (leaf.output(), leaf.catalogTable(), leaf.isStreaming(), leaf.stream())
                reads += [(leaf, name, fields) for name, r in relations.items() if rel.equals(r)]
        for name in relations:
            if all(n != name for _, n, _ in reads):
                raise TemplateError(f"input {name!r} is not read by the template's plan")
        literals = {p: jvm.long(v) for p, v in sentinels.items()}
        for p, sentinel in literals.items():  # a parameter whose sentinel no expression holds
            if plan.transformAllExpressions(jvm.to_scala({sentinel: jvm.long(0)})).equals(plan):
                raise TemplateError(f"parameter {p!r} is not in the template's plan (use the column it was given)")
        return cls(spark, plan, reads, {n: relations[n].schema() for n in relations}, literals, jvm)

    def bind(self, inputs: dict[str, DataFrame], params: dict[str, int]) -> DataFrame:
        """The template's plan over new ``inputs`` (file reads of the same schemas) and ``params``
        (every parameter's value), as a new DataFrame: Spark optimises and plans it as any frame,
        and analyses nothing again."""
        if set(inputs) != set(self.schemas) or set(params) != set(self.params):
            raise TemplateError(f"bind needs inputs {sorted(self.schemas)} and parameters {sorted(self.params)}, "
                                f"got {sorted(inputs)} and {sorted(params)}")
        relations = {}
        for name, df in inputs.items():
            rel = relations[name] = _relation_of(df, name)
            if not rel.schema().equals(self.schemas[name]):
                raise TemplateError(f"input {name!r} has another schema than the template was built with: "
                                    f"{df.schema.simpleString()}")
        jvm = self.jvm
        swap = {leaf: leaf.copy(relations[name], *fields) for leaf, name, fields in self.reads}
        plan = self.plan.transformUp(jvm.to_scala(swap))
        if params:
            plan = plan.transformAllExpressions(jvm.to_scala({self.params[p]: jvm.long(v) for p, v in params.items()}))
        # the new nodes are copies of analysed ones (same columns, same types): marked analysed,
        # the analyzer returns the plan as it is instead of running its rules over it again
        plan.setAnalyzed()
        return DataFrame(jvm.of_rows(self.spark._jsparkSession, plan), self.spark)


@dataclass(frozen=True)
class _Jvm:
    """The driver JVM's entry points a template calls (each Py4J attribute walk is round trips)."""

    literal: Any
    to_scala: Any
    of_rows: Any

    @classmethod
    def of(cls, spark: SparkSession) -> _Jvm:
        jvm = spark._jvm
        return cls(getattr(getattr(jvm.org.apache.spark.sql.catalyst.expressions, "Literal$"), "MODULE$"),
                   jvm.org.apache.spark.api.python.PythonUtils.toScalaMap,
                   jvm.org.apache.spark.sql.classic.Dataset.ofRows)

    def long(self, value: int) -> Any:
        """A Catalyst literal of ``value`` typed BIGINT (Py4J would send a small int as a Java
        Integer, an INT literal: another type than the sentinel's)."""
        return self.literal.fromSQL(f"{int(value)}L")

__all__ = ["FIRST_SENTINEL", "PlanTemplate", "TemplateError", "supported"]
