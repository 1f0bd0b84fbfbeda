"""CycleContext: what one cycle round's translation needs and produces."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession


@dataclass
class CycleContext:
    """The window being processed, the state loaded from the last snapshot, the state to
    snapshot after this window, and the DataFrames to unpersist when the round ends.

    ``analysis=True`` is the compile-time mode: inputs are empty and nothing is cached.
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
    #: "<operator>.<table>" -> DataFrame loaded from the previous snapshot
    state_in: dict[str, DataFrame] = field(default_factory=dict)
    #: "<operator>.<table>" -> DataFrame to snapshot after this round
    state_out: dict[str, DataFrame] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)

    def state(self, operator: str, table: str = "main") -> DataFrame | None:
        return self.state_in.get(f"{operator}.{table}")

    def set_state(self, operator: str, df: DataFrame, table: str = "main") -> None:
        self.state_out[f"{operator}.{table}"] = df

    def cache(self, df: DataFrame) -> DataFrame:
        """Persist ``df`` for the rest of the round when it feeds more than one action."""
        if self.analysis:
            return df
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(df)
        return df

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached.clear()
