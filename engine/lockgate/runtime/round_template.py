"""Round templates: a round's frames built and analysed once per shape, bound to each round.

A round builds the same DataFrames every time; only its inputs change (the window's files, the
state's layer files) and its bounds (the window's start and end, the watermark before and after,
each state table's horizon). A :class:`RoundTemplate` is the whole round built once with every
bound a sentinel (:mod:`lockgate.runtime.plan_template`): its sinks' output, each state table's
delta and the frames the round holds (persists). Each later round of the same *shape* (which
sources have records, how each state table's layers are laid out: :meth:`LayeredState.shape`)
binds it to its own reads and bounds, which costs a few Py4J calls a frame where building and
analysing the round step by step costs hundreds.

What a round holds is held in the order it was built, each bound frame persisted before the
frames that read it are planned, so Spark finds it in its cache exactly as when the round is
built step by step. A round that cannot be kept (a plan that computes while it is built, reads a
table that is not a file, or has a subquery) is built step by step, every round.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from .plan_template import PlanTemplate, offset_of, sentinel
from .settings import switch
from .state.layers import StateDelta

#: the round's bounds every template takes as parameters (CycleContext's fields)
BOUNDS = ("start_us", "end_us", "prev_watermark_us", "watermark_us")
#: operators whose round is never kept: they compute while the round is built (an iteration
#: cycle's supersteps, a table aggregate's cut) or read a table that is not a file (a lookup)
UNTEMPLATED = frozenset({"graph_compute", "graph_traverse", "lookup_join"})


def enabled() -> bool:
    """Whether runners keep round templates (``LOCKGATE_ROUND_TEMPLATES=0`` builds every round step
    by step, as before templates: for a comparison, or to rule them out)."""
    return switch("LOCKGATE_ROUND_TEMPLATES")


def build_after() -> int:
    """How many rounds of one shape a runner builds step by step before it keeps that shape's
    template (``LOCKGATE_ROUND_TEMPLATE_AFTER``, at least 0): a template costs more to build than a
    round built step by step, and pays that back only over the rounds bound from it, so a shape
    seen once or twice in a run (a state chain's early layouts, a short run) keeps none."""
    raw = os.environ.get("LOCKGATE_ROUND_TEMPLATE_AFTER", "2").strip()
    try:
        return max(0, int(raw))
    except ValueError:
        raise ValueError(f"LOCKGATE_ROUND_TEMPLATE_AFTER={raw!r} is not a number of rounds: give an integer "
                         "(0 keeps a template from a shape's first round)") from None


def parameters(horizons: list[str], ranges: list[str] | None = None) -> dict[str, int]:
    """Every parameter of a round with state tables ``horizons`` holding a horizon and the key-range
    parameters ``ranges`` (:func:`lockgate.runtime.state.key_ranges.parameter`), and its sentinel."""
    names = [*BOUNDS, *[f"horizon:{t}" for t in horizons], *(ranges or [])]
    return {name: sentinel(i) for i, name in enumerate(names)}


@dataclass
class RoundFrames:
    """What building a round produces: its sinks' output ``(name, frame, sink)``, each state
    table's delta, the state tables its tails produced, and the frames it holds, in order."""

    sinks: list[tuple[str, DataFrame, dict[str, Any]]]
    state_out: dict[str, StateDelta]
    state_tables: list[str]
    cached: list[DataFrame]


@dataclass(frozen=True)
class _Delta:
    """A state delta of the template: where its frames are among the kept ones, and its bound."""

    table: str
    upserts: int
    deletes: int | None
    identity: tuple[str, ...] | None
    #: (column, parameter or None for a constant, offset or the constant)
    expire_below: tuple[str, str | None, int] | None
    count_first: bool
    empty: bool
    sort_by: tuple[str, ...] | None = None


@dataclass
class RoundTemplate:
    """A round's frames kept as one plan template (build it with :meth:`of_round`)."""

    plans: PlanTemplate
    sinks: list[tuple[str, int, dict[str, Any]]]
    deltas: list[_Delta]
    cached: list[int]
    state_tables: list[str]
    #: the operators the round runs, in order (as the runner reports them)
    run_order: list[str]
    #: the inputs and bounds the template was built over: what a frame derived from the round's
    #: frames (:meth:`derived`) is built over, once
    inputs: dict[str, DataFrame] = field(default_factory=dict)
    sentinels: dict[str, int] = field(default_factory=dict)
    #: frames derived from the round's frames, by the key they were asked for: their template
    #: and the schemas of the frames they were made of
    _derived: dict[Any, tuple[PlanTemplate, list[StructType]]] = field(default_factory=dict)

    @classmethod
    def of_round(
        cls,
        spark: SparkSession,
        built: RoundFrames,
        inputs: Mapping[str, DataFrame],
        sentinels: Mapping[str, int],
        run_order: list[str],
    ) -> RoundTemplate:
        """Keep the round ``built`` with its bounds ``sentinels`` over ``inputs``. Raises
        :class:`~lockgate.runtime.plan_template.TemplateError` when it cannot be kept."""
        frames: list[DataFrame] = []

        def index(df: DataFrame) -> int:
            frames.append(df)
            return len(frames) - 1

        sinks = [(name, index(df), cfg) for name, df, cfg in built.sinks]
        deltas = []
        for table, d in built.state_out.items():
            expire = None
            if d.expire_below is not None:
                expire = (d.expire_below[0], *offset_of(int(d.expire_below[1]), sentinels))
            deltas.append(_Delta(table, index(d.upserts), None if d.deletes is None else index(d.deletes),
                                 d.identity, expire, d.count_first, d.empty, d.sort_by))
        cached = [index(df) for df in built.cached]
        plans = PlanTemplate.of_frames(spark, frames, inputs, sentinels)
        return cls(plans, sinks, deltas, cached, list(built.state_tables), list(run_order), dict(inputs),
                   dict(sentinels))

    def derived(
        self,
        key: Any,
        parts: Callable[[RoundFrames], list[DataFrame]],
        make: Callable[[list[DataFrame]], DataFrame],
        inputs: Mapping[str, DataFrame],
        values: Mapping[str, int],
    ) -> tuple[DataFrame, list[StructType]]:
        """A frame made of the round's frames, over this round's ``inputs`` and ``values``, and the
        schemas of the frames it was made of: ``make(parts(frames))``, built and kept once per
        ``key`` over the template's own frames (the same ``parts`` for the same key), then bound as
        the round's frames are. A round's tails collected in one union
        (:func:`~lockgate.runtime.one_job.pack`) are built this way, not analysed again each round.
        Raises :class:`~lockgate.runtime.plan_template.TemplateError` when it cannot be kept."""
        kept = self._derived.get(key)
        if kept is None:
            frames = self.bind(self.inputs, self.sentinels, lambda df: df)
            made_of = parts(frames)
            plan = PlanTemplate.of_frames(self.plans.spark, [make(made_of)], self.inputs, self.sentinels)
            kept = self._derived[key] = (plan, [df.schema for df in made_of])
        plan, schemas = kept
        return plan.bind_all(inputs, {p: values[p] for p in plan.params})[0], schemas

    def bind(
        self, inputs: Mapping[str, DataFrame], values: Mapping[str, int], hold: Callable[[DataFrame], DataFrame]
    ) -> RoundFrames:
        """This round's frames over its ``inputs`` and bound ``values``; ``hold`` persists each
        frame the round holds (in the order it was built, before anything reads it)."""
        frames = self.plans.bind_all(inputs, {p: values[p] for p in self.plans.params})
        cached = []
        for i in self.cached:
            frames[i] = hold(frames[i])
            cached.append(frames[i])
        state_out = {}
        for d in self.deltas:
            expire = None
            if d.expire_below is not None:
                column, param, offset = d.expire_below
                expire = (column, offset if param is None else values[param] + offset)
            state_out[d.table] = StateDelta(frames[d.upserts], d.identity,
                                            None if d.deletes is None else frames[d.deletes],
                                            expire, d.count_first, d.empty, d.sort_by)
        sinks = [(name, frames[i], cfg) for name, i, cfg in self.sinks]
        return RoundFrames(sinks, state_out, list(self.state_tables), cached)


__all__ = ["BOUNDS", "UNTEMPLATED", "RoundFrames", "RoundTemplate", "enabled", "parameters"]
