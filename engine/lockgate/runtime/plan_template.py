"""PlanTemplate: a DataFrame's analysed plan kept and run again on new inputs.

Spark analyses every DataFrame step as it is built (a round of q9 makes 1,225 Py4J calls), so a
round that builds its frames again pays that analysis again, though only its inputs changed: the
window's files, the state's newest layer, the round's bounds. A template is built once from a
function of its inputs and parameters, and :meth:`PlanTemplate.bind` gives the same plan over new
ones, with no step built or analysed again:

- an *input* is a file read (``spark.read...parquet(paths)``) or rows made on the driver
  (``createDataFrame`` of an Arrow table, a LocalRelation): every read of it in the plan (a
  self-join reads it twice) gets the new read's relation or rows, its columns keeping their
  identities;
- a *parameter* is a long literal, built as a sentinel value that no pipeline writes (e.g. the
  round's watermark in a filter) and replaced by each bind's value; a literal a little off a
  sentinel (``watermark + lower bound``, built from the sentinel) gets the bound value plus the
  same offset.

Several frames that share inputs (a round's sinks, state deltas and held frames) are kept together
(:meth:`PlanTemplate.of_frames`) and bound together (:meth:`PlanTemplate.bind_all`): a frame built
on another holds that frame's plan, and both are bound alike, so the one held (persisted) is the
one the other's plan finds in Spark's cache.

It works on the analysed plan through Py4J alone (``transformUp`` and ``transformAllExpressions``
take a Scala map as their partial function), so it needs a classic session: Spark Connect has no
driver JVM here (:func:`supported`).

    >>> schema = "k long, v long"                                                # doctest: +SKIP
    >>> t = PlanTemplate.build(spark, lambda i, p: i["rows"].filter(F.col("v") >= p["low"]),
    ...                        {"rows": spark.read.schema(schema).parquet("/data/w0")}, ["low"])
    >>> t.bind({"rows": spark.read.schema(schema).parquet("/data/w1")}, {"low": 5}).count()
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

#: the first sentinel: parameter i is FIRST_SENTINEL + i * SPACING (far below any microsecond
#: timestamp, row count or key a pipeline compares with)
FIRST_SENTINEL = -(2**62) - 7_777_777
#: between two parameters' sentinels; a literal within half of it of a sentinel is that
#: parameter plus an offset (half is 17.8 years of microseconds)
SPACING = 2**50

_LONG_LITERAL = re.compile(r'"value":"(-?\d+)","dataType":"long"')
#: leaves a template keeps as they are: their rows are fixed by the plan (a LocalRelation
#: with no rows, a range); a LocalRelation with rows is an input
_CONSTANT_LEAVES = frozenset({"LocalRelation", "OneRowRelation", "Range"})
#: expressions whose plans transformAllExpressions does not enter, so a parameter there would stay
_SUBQUERIES = ("ScalarSubquery", "ListQuery", "Exists", "InSubquery", "LateralSubquery")


class TemplateError(ValueError):
    """A template that cannot be built or bound as asked (the message says what to change)."""


def supported(spark: SparkSession) -> bool:
    """Whether ``spark`` has a driver JVM here to keep plans in (a classic session)."""
    return getattr(spark, "_jsparkSession", None) is not None


def sentinel(i: int) -> int:
    """The sentinel value of the ``i``-th parameter."""
    return FIRST_SENTINEL + i * SPACING


def _leaves(plan: Any) -> list[Any]:
    it = plan.collectLeaves().iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out


def _is_file_read(leaf: Any) -> bool:
    return leaf.getClass().getName() == "org.apache.spark.sql.execution.datasources.LogicalRelation"


def _is_rows(leaf: Any) -> bool:
    return leaf.getClass().getName() == "org.apache.spark.sql.catalyst.plans.logical.LocalRelation"


def _relation_of(df: DataFrame, name: str) -> Any:
    """What input ``df`` reads: its file relation (a file read) or its rows (a frame of rows made
    on the driver, a LocalRelation); nothing may be on top of it."""
    plan = df._jdf.queryExecution().analyzed()
    if _is_file_read(plan):
        return plan.relation()
    if _is_rows(plan):
        return plan
    raise TemplateError(f"input {name!r} must be a plain file read (spark.read...parquet(paths)) or rows made on "
                        f"the driver, not a plan of {plan.nodeName()}: apply its steps inside the template's function")


def _reads_input(leaf: Any, relation: Any) -> bool:
    """Whether plan leaf ``leaf`` reads the input whose relation is ``relation``."""
    if _is_file_read(leaf):
        return not _is_rows(relation) and leaf.relation().equals(relation)
    # by its rows: the analyzer gives a second read of the same rows (a self-join) new columns
    return _is_rows(leaf) and _is_rows(relation) and leaf.data().equals(relation.data())


def _swapped(leaf: Any, relation: Any, fields: tuple[Any, ...], files: bool) -> Any:
    """``leaf`` reading the new input ``relation`` (``files``: a file read's, else rows), its
    columns (and other fields) kept."""
    if files:
        return leaf.copy(relation, *fields)
    output, streaming, stream = fields
    return leaf.copy(output, relation.data(), streaming, stream)


def offset_of(value: int, sentinels: Mapping[str, int]) -> tuple[str | None, int]:
    """``value`` as ``(parameter, offset from its sentinel)`` when it lies within half a
    :data:`SPACING` of one; ``(None, value)`` for a constant."""
    for p, s in sentinels.items():
        if abs(value - s) < SPACING // 2:
            return p, value - s
    return None, value


def _offsets(plans: list[Any], sentinels: Mapping[str, int]) -> dict[int, tuple[str, int]]:
    """Every long literal of ``plans`` near a parameter's sentinel: value -> (parameter, offset).
    Read from the plans' JSON (one call each; a tree string shortens long field lists)."""
    out: dict[int, tuple[str, int]] = {}
    for plan in plans:
        text = plan.toJSON()
        for kind in _SUBQUERIES:
            if f"expressions.{kind}" in text:
                raise TemplateError(f"a plan with a subquery ({kind}) cannot be kept as a template: its "
                                    "inner plan is not rewritten")
        if "plans.logical.Expand" in text:
            # its projections (a list of lists) are written as null in a plan's JSON, so a
            # parameter there would not be found and would keep its sentinel
            raise TemplateError("a plan with an Expand (grouping sets, rollup, cube) cannot be kept as a template")
        for value in {int(v) for v in _LONG_LITERAL.findall(text)}:
            param, offset = offset_of(value, sentinels)
            if param is not None:
                out[value] = (param, offset)
    return out


@dataclass
class PlanTemplate:
    """The analysed plans of frames built once, with where their inputs are read and the literals
    their parameters became (build it with :meth:`build` or :meth:`of_frames`)."""

    spark: SparkSession
    #: the analysed plans (Java objects), one per frame
    plans: list[Any]
    #: per plan, every file read that reads an input: the read's node, the input's name, and
    #: the node's other fields (its columns, catalog table, streaming flag, stream), which a
    #: bind keeps as they are
    reads: list[list[tuple[Any, str, tuple[Any, ...]]]]
    #: input name -> its schema (a Java StructType)
    schemas: dict[str, Any]
    #: input name -> whether it is a file read (else rows made on the driver)
    files: dict[str, bool]
    #: parameter names, in order
    params: list[str]
    #: literal value in the plans -> (parameter, offset from its sentinel)
    literals: dict[int, tuple[str, int]]
    #: literal value in the plans -> that literal (a Java object), made once
    literal_keys: dict[int, Any]
    #: the JVM's entry points a bind calls, looked up once
    jvm: _Jvm

    @property
    def plan(self) -> Any:
        """The first frame's analysed plan."""
        return self.plans[0]

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
        sentinels = {p: sentinel(i) for i, p in enumerate(params)}
        frame = make(dict(inputs), {p: F.lit(v) for p, v in sentinels.items()})
        return cls.of_frames(spark, [frame], inputs, sentinels, strict=True)

    @classmethod
    def of_frames(
        cls,
        spark: SparkSession,
        frames: Sequence[DataFrame],
        inputs: Mapping[str, DataFrame],
        sentinels: Mapping[str, int],
        strict: bool = False,
    ) -> PlanTemplate:
        """Keep ``frames``, built over ``inputs`` with each parameter's value ``sentinels[p]``
        (:func:`sentinel`), as one template. Every file the frames read must be an input's;
        ``strict``: every input and parameter must reach a frame."""
        if not supported(spark):
            raise TemplateError("plan templates need a classic Spark session (Spark Connect keeps no plan here)")
        relations = {name: _relation_of(df, name) for name, df in inputs.items()}
        names = list(relations)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ra, rb = relations[a], relations[b]
                same = ra.data().equals(rb.data()) if _is_rows(ra) and _is_rows(rb) else ra.equals(rb)
                if same:
                    raise TemplateError(f"inputs {a!r} and {b!r} read the same files: pass one input and use it twice")
        plans = [frame._jdf.queryExecution().analyzed() for frame in frames]
        reads: list[list[tuple[Any, str, tuple[Any, ...]]]] = []
        for plan in plans:
            found = []
            for leaf in _leaves(plan):
                if _is_file_read(leaf) or (_is_rows(leaf) and not leaf.data().isEmpty()):
                    if _is_file_read(leaf):
                        fields = (leaf.output(), leaf.catalogTable(), leaf.isStreaming(), leaf.stream())
                    else:
                        fields = (leaf.output(), leaf.isStreaming(), leaf.stream())
                    matched = [(leaf, name, fields) for name, r in relations.items() if _reads_input(leaf, r)]
                    if not matched:
                        raise TemplateError(f"the plan reads data no input names ({leaf.nodeName()}): "
                                            "pass that read as an input")
                    found += matched
                elif leaf.nodeName() not in _CONSTANT_LEAVES:
                    raise TemplateError(f"the plan has a {leaf.nodeName()} leaf, whose rows a template cannot "
                                        "swap: build it from file reads")
            reads.append(found)
        if strict:
            for name in relations:
                if all(n != name for found in reads for _, n, _ in found):
                    raise TemplateError(f"input {name!r} is not read by the template's plan")
        literals = _offsets(plans, sentinels)
        if strict:
            for p in sentinels:
                if all(q != p for q, _ in literals.values()):
                    raise TemplateError(f"parameter {p!r} is not in the template's plan (use the column it was given)")
        jvm = _Jvm.of(spark)
        return cls(spark, plans, reads, {n: relations[n].schema() for n in relations},
                   {n: not _is_rows(relations[n]) for n in relations}, list(sentinels), literals,
                   {v: jvm.long(v) for v in literals}, jvm)

    def bind(self, inputs: dict[str, DataFrame], params: dict[str, int]) -> DataFrame:
        """The template's (first) plan over new ``inputs`` (file reads of the same schemas) and
        ``params`` (every parameter's value), as a new DataFrame: Spark optimises and plans it as
        any frame, and analyses nothing again."""
        return self.bind_all(inputs, params)[0]

    def bind_all(self, inputs: Mapping[str, DataFrame], params: Mapping[str, int]) -> list[DataFrame]:
        """Every kept frame over new ``inputs`` and ``params``, in the order they were kept."""
        if set(inputs) != set(self.schemas) or set(params) != set(self.params):
            raise TemplateError(f"bind needs inputs {sorted(self.schemas)} and parameters {sorted(self.params)}, "
                                f"got {sorted(inputs)} and {sorted(params)}")
        relations = {}
        for name, df in inputs.items():
            plan = df._jdf.queryExecution().analyzed()
            try:  # the input's kind is known from the build: one call, not a look at its class
                rel = relations[name] = plan.relation() if self.files[name] else plan
                same = rel.schema().equals(self.schemas[name]) and (self.files[name] or _is_rows(rel))
            except Py4JError:
                same = False
            if not same:
                raise TemplateError(f"input {name!r} is not a plain {'file read' if self.files[name] else 'frame of rows'} "
                                    f"of the schema the template was built with: {df.schema.simpleString()}")
        jvm = self.jvm
        values = None
        if self.literals:
            values = jvm.to_scala({self.literal_keys[v]: jvm.long(params[p] + off)
                                   for v, (p, off) in self.literals.items()})
        # one map for every plan's reads: a plan's transform finds only its own leaves in it
        swap = jvm.to_scala({leaf: _swapped(leaf, relations[name], fields, self.files[name])
                             for reads in self.reads for leaf, name, fields in reads})
        out = []
        for plan, reads in zip(self.plans, self.reads, strict=True):
            if reads:
                plan = plan.transformUp(swap)
            if values is not None:
                plan = plan.transformAllExpressions(values)
            # the new nodes are copies of analysed ones (same columns, same types): marked analysed,
            # the analyzer returns the plan as it is instead of running its rules over it again
            plan.setAnalyzed()
            out.append(DataFrame(jvm.of_rows(self.spark._jsparkSession, plan), self.spark))
        return out


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

__all__ = ["FIRST_SENTINEL", "SPACING", "PlanTemplate", "TemplateError", "offset_of", "sentinel", "supported"]
