"""Keyed state as layers on Spark: read a table's live rows from its base and deltas, and
describe what a round changed (:class:`StateDelta`).

A stateful operator never reads or rewrites its whole state. It asks :class:`LayeredState`
for the rows of the keys its window touched (:meth:`LayeredState.lookup`: every layer is
semi-joined with the window's keys, broadcast, before the layers are merged) or for the rows
a predicate selects (:meth:`LayeredState.select`: the windows the watermark closes now), and
hands back a :class:`StateDelta`: the rows it changed, tombstones for the rows it removed,
and the new expiry horizon. The round writes only that delta; compaction
(:mod:`lockgate.runtime.state.compaction`) folds deltas into a new base now and then.

Merging layers: for a table with an identity (the columns that name one row: the key, plus
the window for windowed state), the newest layer holding an identity wins, and a tombstone
there hides it; an append-only table (join buffers) is the union of its layers. Rows below
the table's horizon are gone in every layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from ..empty import empty_frame
from ..file_reads import FileReads
from ..settings import count_setting
from . import key_ranges

#: the tombstone flag of a delta's rows (true: the identity was removed)
DELETED = "__lg_del"
_RANK = "__lg_rank"
#: a snapshot folder's name: ``w=<cycle window, 10 digits>-a<attempt>``
_SNAPSHOT_FOLDER = re.compile(r"^w=(\d{10})-a\d+$")
#: the rank of the first in-memory layer above deltas ranked by their cycle window
_WINDOW_RANKED = 2**62
#: default smallest table (rows in its layers) whose lookups join by equality and nulls apart
DEFAULT_SPLIT_ROWS = 1_000_000


def split_rows() -> int:
    """``LOCKGATE_STATE_SPLIT_ROWS``: the smallest table (rows in its layers) with a warm base whose
    lookups join rows without a null key by plain equality (:func:`_split_semi`); 0: every such table.
    Read once by a runner, which sets :attr:`LayeredState.split`."""
    return count_setting("LOCKGATE_STATE_SPLIT_ROWS", DEFAULT_SPLIT_ROWS, "rows", "0 splits every lookup")


@dataclass
class StateDelta:
    """What one round changed in one state table.

    ``upserts`` are the table's new or replaced rows (the state's full columns); ``deletes``
    the identity columns of rows removed (tombstones; None: none); ``identity`` the columns
    that name one row (``None``: an append-only table whose rows are never replaced; ``()``:
    a table of one row); ``expire_below``: ``(column, bound)``, rows whose column is below
    the bound are gone from now on (None: nothing expires); ``count_first``: the upserts are not
    cached and usually empty, so they are counted (which reads only the columns that select them)
    before anything is written, and nothing is written when there are none; ``empty``: the plan
    proves the upserts hold no rows, so they are neither counted nor written; ``sort_by``: the
    columns the table's layers are sorted by, the ones it is looked up by (None: the identity),
    so that a lookup within key ranges skips row groups (:mod:`lockgate.runtime.state.key_ranges`).
    """

    upserts: DataFrame
    identity: tuple[str, ...] | None
    deletes: DataFrame | None = None
    expire_below: tuple[str, int] | None = None
    count_first: bool = False
    empty: bool = False
    sort_by: tuple[str, ...] | None = None

    @property
    def order(self) -> tuple[str, ...] | None:
        """The columns a layer of this table is sorted by: ``sort_by``, else the identity."""
        return self.sort_by if self.sort_by is not None else self.identity


def delta_rows(delta: StateDelta) -> DataFrame:
    """The rows of a delta layer: the upserts, then a tombstone per deleted identity."""
    out = delta.upserts.withColumn(DELETED, F.lit(False))
    if delta.deletes is not None:
        out = out.unionByName(delta.deletes.withColumn(DELETED, F.lit(True)), allowMissingColumns=True)
    return out


def _folder_key(uri: str) -> str:
    """A layer folder's key: its last two folders, ``<snapshot folder>/<table folder>``, as
    :func:`_folder_of_file` finds them in the paths of its files."""
    return "/".join(uri.rstrip("/").split("/")[-2:])


def _folder_of_file(path: Column) -> Column:
    """The :func:`_folder_key` of the folder a file's ``path`` is in (its last two folders).

    ``substring_index`` finds them with a byte search. A regular expression over every row's
    path made merging 475,000 delta rows take 13.8 s instead of 0.8 s (``python -m
    bench.state_scan``), in every lookup, fold and restore."""
    return F.substring_index(F.substring_index(path, "/", -3), "/", 2)


def _broadcast_keys(keys: DataFrame, on: list[str], keys_on: list[str] | None = None) -> DataFrame:
    """The distinct ``keys_on`` columns of ``keys`` (default: ``on``), renamed apart after
    ``on`` and broadcast: a round's keys are few next to the state. Built once per lookup and
    semi-joined with every layer. Two lookups that broadcast the same frame's same columns
    broadcast the same plan (Spark erases the names), which a round's plan then runs once."""
    return F.broadcast(keys.select(*[F.col(k).alias(f"__lg_k_{c}")
                                     for k, c in zip(keys_on or on, on, strict=True)]).distinct())


def _null_safe_semi(df: DataFrame, right: DataFrame, on: list[str]) -> DataFrame:
    """Rows of ``df`` whose ``on`` columns match a row of ``right``, the keys as
    :func:`_broadcast_keys` gives them (nulls match nulls)."""
    cond = None
    for c in on:
        term = df[c].eqNullSafe(right[f"__lg_k_{c}"])
        cond = term if cond is None else cond & term
    return df.join(right, cond, "left_semi")


def _split_semi(df: DataFrame, right: DataFrame, on: list[str]) -> DataFrame:
    """:func:`_null_safe_semi` as two joins: rows with no null key by plain equality, and the rows
    with a null key (found by a filter that the scan's statistics answer, skipping every row group
    and cached batch without nulls) null-safely. The same rows: a row with no null key matches
    alike both ways, and one with a null key only null-safely. A large layer pays for it: a join on
    ``<=>`` hashes two columns per key (Spark's rewrite: the value or a default, and its null
    flag), and probing 10 million state rows took 1.3 s that way against 0.8 s by equality
    (``bench.state_growth``'s state, cached, on the bench machine)."""
    cond = None
    nulls = None
    for c in on:
        term = df[c] == right[f"__lg_k_{c}"]
        cond = term if cond is None else cond & term
        isnull = df[c].isNull()
        nulls = isnull if nulls is None else nulls | isnull
    return df.join(right, cond, "left_semi").unionByName(_null_safe_semi(df.filter(nulls), right, on))


def anti_join(df: DataFrame, other: DataFrame, on: list[str]) -> DataFrame:
    """Rows of ``df`` whose ``on`` columns match no row of ``other`` (nulls match nulls)."""
    right = other.select(*[F.col(c).alias(f"__lg_o_{c}") for c in on]).distinct()
    cond = None
    for c in on:
        term = df[c].eqNullSafe(right[f"__lg_o_{c}"])
        cond = term if cond is None else cond & term
    return df.join(right, cond, "left_anti")


class LayeredState:
    """One state table at the restore point: its layer folders (oldest first), read lazily.

    ``frames`` may add in-memory layers on top (a round's own delta, before it is written),
    which is how compaction merges what is on disk with what the round changed.
    """

    def __init__(
        self,
        spark: SparkSession,
        schema: StructType,
        layers: list[tuple[str, bool]],
        horizon: tuple[str, int] | None,
        rows: int = 0,
        split: bool = False,
    ):
        self.spark = spark
        self.schema = schema
        #: (operator folder URI, is a delta) of every layer, oldest first
        self.layers = layers
        self.horizon = horizon
        #: rows the layers hold (an upper bound of the live rows)
        self.rows = rows
        #: lookups join in two parts (:func:`_split_semi`): the runner sets it for a large table whose
        #: base an earlier round read from Spark's cache (:mod:`.warm`); read from the files, the
        #: split's second scan costs more than it saves
        self.split = split
        self._extra: list[DataFrame] = []

    @property
    def empty(self) -> bool:
        return not self.layers and not self._extra

    def with_horizon_value(self, value: int) -> LayeredState:
        """These layers with the horizon's bound replaced by ``value`` (a round template builds its
        state with a sentinel there)."""
        if self.horizon is None:
            return self
        out = LayeredState(self.spark, self.schema, self.layers, (self.horizon[0], value), self.rows, self.split)
        out._extra = list(self._extra)
        return out

    @property
    def in_memory(self) -> int:
        """Layers held in memory on top of the files (a catch-up group's deltas)."""
        return len(self._extra)

    def with_delta(self, delta: StateDelta, keep: Callable[[DataFrame], DataFrame] | None = None) -> LayeredState:
        """This state with ``delta`` as its newest layer and its horizon (not yet written);
        ``keep`` persists the layer when later rounds read it."""
        out = LayeredState(self.spark, self.schema, self.layers, delta.expire_below or self.horizon, self.rows,
                           self.split)
        rows = delta_rows(delta)
        out._extra = [*self._extra, rows if keep is None else keep(rows)]
        return out

    def collapsed(self, identity: tuple[str, ...] | None, persist: Callable[[DataFrame], DataFrame]) -> LayeredState:
        """This state with its in-memory layers merged into one, kept with ``persist``.

        A catch-up group stacks each window's delta in memory; merging them after every
        window keeps what the next window reads at the files plus one layer, however long
        the group is.
        """
        if not self._extra:
            return self
        memory = LayeredState(self.spark, self.schema, [], self.horizon)
        memory._extra = self._extra
        merged = memory._merge(memory._frames(None, None, []), identity, keep_tombstones=True)
        out = LayeredState(self.spark, self.schema, self.layers, self.horizon, self.rows, self.split)
        out._extra = [persist(merged.select(*[f.name for f in self.schema.fields], DELETED))]
        return out

    def memory_delta(self, identity: tuple[str, ...] | None) -> StateDelta | None:
        """The in-memory layers (collapsed into one) as a :class:`StateDelta` on the files
        (None: nothing in memory): what a catch-up group changed, written once at its end."""
        if not self._extra:
            return None
        layer = self._extra[0] if len(self._extra) == 1 else self.collapsed(identity, lambda df: df)._extra[0]
        columns = [f.name for f in self.schema.fields]
        upserts = layer.filter(~F.col(DELETED)).select(*columns)
        deletes = layer.filter(F.col(DELETED)).select(*identity) if identity else None
        return StateDelta(upserts, identity, deletes, self.horizon)

    def _windows(self) -> list[int] | None:
        """The cycle window of each delta's snapshot folder (``w=<window>-a<attempt>``), when
        every delta has one and they rise along the chain; None otherwise."""
        out = []
        for uri, is_delta in self.layers:
            if is_delta:
                m = _SNAPSHOT_FOLDER.match(_folder_key(uri).split("/")[0])
                if m is None or (out and int(m.group(1)) <= out[-1]):
                    return None
                out.append(int(m.group(1)))
        return out

    def _one_delta_read(self) -> bool:
        """Whether the deltas are read in one read: one or more of them, after at most one base."""
        kinds = [is_delta for _, is_delta in self.layers]
        return kinds.count(True) >= 1 and kinds.count(False) <= 1 and kinds == sorted(kinds)

    def reads(self) -> dict[str, DataFrame]:
        """The plain file reads the layers' frames are built on, by name (``base``, ``deltas`` or
        ``layer<i>``): what a round's plan template swaps for each round's layers."""
        with_flag = StructType([*self.schema.fields, StructField(DELETED, BooleanType(), True)])
        files = FileReads.of(self.spark)
        if not self._one_delta_read():
            return {f"layer{i}": files.parquet(with_flag if is_delta else self.schema, [uri])
                    for i, (uri, is_delta) in enumerate(self.layers)}
        out = {}
        if not self.layers[0][1]:
            out["base"] = files.parquet(self.schema, [self.layers[0][0]])
        out["deltas"] = files.parquet(with_flag, [uri for uri, d in self.layers if d])
        return out

    def shape(self) -> tuple[object, ...]:
        """What the layers' frames are made of, apart from the files' names and the horizon's
        value: layers with the same shape give the same plan over other reads."""
        in_memory = len(self._extra)
        split = self.split
        if not self._one_delta_read():
            return ("layers", tuple(d for _, d in self.layers), self.horizon is None, in_memory, split)
        return ("deltas", not self.layers[0][1], self._windows() is not None, self.horizon is None, in_memory, split)

    @property
    def templatable(self) -> bool:
        """Whether a round template can read these layers again with other files: not when one
        read of the deltas ranks them by a map of their folders' names (folders not named by
        rising cycle windows), which a template would keep."""
        return not self._one_delta_read() or self._windows() is not None

    def _extra_rank(self, i: int) -> Column:
        """The rank of the ``i``-th in-memory layer: above every file layer's."""
        return F.lit((_WINDOW_RANKED + i) if self._one_delta_read() and self._windows() is not None
                     else len(self.layers) + i)

    def _file_frames(self) -> list[DataFrame]:
        """The layer files as frames carrying their rank (newer layers rank higher): the base read
        alone and every delta in one read, each row ranked by the folder its file is in (by the
        folder's cycle window, when the folders are named by rising windows, which keeps the
        round's plan the same from one round to the next). One read of the deltas keeps a round's
        plan (and the time Spark spends analysing it) the same size however long the chain is."""
        reads = self.reads()
        if not self._one_delta_read():
            frames = []
            for rank, (_uri, is_delta) in enumerate(self.layers):
                df = reads[f"layer{rank}"]
                if not is_delta:
                    df = df.withColumn(DELETED, F.lit(False))
                frames.append(df.withColumn(_RANK, F.lit(rank)))
            return frames
        frames = []
        deltas = [uri for uri, is_delta in self.layers if is_delta]
        windows = self._windows()
        first = len(self.layers) - len(deltas)  # 1 with a base, 0 without
        if first:
            frames.append(reads["base"].withColumn(DELETED, F.lit(False)).withColumn(
                _RANK, F.lit(-1 if windows is not None else 0)))
        path = F.col("_metadata.file_path")
        folder = _folder_of_file(path)
        if windows is not None:
            rank = F.substring(F.substring_index(folder, "/", 1), 3, 10).try_cast("long")
        else:
            rank = F.element_at(F.create_map(*[x for i, uri in enumerate(deltas)
                                              for x in (F.lit(_folder_key(uri)), F.lit(first + i))]), folder)
        # coalesce evaluates the rank once per row (a when/otherwise on it evaluated it twice)
        checked = F.coalesce(rank, F.raise_error(F.concat(F.lit("a state file outside the layers of its chain: "),
                                                          path)))
        frames.append(reads["deltas"].withColumn(_RANK, checked))
        return frames

    def _frames(
        self, where: Column | None, keys: DataFrame | None, on: list[str], ranges: Column | None = None,
        keys_on: list[str] | None = None,
    ) -> list[DataFrame]:
        frames = self._file_frames()
        frames += [df.withColumn(_RANK, self._extra_rank(i)) for i, df in enumerate(self._extra)]
        out = []
        right = _broadcast_keys(keys, on, keys_on) if keys is not None and on else None
        for df in frames:
            if self.horizon is not None:
                df = df.filter(F.col(self.horizon[0]) >= F.lit(self.horizon[1]))
            if ranges is not None:
                df = df.filter(ranges)
            if where is not None:
                df = df.filter(where)
            if right is not None:
                df = (_split_semi if self.split else _null_safe_semi)(df, right, on)
            out.append(df)
        return out

    def _merge(self, frames: list[DataFrame], identity: tuple[str, ...] | None, keep_tombstones: bool) -> DataFrame:
        columns = [f.name for f in self.schema.fields]
        if not frames:
            return empty_frame(self.spark, self.schema)
        union = frames[0]
        for df in frames[1:]:
            union = union.unionByName(df)
        lone_base = len(self.layers) == 1 and not self.layers[0][1] and not self._extra
        if identity is None or lone_base:
            # append-only, or one base (no duplicate identities, no tombstones): nothing to merge
            return union.drop(_RANK) if keep_tombstones else union.filter(~F.col(DELETED)).select(*columns)
        order = Window.partitionBy(*identity) if identity else Window.partitionBy(F.lit(0))
        newest = F.row_number().over(order.orderBy(F.col(_RANK).desc(), F.col(DELETED).asc()))
        latest = union.withColumn("__lg_n", newest).filter(F.col("__lg_n") == 1).drop("__lg_n", _RANK)
        return latest if keep_tombstones else latest.filter(~F.col(DELETED)).select(*columns)

    def select(self, identity: tuple[str, ...] | None, where: Column | None = None) -> DataFrame:
        """The live rows (all of them, or those ``where`` selects; its columns must be part
        of ``identity`` so that a newer layer's row of the same identity is filtered alike)."""
        return self._merge(self._frames(where, None, []), identity, keep_tombstones=False)

    def lookup(
        self, identity: tuple[str, ...] | None, keys: DataFrame, on: list[str],
        ranges: dict[str, tuple[int, int]] | None = None, keys_on: list[str] | None = None,
    ) -> DataFrame:
        """The live rows whose ``on`` columns (any of the identity's: every layer's row of one
        identity carries the same values there, so all of them or none pass) match a row of ``keys``.
        ``ranges``: the (min, max) of some of ``on``'s columns over ``keys`` (:mod:`.key_ranges`):
        every layer is first filtered by them, which lets its scan skip row groups. ``keys_on``: the
        columns of ``keys`` that hold those values, in ``on``'s order (default: ``on`` itself)."""
        kept = {c: r for c, r in (ranges or {}).items() if c in on}
        return self._merge(self._frames(None, keys, on, key_ranges.range_filter(kept), keys_on), identity,
                           keep_tombstones=False)

    def lookup_where(self, identity: tuple[str, ...], keys: DataFrame, on: list[str]) -> DataFrame:
        """The live rows whose ``on`` columns (any columns, not only the identity's) match a row
        of ``keys``. A row may have moved out of those values in a newer layer, so the
        identities any layer holds there are found first, then resolved to their newest row."""
        if list(identity[: len(on)]) == list(on):
            return self.lookup(identity, keys, on)
        frames = self._frames(None, keys, on)
        if not frames:
            return empty_frame(self.spark, self.schema)
        ids = frames[0].select(*identity)
        for df in frames[1:]:
            ids = ids.unionByName(df.select(*identity))
        found = self.lookup(identity, ids.distinct(), list(identity))
        return _null_safe_semi(found, _broadcast_keys(keys, on), on) if on else found

    def folded(self, identity: tuple[str, ...] | None, deltas_only: bool) -> DataFrame:
        """Every layer merged into one: a new base (``deltas_only=False``: live rows only) or
        one delta standing for all the deltas (tombstones kept: the base may hold them)."""
        if deltas_only:
            kept = LayeredState(self.spark, self.schema, [lay for lay in self.layers if lay[1]], self.horizon)
            kept._extra = self._extra
            merged = kept._merge(kept._frames(None, None, []), identity, keep_tombstones=True)
            return merged.select(*[f.name for f in self.schema.fields], DELETED)
        return self._merge(self._frames(None, None, []), identity, keep_tombstones=False)
