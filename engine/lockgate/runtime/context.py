"""CycleContext: what one cycle round's translation needs and produces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from .empty import known_empty
from .plan_template import TemplateError
from .state.key_bounds import KeyBound
from .state.layers import LayeredState, StateDelta


@dataclass
class CycleContext:
    """The window being processed, the state at the last checkpoint (its layers, read only
    where an operator asks), what each stateful operator changed in this window (the delta
    the round writes), and the DataFrames to unpersist when the round ends.

    ``analysis=True`` is the compile-time mode: inputs are empty and nothing is cached.
    ``template=True`` builds a round's plan template (:mod:`lockgate.runtime.round_template`):
    the bounds are sentinels, and the frames to hold are listed in ``cached`` but not persisted
    (a template round persists its bound copies).
    """

    spark: SparkSession
    window: int
    start_us: int
    end_us: int
    #: watermark at the start of the round (records below it are late)
    prev_watermark_us: int
    #: watermark after the round (windows ending at or before it emit)
    watermark_us: int
    parallelism: int = 2
    analysis: bool = False
    #: "<operator>.<table>" -> its layers at the last checkpoint (absent: no state yet)
    state_in: dict[str, LayeredState] = field(default_factory=dict)
    #: "<operator>.<table>" -> what this round changed, to snapshot after it
    state_out: dict[str, StateDelta] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)
    #: an ITERATOR operator's work folder for this window (None: no round runs, e.g. at compile time)
    iteration_folders: Callable[[str], str] | None = None
    #: the supersteps the round's iteration cycles ran, in order (reported with the round's result)
    supersteps: list[dict[str, Any]] = field(default_factory=list)
    #: invalid records each graph operator dropped this round (``invalid="skip"``)
    invalid: dict[str, int] = field(default_factory=dict)
    #: "<input operator>/<id columns>" -> the graph operator that counted that input's invalid
    #: records this round (graph operators reading one stream drop the same records: counted once)
    invalid_counted: dict[str, str] = field(default_factory=dict)
    #: vertex id -> bounds of the key values its output carries this round (:mod:`.key_bounds`)
    key_bounds: dict[str, list[KeyBound]] = field(default_factory=dict)
    #: vertex id -> the (min, max) of its output's integer columns this round (:mod:`.key_ranges`)
    key_ranges: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    template: bool = False
    #: a template round's parameters and their sentinels (:mod:`.round_template`)
    sentinels: dict[str, int] = field(default_factory=dict)
    #: a source's slice of the round holds no records: a frame to hold is first asked whether
    #: Spark proves it empty, and one that is stays unheld, so that what reads it is pruned (the
    #: question costs an optimisation, which a round with records does not pay; a state table with
    #: no rows does not set it: a tumbling window's state is empty after every round that closed
    #: its windows, and the frames such a round holds come from its records)
    sparse: bool = False

    def iteration_folder(self, operator: str) -> str:
        """Where ``operator``'s iteration cycle keeps this window's supersteps."""
        if self.iteration_folders is None:
            raise RuntimeError(f"no iteration folder for '{operator}' outside a cycle round")
        return self.iteration_folders(operator)

    def state(self, operator: str, table: str = "main") -> LayeredState | None:
        """The table's state at the last checkpoint; None when it holds nothing."""
        state = self.state_in.get(f"{operator}.{table}")
        return None if state is None or state.empty else state

    def set_state(self, operator: str, delta: StateDelta, table: str = "main") -> None:
        """Record what this round changed in the table (its snapshot writes only that)."""
        self.state_out[f"{operator}.{table}"] = delta

    def cache(self, df: DataFrame) -> DataFrame:
        """Persist ``df`` for the rest of the round when it feeds more than one action."""
        if self.analysis:
            return df
        if self.template:
            self.cached.append(df)
            return df
        if self.sparse and known_empty(df):
            return df
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(df)
        return df

    def cut(self, df: DataFrame) -> DataFrame:
        """``df`` computed now and held as a plain table of rows: what is built on it later in
        the round is analysed without the plan that made it (the state lookups above it), so
        an operator that reads its input several times does not multiply that plan."""
        if self.analysis:
            return df
        if self.template:
            raise TemplateError("a round that computes a frame while it is built (localCheckpoint) has no template")
        if self.sparse and known_empty(df):
            return df
        return df.localCheckpoint(eager=True)

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached.clear()
