"""Key bounds: a superset of the key values a round's frame can carry, known before the frame is
computed.

A running aggregate looks up the state of the keys its round touched, and a lookup broadcasts
those keys: a Spark job of its own, which needs the frame that carries them. Below an inner
interval join that frame is the join's output, so the lookup's broadcast waits for the join's own
lookups and the round runs its broadcasts one after the other. But every pair a round emits
holds one of the round's new records, and its two keys are equal, so the output's keys are among
the keys of the join's new records on either side: a :class:`KeyBound` known before the join runs.
The aggregate looks its state up by that bound instead; the few extra state rows it reads belong to
keys no record touched, which the aggregate drops as untouched, so the result is the same.

A bound passes through operators that keep their input's values (a filter, a new column that does
not replace a bound column) and is dropped by any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: operators whose output rows carry their input's values in every column they keep
_KEEPS_VALUES = frozenset({"filter", "with_column"})


@dataclass(frozen=True)
class KeyBound:
    """The values of ``columns`` in a frame: a subset of the rows of ``sources``, each a frame and
    its columns that hold those values (in that order; nulls included). Its :meth:`keys` frame is
    built only when an operator uses the bound: a bound nobody uses costs no Py4J call."""

    columns: tuple[str, ...]
    sources: tuple[tuple[DataFrame, tuple[str, ...]], ...]

    def keys(self) -> DataFrame:
        """Every source's values under the bound's ``columns``, in one frame (with duplicates)."""
        out = None
        for df, cols in self.sources:
            part = df.select(*[F.col(c).alias(n) for c, n in zip(cols, self.columns, strict=True)])
            out = part if out is None else out.unionByName(part)
        if out is None:
            raise ValueError("a key bound needs at least one source")
        return out


def inner_join_bounds(
    left: DataFrame, right: DataFrame, left_on: list[str], right_on: list[str], right_out: dict[str, str]
) -> list[KeyBound]:
    """The bounds of an inner equi-join's output over this round's new records ``left`` and
    ``right``: its left key columns, and the right key columns under their output names
    ``right_out``, both hold only keys of ``left`` or of ``right``."""
    sources = ((left, tuple(left_on)), (right, tuple(right_on)))
    bounds = [KeyBound(tuple(left_on), sources)]
    out_names = tuple(right_out[r] for r in right_on)
    if out_names != tuple(left_on):
        bounds.append(KeyBound(out_names, sources))
    return bounds


def passed(op: str, config: dict[str, object], bounds: list[KeyBound]) -> list[KeyBound]:
    """The bounds that hold after operator ``op`` (its ``config``) when ``bounds`` hold before it."""
    if op not in _KEEPS_VALUES:
        return []
    if op == "with_column":
        replaced = str(config["column"]).lower()
        return [b for b in bounds if replaced not in (c.lower() for c in b.columns)]
    return bounds


def bound_for(keys: list[str], bounds: list[KeyBound]) -> KeyBound | None:
    """A bound whose columns are all among ``keys`` (Spark's names are case-insensitive), the one
    with the most columns; None when none is."""
    wanted = {k.lower() for k in keys}
    fits = [b for b in bounds if b.columns and all(c.lower() in wanted for c in b.columns)]
    return max(fits, key=lambda b: len(b.columns)) if fits else None


__all__ = ["KeyBound", "bound_for", "inner_join_bounds", "passed"]
