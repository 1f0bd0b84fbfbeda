"""One cycle round on Spark: read the window's slices, run the chains, merge keyed state,
snapshot it, and stage every sink's output (the worker's half of a round).

The round runs the physical plan (:class:`~lockgate.plan.physical.ExecutionGraph`) and
nothing else: every cycle in order; at its heads the window's slices are read; then its
groups in order, each group's chains in order, each chain's operators in order (what
``lockgate explain`` prints); at its tails state is snapshotted and sink output staged.
Outputs a group materialises (read by several consumers) are persisted for the round.

State is written incrementally: a round reads from the last checkpoint only what its window
needs and writes only what it changed, as a delta layer on that checkpoint's chain (see
:mod:`lockgate.runtime.state.layers` and :mod:`lockgate.runtime.state.compaction`).

Small layers are collected to the driver and written as one Parquet file, which saves a
distributed write and its commit protocol; an empty layer writes nothing. A Parquet
sink's small output is staged the same way. :func:`driver_rows` says what "small" is.

The controller's half (commit the staged output, then write the checkpoint row) is in
:mod:`lockgate.control.scheduler`; nothing here makes a window visible to anyone.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from .. import faults
from ..checkpoint.layers import (
    BASE,
    DELTA,
    derived_manifest,
    has_state,
    horizon,
    layered_entry,
    replay_range,
    state_entries,
    table_layers,
)
from ..checkpoint.snapshots import SnapshotStore
from ..errors import CompileError, InvalidArgumentError, InvalidRecordsError
from ..logs import get_logger, log_event
from ..plan.compile import CompiledPlan
from . import round_template
from .analysis import struct_of
from .availability import slice_column
from .catchup import TAG, Span, one_pass, slices_by_arrival, tagged_head, translate_span
from .codegen import codegen_rows, round_codegen
from .context import CycleContext
from .invalid import CORRUPT, FLAG, clean, describe, every_column, header_mismatch, rule_of, timeless
from .one_job import collect_together, pack, packable, unpack
from .plan_template import TemplateError, supported
from .results import CycleResult, RestorePoint, late_sink_config
from .settings import count_setting, within
from .sinks import PARQUET_OPTIONS, driver_stageable, driver_writable, stage_sink, stage_table
from .sources import SourceSlice, SourceSpan, read_slice, read_span
from .state import driver_fold, key_ranges, warm
from .state.compaction import TableWrite, max_deltas, plan_write
from .state.layers import LayeredState, StateDelta, delta_rows, split_rows
from .state.warm import WarmBases
from .translate import translate
from .walk import OperatorStep, walk_cycles

_log = get_logger(__name__)

#: in-memory delta layers a catch-up group stacks on a state table before folding them into one
MEMORY_LAYERS = 16


#: default ``LOCKGATE_DRIVER_SNAPSHOT_ROWS``: 200,000 until 2026-12-06, when folds moved to the driver
#: (:mod:`.driver_fold`), which holds the fold in Arrow and collects only the round's delta through
#: the JVM; W6's fold at about 290,000 rows took 3-4.5 s on Spark's writer, about 1 s there
DRIVER_SNAPSHOT_ROWS = 500_000


def driver_rows(setting: str, default: int = 200_000) -> int:
    """A ``LOCKGATE_DRIVER_*_ROWS`` setting (rows; 0 turns that driver path off), read when
    a runner starts, so every job takes the environment its worker runs in.

    - ``LOCKGATE_DRIVER_SNAPSHOT_ROWS`` (:data:`DRIVER_SNAPSHOT_ROWS` by default): a state layer
      expected to hold at most this many rows (a delta: the last delta's rows or the last
      round's input rows, whichever is more; a fold: the rows of the layers it folds, plus those) is
      written from the driver as one Parquet file (a fold made there: :mod:`.driver_fold`); a
      larger one is written by the executors.
    - ``LOCKGATE_DRIVER_STAGE_ROWS``: a Parquet sink whose last round staged at most this
      many rows stages the next round from the driver (``toArrow``, one file written with
      pyarrow) instead of a Spark write.
    """
    return count_setting(setting, default, "rows", "0 turns the driver path off")


def packed(windows: list[int], rows: list[int], limit: int) -> list[list[int]]:
    """Consecutive ``windows`` in packs of at most ``limit`` rows (``rows``: each window's),
    each pack collected to the driver at once; a window of more than ``limit`` rows is in none.

    >>> packed([1, 2, 3, 4, 5], [40, 40, 30, 500, 10], 100)
    [[1, 2], [3], [5]]
    """
    packs: list[list[int]] = []
    pack: list[int] = []
    held = 0
    for w, n in zip(windows, rows, strict=True):
        if n > limit or held + n > limit:  # a window too large for any pack also ends this one
            if pack:
                packs.append(pack)
            pack, held = [], 0
        if n <= limit:
            pack.append(w)
            held += n
    if pack:
        packs.append(pack)
    return packs


def _cluster_cores(spark: SparkSession) -> int:
    """The cores the session's cluster runs tasks on (its default parallelism); 0 on Spark
    Connect, whose client has no SparkContext to ask."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return 0
    return int(spark.sparkContext.defaultParallelism)


@dataclass
class _LayerWrite:
    """What one round writes of one state table, decided before anything is computed."""

    table: str
    delta: StateDelta
    write: TableWrite
    #: the table's manifest entry at the restore point
    entry_in: dict[str, Any]
    #: the delta is counted before it is written, and written only when it holds rows
    count_first: bool
    #: the driver collects and writes it (it is expected to be small)
    on_driver: bool
    #: a fold the driver makes (:mod:`.driver_fold`): the chain's layers it folds with the round's
    #: delta, which is all the round collects; None: the fold, if any, is Spark's
    fold_layers: list[dict[str, Any]] | None = None

    @property
    def collected_rows(self) -> DataFrame:
        """What the round collects of this table when the driver writes it: the round's delta
        for a driver fold, else the rows written."""
        return delta_rows(self.delta) if self.fold_layers is not None else self.write.rows

    @property
    def nothing(self) -> bool:
        """The plan proves the delta holds no rows: nothing is written."""
        return self.count_first and self.delta.empty

    @property
    def of_delta(self) -> str | None:
        """How the rows written are made of the round's delta alone: ``"rows"`` (its upserts and
        tombstones: a delta layer), ``"upserts"`` (a table's first layer); None: a fold of the chain."""
        if self.write.kind == DELTA or self.fold_layers is not None:
            return "rows"
        if self.write.kind == BASE and self.write.rows is self.delta.upserts:
            return "upserts"
        return None


@dataclass
class _Round:
    """What one round accumulates while it runs."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    counts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)
    late_frames: dict[str, DataFrame] = field(default_factory=dict)
    #: invalid records per source (and graph operator) this round dropped
    invalid: dict[str, int] = field(default_factory=dict)
    #: records with no event time per source (they fail the round whatever the rule: no window holds them)
    timeless: dict[str, int] = field(default_factory=dict)
    #: the files each file source read, as read (what names invalid records)
    raw: dict[str, DataFrame] = field(default_factory=dict)


class CycleRunner:
    """Runs rounds of one compiled plan on one SparkSession (a Worker's engine)."""

    def __init__(self, spark: SparkSession, plan: CompiledPlan, job: str, home: str, snapshots: SnapshotStore):
        self.spark = spark
        self.plan = plan
        self.job = job
        self.home = home
        self.snapshots = snapshots
        g = plan.graph
        #: the ExecutionGraph's cycles, as every round walks them
        self._walks = walk_cycles(g, plan.execution)
        #: the operators the last round ran, in the order it ran them
        self.run_order: list[str] = []
        self._schemas = {vid: struct_of(v.schema) for vid, v in g.vertices.items()}
        self._state_schemas = {
            f"{vid}.{t}": struct_of(cols) for vid, v in g.vertices.items() for t, cols in v.state.items()
        }
        #: input rows of the last round this runner ran (None before the first)
        self._last_rows_in: int | None = None
        #: in a runner's first round, its input rows when the driver counted every source's before
        #: any Spark work (tables made on the driver, files counted by their footers); None otherwise
        self._counted_rows_in: int | None = None
        #: rows each sink staged in the last round this runner ran
        self._last_staged_rows: dict[str, int] = {}
        self.driver_snapshot_rows = driver_rows("LOCKGATE_DRIVER_SNAPSHOT_ROWS", DRIVER_SNAPSHOT_ROWS)
        self.driver_stage_rows = driver_rows("LOCKGATE_DRIVER_STAGE_ROWS")
        #: state tables and sinks whose rows the driver paths can write (known per sink after
        #: its first round: a sink's output schema is looked up once)
        self._state_on_driver = {t: driver_writable(s) for t, s in self._state_schemas.items()}
        #: small folds are made on the driver from the layer files and the round's delta
        self._driver_folds = driver_fold.enabled()
        self._sink_on_driver: dict[str, bool] = {}
        #: deltas a state table's chain may hold before a round folds it (LOCKGATE_STATE_MAX_DELTAS)
        self.max_deltas = max_deltas()
        #: rows of the last delta layer each state table wrote (a fold's layer holds the chain, not
        #: one round's changes: the round after a fold is sized by the delta before it)
        self._last_delta_rows: dict[str, int] = {}
        #: the state the current round started from (its layers), per table
        self._state_in: dict[str, LayeredState] = {}
        #: the tables' bases kept in Spark's cache between rounds (None: LOCKGATE_WARM_STATE=0)
        self._warm = WarmBases.of(spark) if warm.enabled() else None
        #: a table with a warm base and this many rows is looked up in two joins (LOCKGATE_STATE_SPLIT_ROWS)
        self._split_rows = split_rows()
        #: the largest round run without code generation (LOCKGATE_CODEGEN_ROWS)
        self.codegen_rows = codegen_rows()
        #: records with no event time a catch-up group's sources hold (see _span_counts)
        self._timeless: dict[str, int] = {}
        #: the restore point of the round (or group) running: where its sources stood before it
        self._restore: RestorePoint | None = None
        #: the session's spark.sql.execution.arrow.useLargeVarTypes (read at the first collect of tails)
        self._large_var_types: bool | None = None
        #: rounds are bound from templates kept per shape (:mod:`.round_template`)
        self._templates_on = self._templatable()
        #: a round's shape -> its template (None: that shape cannot be kept)
        self._round_templates: dict[tuple[Any, ...], round_template.RoundTemplate | None] = {}
        #: a round's shape -> the rounds of it built step by step so far; its template is kept
        #: from the round after ``_template_after`` of them
        self._shape_rounds: dict[tuple[Any, ...], int] = {}
        self._template_after = round_template.build_after() if self._templates_on else 0
        #: the round running, when bound from its template: (template, inputs, bound values)
        self._bound: tuple[round_template.RoundTemplate, dict[str, DataFrame], dict[str, int]] | None = None

    def _rows_in_estimate(self) -> int | None:
        """Input rows the round's tails are sized by: the last round's, or in a runner's first
        round the round's own when the driver counted them (None: unknown)."""
        return self._last_rows_in if self._last_rows_in is not None else self._counted_rows_in

    def _layer_estimate(self, table: str, write: TableWrite) -> int | None:
        """Rows the layer about to be written may hold; None when unknown (then Spark writes it)."""
        last = self._last_delta_rows.get(table)
        if last is None and self._counted_rows_in is not None:
            last = 0  # a runner's first round: its delta is sized by the window's counted input
        rows_in = self._rows_in_estimate()
        if last is None or rows_in is None:
            return None
        pending = max(last, rows_in)
        state = self._state_in.get(table)
        chain = 0 if state is None else state.rows
        if write.kind == "delta":
            return pending
        if write.kind == "folded":
            return chain - sum(int(layer["rows"]) for layer in write.kept) + pending
        return chain + pending

    def _plan_layer(self, table: str, delta: StateDelta, restore: RestorePoint | None) -> _LayerWrite:
        """What the round writes of one state table (a delta layer, or a fold of its chain:
        :func:`~lockgate.runtime.state.compaction.plan_write`), and whether the driver writes it."""
        entry_in = (restore.snapshot_manifest.get(table) or {}) if restore is not None else {}
        previous = table_layers(restore.snapshot_uri if restore else None, entry_in)
        state = self._state_in.get(table) or LayeredState(self.spark, self._state_schemas[table], [], None)
        write = plan_write(previous, state, delta, self.max_deltas, self._last_delta_rows.get(table))
        only_delta = write.kind == DELTA or (write.kind == BASE and not previous)
        count_first = delta.count_first and only_delta and delta.deletes is None
        estimate = self._layer_estimate(table, write)
        on_driver = self._state_on_driver[table] and within(estimate, self.driver_snapshot_rows)
        fold_layers = None
        if on_driver and not only_delta and state.in_memory == 0 and self._driver_folds \
                and driver_fold.foldable(delta.identity, self._state_schemas[table]):
            fold_layers = [layer for layer in previous if layer not in write.kept]
        return _LayerWrite(table, delta, write, entry_in, count_first, on_driver, fold_layers)

    def _snapshot(
        self, snapshot_uri: str, layer: _LayerWrite, timings: dict[str, float], collected: pa.Table | None = None,
    ) -> dict[str, Any]:
        """Write what the round changed in one state table (``collected``: its rows, already
        on the driver); returns its manifest entry, which names every layer of the table's
        chain. Adds the time spent persisting it to ``timings["snapshot_io"]``. A delta marked
        ``count_first`` that holds no rows writes nothing (when the write would be that delta
        alone, not a fold)."""
        table, write = layer.table, layer.write
        delta_count = None
        if layer.fold_layers is not None:
            delta = delta_rows(layer.delta).toArrow() if collected is None else collected
            delta_count = delta.num_rows
            t = time.perf_counter()
            collected = driver_fold.fold(layer.fold_layers, table, delta, layer.delta.identity,
                                         layer.delta.expire_below or horizon(layer.entry_in), write.kind != BASE)
            timings["snapshot_io"] = timings.get("snapshot_io", 0.0) + time.perf_counter() - t
        if layer.nothing or (collected is None and layer.count_first and layer.delta.upserts.count() == 0):
            written: dict[str, Any] = {"files": [], "rows": 0}
        else:
            written = self._write_layer(snapshot_uri, table, write.rows, layer.on_driver, timings, collected,
                                        layer.delta.order)
        if layer.fold_layers is not None:
            self._last_delta_rows[table] = int(delta_count or 0)
        elif layer.of_delta is not None:
            self._last_delta_rows[table] = int(written["rows"])
        if write.kind != DELTA and layer.entry_in:
            log_event(_log, "state_folded", logging.DEBUG, job=self.job, table=table, into=write.kind,
                      rows=int(written["rows"]), folded_by="driver" if layer.fold_layers is not None else "spark",
                      written_by="driver" if layer.on_driver else "spark")
        layers = list(write.kept)
        if written["rows"] > 0:
            layers.append({"snapshot": snapshot_uri, "kind": write.layer_kind, **written})
        return {**layered_entry(layers, layer.delta.expire_below or horizon(layer.entry_in)), "written": write.kind,
                "identity": None if layer.delta.identity is None else list(layer.delta.identity)}

    def _carry_unchanged(self, manifest: dict[str, Any], restore: RestorePoint | None) -> dict[str, Any]:
        """``manifest`` with every state table the round did not write carried over from the
        restore point as it was (its layers, named explicitly): a window that changes nothing in
        an operator's state (no records, only late ones, an operator with nothing to do) keeps
        that state whole. The checkpoint of such a window restores the state it was given."""
        if restore is None:
            return manifest
        out = dict(manifest)
        for table, entry in state_entries(restore.snapshot_manifest).items():
            if table in out or table not in self._state_schemas:
                continue
            layers = table_layers(restore.snapshot_uri, entry)
            if layers:
                out[table] = {**layered_entry(layers, horizon(entry)), "written": "carried",
                              "identity": entry.get("identity")}
        return out

    def _write_layer(
        self, snapshot_uri: str, table: str, df: DataFrame, on_driver: bool, timings: dict[str, float],
        collected: pa.Table | None = None, order: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """Write one layer (from the driver when it is expected to be small; ``collected``: its
        rows, already there); returns its ``{"files", "rows"}``. On the driver path the time is
        the file write alone (the collect computes the round, which the sinks then reuse); on
        Spark's the whole write. Its rows are sorted by ``order`` (the columns the table is looked
        up by) in small row groups, which a lookup by key ranges skips (:mod:`.key_ranges`)."""
        if on_driver:
            if collected is None:
                collected = df.toArrow()
            t = time.perf_counter()
            entry = self.snapshots.write_table(snapshot_uri, table, collected,
                                               key_ranges.sort_columns(order, collected.schema),
                                               key_ranges.LAYER_ROW_GROUP_ROWS)
        else:
            t = time.perf_counter()
            columns = key_ranges.sort_columns(order, df.schema)
            try:
                # microsecond UTC timestamps, as the driver path writes them: read_state gives one
                # type whichever path wrote a layer (Spark's INT96 default reads as naive nanoseconds)
                (df.sortWithinPartitions(*columns) if columns else df).write.options(**PARQUET_OPTIONS).option(
                    "parquet.block.size", str(key_ranges.LAYER_ROW_GROUP_BYTES)).mode("overwrite").parquet(
                    self.snapshots.operator_uri(snapshot_uri, table))
            except Exception as exc:  # a full disk or a refused folder: one clear error
                err = self.snapshots.write_error(exc, snapshot_uri, table)
                if err is None:
                    raise
                raise err from exc
            entry = self.snapshots.operator_manifest(snapshot_uri, table)
        timings["snapshot_io"] = timings.get("snapshot_io", 0.0) + time.perf_counter() - t
        return entry

    def _collect_tails(
        self, layers: list[_LayerWrite], sinks: list[tuple[str, DataFrame, dict[str, Any]]]
    ) -> tuple[dict[str, pa.Table], dict[str, pa.Table]]:
        """The round's tails the driver writes (small state layers, small sinks' output),
        collected by one Spark action when there are several (:mod:`lockgate.runtime.one_job`):
        the first collect would compute the round, and each further one read it back. Returns
        their rows by state table and by sink (both empty when fewer than two go)."""
        chosen = [layer for layer in layers if layer.on_driver and not layer.nothing]
        outputs = [(name, df) for name, df, _cfg in sinks if self._stages_small(name)]
        if len(chosen) + len(outputs) < 2:
            return {}, {}
        if self._large_var_types is None:
            self._large_var_types = self.spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
        # asked every round (a few Py4J calls): executors may still be registering at the first
        # round, and a cluster with dynamic allocation grows and shrinks
        cores = _cluster_cores(self.spark)
        collected = None
        if self._bound is not None and all(layer.of_delta is not None for layer in chosen):
            collected = self._collect_bound([(layer.table, str(layer.of_delta)) for layer in chosen],
                                            [n for n, _ in outputs], cores)
        if collected is None:
            # built only here: a bound round's tails come from its template
            frames = [layer.collected_rows for layer in chosen] + [df for _, df in outputs]
            if not all(packable(df) for df in frames):
                return {}, {}
            collected = collect_together(frames, self._large_var_types, tasks=cores or None)
        split = len(chosen)
        return ({layer.table: rows for layer, rows in zip(chosen, collected[:split], strict=True)},
                {n: rows for (n, _), rows in zip(outputs, collected[split:], strict=True)})

    def _collect_bound(
        self, tables: list[tuple[str, str]], outputs: list[str], cores: int
    ) -> list[pa.Table] | None:
        """The tails of a round bound from its template (each state table's delta, as
        ``(table, of_delta)``: :attr:`_LayerWrite.of_delta`; each sink's output), collected by one
        action whose union is bound from the template too (built once per choice of tails); None
        when the template cannot keep it."""
        assert self._bound is not None
        template, inputs, values = self._bound

        def parts(built: round_template.RoundFrames) -> list[DataFrame]:
            by_sink = {name: df for name, df, _cfg in built.sinks}
            rows = [delta_rows(built.state_out[t]) if form == "rows" else built.state_out[t].upserts
                    for t, form in tables]
            return rows + [by_sink[n] for n in outputs]

        def make(frames: list[DataFrame]) -> DataFrame:
            if not all(packable(df) for df in frames):
                raise TemplateError("tails with duplicate column names are collected one by one")
            return pack(frames, tasks=cores or None)

        try:
            union, schemas = template.derived(("tails", tuple(tables), tuple(outputs), cores), parts, make,
                                              inputs, values)
        except (TemplateError, AnalysisException, Py4JJavaError):
            return None
        return unpack(union.toArrow(), schemas, bool(self._large_var_types))

    def _stages_small(self, name: str) -> bool:
        """Whether sink ``name`` stages its next round from the driver: its last round was
        small (in a runner's first round: the round's input, when the driver counted it; when
        not, the first round goes through Spark, which tells the size) and its columns are of
        types the driver writes as Spark does."""
        last = self._last_staged_rows.get(name, self._counted_rows_in)
        return within(last, self.driver_stage_rows) and bool(self._sink_on_driver.get(name))

    def _counted_before(self, round_: _Round) -> int | None:
        """The round's input rows when the driver counted every source's while the round was
        built (no source counted by a Spark metric); None otherwise."""
        heads = [head.vertex.id for walk in self._walks for head in walk.heads]
        if round_.observations or not heads or any(vid not in round_.counts for vid in heads):
            return None
        return sum(int(round_.counts[vid][0]) for vid in heads)

    def _stage(
        self, name: str, df: DataFrame, sink: dict[str, Any], window: int, attempt: int,
        collected: pa.Table | None = None,
    ) -> dict[str, Any]:
        """Stage one sink's output (:meth:`_stages_small`: from the driver; ``collected``: its
        rows, already there)."""
        where = dict(job=self.job, sink_name=name, window=window, attempt=attempt, home=self.home)
        if collected is not None or self._stages_small(name):
            staged = stage_table(df.toArrow() if collected is None else collected, sink, **where)
        else:
            staged = stage_sink(df, sink, **where)
            self._stages_on_driver(name, sink, df)
        self._last_staged_rows[name] = int(staged["rows"])
        return staged

    def _stages_on_driver(self, name: str, sink: dict[str, Any], df: DataFrame, *internal: str) -> bool:
        """Whether sink ``name`` can be staged from the driver (``df``: its output, with the
        ``internal`` columns dropped); its schema is looked up once per sink and runner (no
        file stores zero columns)."""
        if name not in self._sink_on_driver:
            schema = df.drop(*internal).schema if internal else df.schema
            self._sink_on_driver[name] = driver_stageable(sink) and bool(schema.fields) and driver_writable(schema)
        return self._sink_on_driver[name]

    def bounds(self, window: int) -> tuple[int, int]:
        """``(start, end)`` of cycle window ``window`` in microseconds, end exclusive."""
        return self.plan.graph.clock.bounds_us(window)

    def _load_state(self, restore: RestorePoint | None, window: int) -> dict[str, LayeredState]:
        """The state at ``restore`` for the round of ``window``: each table's layers, verified
        against the manifest (the files are read only where an operator asks), each base held
        warm (:mod:`.state.warm`)."""
        if restore is None or not has_state(restore.snapshot_uri, restore.snapshot_manifest):
            if self._warm is not None:
                self._warm.release(self.job)
            return {}
        self.snapshots.verify(restore.snapshot_uri, restore.snapshot_manifest)
        state = {}
        for table, schema in self._state_schemas.items():
            entry = restore.snapshot_manifest.get(table)
            if entry is None:
                continue
            layers = table_layers(restore.snapshot_uri, entry)
            folders = [(self.snapshots.operator_uri(layer["snapshot"], table), layer["kind"] == DELTA)
                       for layer in layers]
            state[table] = LayeredState(self.spark, schema, folders, horizon(entry),
                                        rows=sum(int(layer["rows"]) for layer in layers))
            kept = self._warm.hold(self.job, table, folders[0][0], layers[0], schema) \
                if self._warm is not None and folders and not folders[0][1] else ""
            if kept == "swapped":
                faults.maybe_crash("warm_swapped", window)
            state[table].split = kept == "kept" and state[table].rows >= self._split_rows
        if self._warm is not None:  # a table whose chain lost its base (or its state) holds none
            self._warm.release(self.job, {t for t in self._state_schemas
                                          if t not in state or not state[t].layers or state[t].layers[0][1]})
        return state

    @staticmethod
    def _count_on_driver(
        table: pa.Table | None, cfg: dict[str, Any], watermark_us: int, by_arrival: bool
    ) -> tuple[int, int]:
        """(rows, late rows) of a slice produced on the driver, without a Spark job."""
        if table is None or table.num_rows == 0:
            return 0, 0
        if not by_arrival:
            return table.num_rows, 0
        ts = pc.cast(table[cfg["event_time"]], pa.int64())
        return table.num_rows, int(pc.sum(pc.less(ts, watermark_us)).as_py() or 0)

    def _slice(self, ctx: CycleContext, head: OperatorStep) -> SourceSlice:
        """The window's slice of source ``head``, as read for one round."""
        v = head.vertex
        return read_slice(self.spark, v.config["source"], self._schemas[v.id], ctx.start_us, ctx.end_us,
                          self._position_before(v.id, ctx.window))

    def _read_head(
        self, ctx: CycleContext, head: OperatorStep, round_: _Round, span: SourceSpan | None = None,
        piece: SourceSlice | None = None,
    ) -> None:
        """Read the window's slice of source ``head`` (from ``span`` when a catch-up group
        read it, which then counts its rows; ``piece``: already read): drop (or set aside for
        the late sink) the records below the watermark, and count rows without an extra Spark job."""
        v = head.vertex
        cfg = v.config["source"]
        if span is not None:
            piece = span.slice(ctx.start_us, ctx.end_us)
        elif piece is None:
            piece = self._slice(ctx, head)
        round_.positions[v.id] = piece.position
        if piece.invalid:
            round_.invalid[v.id] = piece.invalid
        if piece.raw is not None:
            round_.raw[v.id] = piece.raw
        df = piece.df
        ctx.sparse = ctx.sparse or piece.no_records
        by_arrival = slices_by_arrival(cfg)
        late = F.col(cfg["event_time"]) < F.timestamp_micros(F.lit(ctx.prev_watermark_us))
        flagged = FLAG in df.columns
        if piece.table is not None or piece.empty:
            round_.counts[v.id] = self._count_on_driver(piece.table, cfg, ctx.prev_watermark_us, by_arrival)
        elif piece.rows is not None and not by_arrival and not flagged:
            round_.counts[v.id] = (piece.rows, 0)  # the footers counted them: no metrics in the plan
        elif span is not None:
            pass  # counted for the whole group by _span_counts
        else:
            obs = Observation(f"lg_{v.id}_{uuid.uuid4().hex[:8]}")
            valid = ~F.col(FLAG) if flagged else F.lit(True)
            metrics = [F.coalesce(F.sum(valid.cast("long")), F.lit(0)).alias("rows")]
            if by_arrival:
                metrics.append(F.coalesce(F.sum((late & valid).cast("long")), F.lit(0)).alias("late"))
            if flagged:
                metrics.append(F.coalesce(F.sum(F.col(FLAG).cast("long")), F.lit(0)).alias("invalid"))
                metrics.append(F.coalesce(F.sum(timeless(df, slice_column(cfg)).cast("long")), F.lit(0))
                               .alias("timeless"))
                if CORRUPT in df.columns:
                    metrics.append(every_column(self._schemas[v.id]).alias("parsed"))
            df = df.observe(obs, *metrics)
            round_.observations[v.id] = obs
        df = clean(df)
        if by_arrival:
            if not isinstance(self.plan.graph.watermark["late"], str):
                df = ctx.cache(df.withColumn("__late", late))
                round_.late_frames[v.id] = df.filter(F.col("__late")).drop("__late")
                df = df.filter(~F.col("__late")).drop("__late")
            else:
                df = df.filter(~late)
        round_.frames[v.id] = ctx.cache(df) if head.materialize else df
        if piece.key_ranges and key_ranges.enabled():
            # a template round ranges its keys by parameters, bound to each round's ranges
            ctx.key_ranges[v.id] = piece.key_ranges if not ctx.template else {
                c: (ctx.sentinels[key_ranges.parameter(v.id, c, "lo")], ctx.sentinels[key_ranges.parameter(v.id, c, "hi")])
                for c in piece.key_ranges}

    def _position_before(self, source: str, window: int) -> dict[str, Any] | None:
        """Where ``source`` stood after ``window - 1``, when the round's restore point is that
        window (a message log reads on from there); None otherwise."""
        r = self._restore
        return r.positions.get(source) if r is not None and r.window == window - 1 else None

    def _walk(
        self, ctx: CycleContext, round_: _Round, spans: dict[str, SourceSpan] | None = None,
        pieces: dict[str, SourceSlice] | None = None,
    ) -> tuple[list[tuple[str, DataFrame, dict[str, Any]]], list[str], float, float]:
        """Build one window's DataFrames along the ExecutionGraph (``pieces``: the sources' slices,
        already read): returns its sinks' output ``(name, frame, sink)``, the state tables its tails
        produced, and the seconds spent reading and planning."""
        g = self.plan.graph
        ran: list[str] = []
        read_s = plan_s = 0.0
        sinks: list[tuple[str, DataFrame, dict[str, Any]]] = []
        state_tables: list[str] = []
        for walk in self._walks:
            t = time.perf_counter()
            for head in walk.heads:  # the cycle's head: read the window's slices
                self._read_head(ctx, head, round_, None if spans is None else spans[head.vertex.id],
                                None if pieces is None else pieces[head.vertex.id])
            read_s += time.perf_counter() - t
            t = time.perf_counter()
            frames = round_.frames
            for op in walk.operators:  # groups, chains, operators: the ExecutionGraph's order
                ran.append(op.vertex.id)
                if op.head:
                    continue  # its slice was read at the head
                out = translate(ctx, g, op.vertex, [frames[i] for i in op.inputs], self.plan.fns, op.iteration)
                frames[op.vertex.id] = ctx.cache(out) if op.materialize else out
            # the cycle's tail: its sinks' output and its stateful operators' state
            sinks += [(vid, frames[vid], cfg) for vid, cfg in walk.sinks]
            state_tables += [t for t in walk.state_tables if t in ctx.state_out]
            plan_s += time.perf_counter() - t
        self.run_order = ran
        late_cfg = g.watermark["late"]
        for src, df in round_.late_frames.items():
            sinks.append((f"late.{src}", df, late_sink_config(late_cfg["sink"], src)))
        if len(state_tables) != len(ctx.state_out):
            stray = ", ".join(sorted(set(ctx.state_out) - set(state_tables)))
            raise CompileError(f"state {stray} was produced by no tail of the execution graph's cycles")
        return sinks, state_tables, read_s, plan_s

    def _templatable(self) -> bool:
        """Whether this runner's rounds may be kept as templates (:mod:`.round_template`)."""
        if not round_template.enabled() or not supported(self.spark):
            return False
        for v in self.plan.graph.vertices.values():
            if v.op in round_template.UNTEMPLATED or (v.op == "running_aggregate" and v.config.get("over_updates")):
                return False
        return not any(op.iteration is not None for walk in self._walks for op in walk.operators)

    @staticmethod
    def _piece_shape(head: OperatorStep, piece: SourceSlice) -> str | None:
        """How a source's slice enters a round template: no records, a read of Parquet files that
        hold exactly the window's records (counted by their footers), or rows made on the driver
        (the generator, a database); None: it cannot."""
        cfg = head.vertex.config["source"]
        if piece.empty:
            return "empty"
        ranged = ",".join(sorted(piece.key_ranges)) if key_ranges.enabled() else ""
        if slices_by_arrival(cfg):
            return None  # its late records are counted by an observation and may go to a late sink
        if (cfg["kind"] == "file" and cfg.get("format") == "parquet" and piece.raw is not None
                and piece.df is piece.raw and piece.rows is not None):
            return f"files|{ranged}"
        if piece.table is not None and not piece.invalid:
            return f"rows|{ranged}"
        return None

    @staticmethod
    def _range_values(pieces: dict[str, SourceSlice]) -> dict[str, int]:
        """The key-range parameters of a round's template (:mod:`.key_ranges`), by the round's pieces."""
        if not key_ranges.enabled():
            return {}
        return {key_ranges.parameter(vid, c, end): value
                for vid, piece in sorted(pieces.items()) if not piece.empty
                for c, rng in sorted(piece.key_ranges.items()) for end, value in zip(("lo", "hi"), rng, strict=True)}

    def _template_inputs(
        self, pieces: dict[str, SourceSlice], state: dict[str, LayeredState]
    ) -> dict[str, DataFrame]:
        """A round's file reads, by the names its template gives them."""
        inputs = {f"source:{vid}": piece.df if piece.raw is None else piece.raw
                  for vid, piece in pieces.items() if not piece.empty}
        for table, layers in state.items():
            inputs.update({f"state:{table}:{name}": df for name, df in layers.reads().items()})
        return inputs  # type: ignore[return-value]

    def _keep_round(
        self, ctx: CycleContext, pieces: dict[str, SourceSlice], state: dict[str, LayeredState]
    ) -> round_template.RoundTemplate | None:
        """The round of ``ctx`` built with sentinel bounds and kept as a template; None (logged
        once per shape) when it cannot be kept."""
        sentinels = round_template.parameters([t for t, s in state.items() if s.horizon is not None],
                                              list(self._range_values(pieces)))
        built_ctx = CycleContext(
            self.spark, ctx.window, sentinels["start_us"], sentinels["end_us"],
            prev_watermark_us=sentinels["prev_watermark_us"], watermark_us=sentinels["watermark_us"],
            parallelism=ctx.parallelism, template=True, sentinels=sentinels,
            state_in={t: s.with_horizon_value(sentinels[f"horizon:{t}"]) if s.horizon is not None else s
                      for t, s in state.items()},
        )
        built_round = _Round()
        try:
            sinks, tables, _read_s, _plan_s = self._walk(built_ctx, built_round, pieces=pieces)
            if built_round.observations or built_round.late_frames:
                raise TemplateError("a round that observes metrics or sets late records aside has no template")
            built = round_template.RoundFrames(sinks, dict(built_ctx.state_out), tables, list(built_ctx.cached))
            return round_template.RoundTemplate.of_round(
                self.spark, built, self._template_inputs(pieces, state), sentinels, self.run_order)
        except (TemplateError, AnalysisException, Py4JJavaError) as exc:
            log_event(_log, "round_template_refused", job=self.job, window=ctx.window,
                      reason=str(exc).splitlines()[0][:300])
            return None

    def _bound_round(
        self, ctx: CycleContext, round_: _Round, pieces: dict[str, SourceSlice]
    ) -> tuple[list[tuple[str, DataFrame, dict[str, Any]]], list[str]] | None:
        """The round's frames bound from the template of its shape (kept now when the rounds of
        that shape built step by step so far number ``LOCKGATE_ROUND_TEMPLATE_AFTER``); None when
        it is built step by step (its shape is too new yet, or its round cannot be kept)."""
        shapes = []
        for walk in self._walks:
            for head in walk.heads:
                shape = self._piece_shape(head, pieces[head.vertex.id])
                if shape is None:
                    return None
                shapes.append((head.vertex.id, shape))
        state = {t: s for t, s in sorted(ctx.state_in.items()) if not s.empty}
        if not all(s.templatable for s in state.values()):
            return None
        key = (tuple(shapes), tuple((t, s.shape()) for t, s in state.items()))
        if key not in self._round_templates:
            seen = self._shape_rounds[key] = self._shape_rounds.get(key, 0) + 1
            if seen <= self._template_after:
                return None  # built step by step: too few rounds of this shape yet to pay for a template
            self._round_templates[key] = self._keep_round(ctx, pieces, state)
        template = self._round_templates[key]
        if template is None:
            return None
        values = {b: getattr(ctx, b) for b in round_template.BOUNDS}
        values.update({f"horizon:{t}": s.horizon[1] for t, s in state.items() if s.horizon is not None})
        values.update(self._range_values(pieces))
        inputs = self._template_inputs(pieces, state)
        try:
            built = template.bind(inputs, values, ctx.cache)
        except TemplateError:
            return None  # e.g. rows too many for a LocalRelation this round: built step by step
        self._bound = (template, inputs, values)
        ctx.state_out.update(built.state_out)
        for vid, piece in pieces.items():
            round_.positions[vid] = piece.position
            if piece.raw is not None:
                round_.raw[vid] = piece.raw
            if piece.table is not None or piece.empty:
                round_.counts[vid] = (0 if piece.table is None else piece.table.num_rows, 0)
            else:
                round_.counts[vid] = (int(piece.rows or 0), 0)
        self.run_order = list(template.run_order)
        return built.sinks, built.state_tables

    def _context(self, window: int, state_in: dict[str, LayeredState]) -> CycleContext:
        g = self.plan.graph
        start, end = self.bounds(window)
        lateness = g.watermark["lateness_us"]
        return CycleContext(
            self.spark,
            window,
            start,
            end,
            prev_watermark_us=start - lateness,
            watermark_us=end - lateness,
            parallelism=max(v.parallelism for v in g.vertices.values()),
            state_in=state_in,
            iteration_folders=lambda op: self.snapshots.iteration_uri(self.job, op, window),
        )

    def run(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        """Process cycle window ``window``; returns the staged output and the new snapshot.

        From a derived checkpoint (inside an earlier catch-up group) the state is first
        recomputed by replaying the group's windows with sinks muted (:meth:`run_group`)."""
        self._restore = restore
        if restore is not None and replay_range(restore.snapshot_manifest) is not None:
            return self.run_group([window], [attempt], restore)[0]
        with round_codegen(self.spark, within(self._expected_rows(restore), self.codegen_rows)):
            return self._run_window(window, attempt, restore)

    def _expected_rows(self, restore: RestorePoint | None) -> int | None:
        """Rows the next round may touch: the last round's input rows plus every row of the
        state layers at ``restore`` (None before this runner's first round)."""
        if self._last_rows_in is None:
            return None
        state_rows = 0
        if restore is not None:
            for entry in state_entries(restore.snapshot_manifest).values():
                state_rows += sum(int(layer.get("rows", 0)) for layer in table_layers(restore.snapshot_uri, entry))
        return self._last_rows_in + state_rows

    def _run_window(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        state_in = self._state_in = self._load_state(restore, window)
        timings["state_load"] = time.perf_counter() - t0
        ctx = self._context(window, state_in)
        round_ = _Round()
        try:
            bound = pieces = None
            read_s = plan_s = 0.0
            if self._templates_on:
                t1 = time.perf_counter()
                pieces = {head.vertex.id: self._slice(ctx, head) for walk in self._walks for head in walk.heads}
                # a round bound from its template holds its frames through ctx.cache as well
                ctx.sparse = any(piece.no_records for piece in pieces.values())
                read_s = time.perf_counter() - t1
                bound = self._bound_round(ctx, round_, pieces)
                plan_s = time.perf_counter() - t1 - read_s
            if bound is not None:
                sinks, state_tables = bound
                timings["template_bind"] = plan_s  # present only when the round was bound from its template
            else:
                sinks, state_tables, walk_read_s, walk_plan_s = self._walk(ctx, round_, pieces=pieces)
                read_s += walk_read_s
                plan_s += walk_plan_s
            timings["read"] = timings["state_load"] + read_s  # from the round's start, as it always was
            timings["plan"] = plan_s
            if ctx.supersteps:  # the iteration cycles' supersteps (part of plan: they run as it walks)
                timings["iterate"] = sum(s["elapsed_ms"] for s in ctx.supersteps if not s["resumed"]) / 1000

            # snapshots first: they compute the round's cached state the sinks then reuse
            t2 = time.perf_counter()
            if self._last_rows_in is None:
                # a runner's first round sizes its tails by its input, when the driver counted it
                self._counted_rows_in = self._counted_before(round_)
                if self._counted_rows_in is not None:
                    for name, df, sink_cfg in sinks:
                        self._stages_on_driver(name, sink_cfg, df)
            snapshot_uri = None
            manifest: dict[str, Any] = {}
            layers = [self._plan_layer(table, ctx.state_out[table], restore) for table in state_tables]
            tables_rows, outputs_rows = self._collect_tails(layers, sinks)
            if state_tables:
                snapshot_uri = self.snapshots.snapshot_uri(self.job, window, attempt)
                for layer in layers:
                    manifest[layer.table] = self._snapshot(snapshot_uri, layer, timings, tables_rows.get(layer.table))
            manifest = self._carry_unchanged(manifest, restore)
            timings["snapshot"] = time.perf_counter() - t2

            t3 = time.perf_counter()
            staged = {}
            for name, df, sink_cfg in sinks:
                staged[name] = self._stage(name, df, sink_cfg, window, attempt, outputs_rows.get(name))
            timings["stage"] = time.perf_counter() - t3
            timings["write"] = time.perf_counter() - t2
            counts = round_.counts
            for vid, obs in round_.observations.items():
                m = obs.get
                counts[vid] = (int(m.get("rows") or 0), int(m.get("late") or 0))
                if m.get("invalid"):
                    round_.invalid[vid] = int(m["invalid"])
                if m.get("timeless"):
                    round_.timeless[vid] = int(m["timeless"])
            round_.invalid.update(ctx.invalid)
            self._check_invalid(round_)
            rows_in = sum(c[0] for c in counts.values())
            late_rows = sum(c[1] for c in counts.values())
            self._last_rows_in = rows_in
        except Exception as exc:
            self._raise_data_error(exc)
            raise
        finally:
            self._counted_rows_in = None
            self._bound = None
            ctx.release()
        rows_out = sum(int(s.get("rows", 0)) for n, s in staged.items() if not n.startswith("late."))
        return CycleResult(
            window=window,
            attempt=attempt,
            staged=staged,
            snapshot_uri=snapshot_uri,
            snapshot_manifest=manifest,
            positions=round_.positions,
            rows_in=rows_in,
            rows_out=rows_out,
            late_rows=late_rows,
            invalid_rows=sum(round_.invalid.values()),
            timings={k: round(v * 1000, 1) for k, v in timings.items()},
            supersteps=list(ctx.supersteps),
        )

    def _raise_data_error(self, exc: Exception) -> None:
        """Raise the one-line error of a failure the sources' data caused (a CSV file without
        the header its source expects), if ``exc`` is one; return otherwise."""
        if isinstance(exc, InvalidRecordsError):
            return
        csv_sources = {vid: v.config["source"] for vid, v in self.plan.graph.vertices.items()
                       if v.op == "source" and v.config["source"].get("format") == "csv"}
        mapped = header_mismatch(exc, csv_sources) if csv_sources else None
        if mapped is not None:
            raise mapped from exc

    def _check_invalid(self, round_: _Round) -> None:
        """Fail the round (before anything of it is committed) when a source or graph operator
        whose rule is ``invalid="fail"`` met invalid records; the others' are counted."""
        g = self.plan.graph
        for vid, count in round_.timeless.items():
            if count > 0 and vid in round_.raw:
                cfg = g.vertices[vid].config["source"]
                raise describe(vid, cfg, self._schemas[vid], round_.raw[vid], count, slice_column(cfg),
                               no_time=True)
        for vid, count in round_.invalid.items():
            if count <= 0:
                continue
            v = g.vertices[vid]
            if v.op == "source":
                cfg = v.config["source"]
                if rule_of(cfg) == "fail" and vid in round_.raw:
                    raise describe(vid, cfg, self._schemas[vid], round_.raw[vid], count, slice_column(cfg))
            elif rule_of(v.config) == "fail":  # graph operators raise their own error as they run
                raise InvalidRecordsError(f"operator '{vid}': {count} invalid records", source=vid, count=count)


    # -- catch-up groups -------------------------------------------------------------------
    def _span_counts(
        self, spans: dict[str, SourceSpan], windows: list[int], include_driver: bool = False
    ) -> dict[int, dict[str, tuple[int, ...]]]:
        """(rows, late rows[, invalid rows]) per window of every file span (and of the driver's,
        when ``include_driver``), in one aggregate per source."""
        clock = self.plan.graph.clock
        lateness = self.plan.graph.watermark["lateness_us"]
        out: dict[int, dict[str, tuple[int, ...]]] = {w: {} for w in windows}
        self._timeless = {}
        for vid, span in spans.items():
            if span.df is None or (span.on_driver and not include_driver):
                continue
            footers = span.footer_counts(clock.window_at_us)
            if footers is not None:  # one file per window, say: no scan needed
                for w, n in footers.items():
                    if w in out:
                        out[w][vid] = (n, 0)
                continue
            cfg = span.cfg
            w = F.floor((F.unix_micros(F.col(slice_column(cfg))) - F.lit(clock.origin_us)) / F.lit(clock.size_us))
            flagged = FLAG in span.df.columns
            valid = ~F.col(FLAG) if flagged else F.lit(True)
            if slices_by_arrival(cfg):
                prev_wm = w * F.lit(clock.size_us) + F.lit(clock.origin_us - lateness)
                late = ((F.unix_micros(F.col(cfg["event_time"])) < prev_wm) & valid).cast("long")
            else:
                late = F.lit(0).cast("long")
            invalid = F.col(FLAG).cast("long") if flagged else F.lit(0).cast("long")
            no_time = timeless(span.df, slice_column(cfg)).cast("long") if flagged else F.lit(0).cast("long")
            parsed = [every_column(self._schemas[vid]).alias("parsed")] if CORRUPT in span.df.columns else []
            rows = span.df.groupBy(w.cast("long").alias("w")).agg(
                F.coalesce(F.sum(valid.cast("long")), F.lit(0)).alias("rows"),
                F.coalesce(F.sum(late), F.lit(0)).alias("late"), F.coalesce(F.sum(invalid), F.lit(0)).alias("invalid"),
                F.coalesce(F.sum(no_time), F.lit(0)).alias("timeless"), *parsed,
            ).collect()
            for r in rows:
                if r["w"] is None:
                    # lines whose time did not parse are counted by every round reading their file;
                    # records that parsed with no time fail the group (no window holds them)
                    if r["timeless"]:
                        self._timeless[vid] = int(r["timeless"])
                    for w_id in windows:
                        rows_, late_, invalid_ = out[w_id].get(vid, (0, 0, 0))
                        out[w_id][vid] = (rows_, late_, invalid_ + int(r["invalid"]) - int(r["timeless"]))
                    continue
                w_id = int(r["w"])
                if w_id in out:
                    rows_, late_, invalid_ = out[w_id].get(vid, (0, 0, 0))
                    out[w_id][vid] = (rows_ + int(r["rows"]), late_ + int(r["late"]), invalid_ + int(r["invalid"]))
        return out

    def _group_invalid(self, rounds: list[_Round]) -> None:
        """Each round's invalid records from its counts (a third figure where a source has
        them); fails the group, before anything is committed, under ``invalid="fail"``."""
        for round_ in rounds:
            for vid, c in round_.counts.items():
                if len(c) > 2 and c[2]:
                    round_.invalid[vid] = round_.invalid.get(vid, 0) + int(c[2])
            round_.timeless.update(self._timeless)
            self._check_invalid(round_)

    def _advance(
        self, windows: list[int], state: dict[str, LayeredState], held: list[DataFrame], ctxs: list[CycleContext],
        identities: dict[str, tuple[str, ...] | None], timings: dict[str, float],
    ) -> list[tuple[_Round, list[tuple[str, DataFrame, dict[str, Any]]]]]:
        """Build the DataFrames of consecutive ``windows`` on ``state`` (updated in place:
        each window's delta stacks in memory on the one before); nothing runs on Spark here
        but the sources' counts. Returns each window's round and sink output."""
        t = time.perf_counter()
        spans = self._group_spans(windows[0], windows[-1], held)
        counts = self._span_counts(spans, windows)
        timings["read"] = timings.get("read", 0.0) + time.perf_counter() - t
        out = []
        for w in windows:
            ctx = self._context(w, dict(state))
            ctxs.append(ctx)
            round_ = _Round()
            sinks, tables, read_s, plan_s = self._walk(ctx, round_, spans)
            t = time.perf_counter()
            round_.counts.update(counts[w])
            round_.invalid.update(ctx.invalid)
            for table in tables:
                delta = ctx.state_out[table]
                identities[table] = delta.identity
                current = state.get(table) or LayeredState(self.spark, self._state_schemas[table], [], None)
                keep = self._keep(held)
                stacked = current.with_delta(delta, keep)
                # a lookup merges every layer: fold the in-memory ones now and then, not every window
                state[table] = stacked.collapsed(delta.identity, keep) if stacked.in_memory >= MEMORY_LAYERS else stacked
            timings["read"] = timings.get("read", 0.0) + read_s
            timings["plan"] = timings.get("plan", 0.0) + plan_s + time.perf_counter() - t
            out.append((round_, sinks))
        return out

    def _stage_group(
        self, outputs: dict[str, list[tuple[int, int, DataFrame, dict[str, Any]]]]
    ) -> dict[int, dict[str, dict[str, Any]]]:
        """Stage every window's output of every sink: one Spark job per sink for the whole
        group when its windows are small (collected together, split by window, written from
        the driver), otherwise one write per window."""
        staged: dict[int, dict[str, dict[str, Any]]] = {w: {} for items in outputs.values() for w, *_ in items}
        for name, items in outputs.items():
            last = self._last_staged_rows.get(name)
            expected = None if last is None else max(last, 1) * len(items)
            sink = items[0][3]
            if len(items) > 1 and self._sink_on_driver.get(name) and within(expected, self.driver_stage_rows):
                tagged = None
                for w, _a, df, _s in items:
                    one = df.withColumn(TAG, F.lit(w).cast("long"))
                    tagged = one if tagged is None else tagged.unionByName(one)
                windows = [w for w, _a, _df, _s in items]
                self._last_staged_rows[name] = self._split(
                    name, sink, tagged.toArrow(), windows, [a for _w, a, _df, _s in items], staged)
            else:
                for w, attempt, df, s in items:
                    staged[w][name] = self._stage(name, df, s, w, attempt)
        return staged

    def _keep(self, held: list[DataFrame]) -> Callable[[DataFrame], DataFrame]:
        """A function persisting a frame for the rest of the group (unpersisted at its end)."""

        def keep(df: DataFrame) -> DataFrame:
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            held.append(df)
            return df

        return keep

    def _group_spans(
        self, first: int, last: int, held: list[DataFrame], cache: bool = True
    ) -> dict[str, SourceSpan]:
        """Every head source's records of windows ``first..last``, listed once; file records
        cached when ``cache`` (each window filters them), else scanned by each job that reads them."""
        start, _ = self.bounds(first)
        _, end = self.bounds(last)
        spans = {}
        for walk in self._walks:
            for head in walk.heads:
                v = head.vertex
                span = read_span(self.spark, v.config["source"], self._schemas[v.id], start, end,
                                 self._position_before(v.id, first))
                if span.df is not None and cache:
                    span.df = self._keep(held)(span.df)
                spans[v.id] = span
        return spans

    def _one_pass(
        self, windows: list[int], first: int, restore: RestorePoint | None, held: list[DataFrame],
        timings: dict[str, float],
    ) -> tuple[dict[str, tuple[DataFrame, dict[str, Any]]], dict[str, StateDelta], list[_Round]]:
        """A group computed as one DataFrame per sink (:mod:`lockgate.runtime.catchup`), from
        window ``first`` (before the group when a derived restore point is replayed)."""
        g = self.plan.graph
        last = windows[-1]
        t = time.perf_counter()
        # file records are scanned twice (the counts read two columns), which costs less than
        # caching them; records made on the driver are made once
        spans = self._group_spans(first, last, held, cache=False)
        for span in spans.values():
            if span.on_driver:
                span.df = self._keep(held)(span.whole())
        counts = self._span_counts(spans, list(range(first, last + 1)), include_driver=True)
        timings["read"] = timings.get("read", 0.0) + time.perf_counter() - t
        t = time.perf_counter()
        span = Span(first, last, g.clock.origin_us, g.clock.size_us, g.watermark["lateness_us"])
        frames: dict[str, DataFrame] = {}
        keep = self._keep(held)
        sinks: dict[str, tuple[DataFrame, dict[str, Any]]] = {}
        ran = []
        for walk in self._walks:
            for head in walk.heads:
                frames[head.vertex.id] = tagged_head(span, spans[head.vertex.id])
            for op in walk.operators:
                ran.append(op.vertex.id)
                if op.head:
                    continue
                out = translate_span(span, g, op.vertex, [frames[i] for i in op.inputs], self._state_in, keep)
                frames[op.vertex.id] = keep(out) if op.materialize else out
            for vid, cfg in walk.sinks:
                sinks[vid] = (frames[vid], cfg)
        self.run_order = ran
        rounds = []
        for w in windows:
            round_ = _Round()
            start, end = self.bounds(w)
            round_.positions = {vid: sp.position(start, end) for vid, sp in spans.items()}
            round_.counts = dict(counts[w])
            round_.raw = {vid: sp.raw for vid, sp in spans.items() if sp.raw is not None}
            rounds.append(round_)
        timings["plan"] = timings.get("plan", 0.0) + time.perf_counter() - t
        return sinks, span.deltas, rounds

    def _stage_tagged(
        self, sinks: dict[str, tuple[DataFrame, dict[str, Any]]], windows: list[int], attempts: list[int],
        held: list[DataFrame],
    ) -> dict[int, dict[str, dict[str, Any]]]:
        """Stage each window's share of every sink's tagged output: collected from the driver in
        packs of consecutive windows that fit the driver path (one pack for most groups) and
        split there; a window too large for it, or a sink the driver does not write, is written
        by Spark from the cached output, one write per window."""
        staged: dict[int, dict[str, dict[str, Any]]] = {w: {} for w in windows}
        attempt_of = dict(zip(windows, attempts, strict=True))
        limit = self.driver_stage_rows
        for name, (df, sink) in sinks.items():
            output = df.filter(F.col(TAG) >= F.lit(windows[0]))
            packs: list[list[int]] = []
            if self._stages_on_driver(name, sink, output, TAG) and limit > 0:
                last = self._last_staged_rows.get(name)
                if last is None:
                    # the runner's first group: no round says how large the output is, so collect
                    # at most the driver path's limit and take it when that was all of it, else
                    # count each window's rows (a first backfill group of a Parquet sink otherwise
                    # wrote one Spark job per window)
                    probe = output.limit(limit + 1).toArrow()
                    if probe.num_rows <= limit:
                        self._last_staged_rows[name] = self._split(name, sink, probe, windows, attempts, staged)
                        continue
                    output = self._keep(held)(output)  # counted, then collected pack by pack
                    rows = {int(w): int(n) for w, n in output.groupBy(TAG).count().collect()}
                    packs = packed(windows, [rows.get(w, 0) for w in windows], limit)
                else:
                    packs = packed(windows, [max(last, 1)] * len(windows), limit)
                    if len(packs) > 1:  # each pack's collect would compute the whole output again
                        output = self._keep(held)(output)
            largest = [
                self._split(name, sink, output.filter(F.col(TAG).between(F.lit(pack[0]), F.lit(pack[-1]))).toArrow(),
                            pack, [attempt_of[w] for w in pack], staged)
                for pack in packs
            ]
            if largest:
                self._last_staged_rows[name] = max(largest)
            rest = [(w, a) for w, a in attempt_of.items() if name not in staged[w]]
            if rest:
                cached = self._keep(held)(df)
                for w, attempt in rest:
                    staged[w][name] = self._stage(
                        name, cached.filter(F.col(TAG) == F.lit(w)).drop(TAG), sink, w, attempt)
        return staged

    def _split(
        self, name: str, sink: dict[str, Any], table: pa.Table, windows: list[int], attempts: list[int],
        staged: dict[int, dict[str, dict[str, Any]]],
    ) -> int:
        """Stage each of ``windows``' rows of ``table`` (sink ``name``'s collected output, tagged
        with :data:`~lockgate.runtime.catchup.TAG`) from the driver; returns the largest window's
        rows (what sizes the next group's packs)."""
        tags = table.column(TAG)
        body = table.drop_columns([TAG])
        for w, attempt in zip(windows, attempts, strict=True):
            staged[w][name] = stage_table(
                body.filter(pc.equal(tags, w)), sink, job=self.job, sink_name=name, window=w,
                attempt=attempt, home=self.home,
            )
        return max(int(staged[w][name]["rows"]) for w in windows)

    def run_group(self, windows: list[int], attempts: list[int], restore: RestorePoint | None) -> list[CycleResult]:
        """Run consecutive ``windows`` (a catch-up group) in one go; returns one result per
        window, each with its own staged sink output and positions.

        A plan :func:`~lockgate.runtime.catchup.one_pass` accepts is computed as one DataFrame
        per sink and state table, its sources read once for the group. No snapshot is written
        until the group's last window, whose snapshot holds everything the group changed (one
        layer on the base's chain). The windows before it get *derived* checkpoints: their state
        is the base's layers plus the windows to replay on them with sinks muted
        (:func:`~lockgate.checkpoint.layers.replay_range`), which is also what this method does
        first when ``restore`` is itself derived (any plan: window by window in memory, each
        window's state the one before with its delta stacked on it).

        Any other plan runs each window as a round of its own, with its own snapshot
        (:meth:`_rounds`): stacking such windows in memory took 1.5 times one window per round
        (``bench.catchup_rounds``, 2026-11-28).
        """
        if len(windows) != len(attempts) or not windows:
            raise InvalidArgumentError(f"a group needs one attempt per window, got {windows} and {attempts}")
        if windows != list(range(windows[0], windows[0] + len(windows))):
            raise InvalidArgumentError(f"a group's windows must be consecutive, got {windows}")
        self._restore = restore
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        base = self._state_in = self._load_state(restore, windows[0])
        timings["state_load"] = time.perf_counter() - t0
        held: list[DataFrame] = []
        ctxs: list[CycleContext] = []
        replay = replay_range(restore.snapshot_manifest) if restore is not None else None
        if replay is not None and replay[1] + 1 != windows[0]:
            raise InvalidArgumentError(
                f"restore point {restore.window} replays windows {replay[0]}..{replay[1]}; "  # type: ignore[union-attr]
                f"the next window is {replay[1] + 1}, not {windows[0]}"
            )
        if replay is None and not one_pass(self.plan.graph):
            return self._rounds(windows, attempts, restore)
        last_w, last_a = windows[-1], attempts[-1]
        try:
            deltas: dict[str, StateDelta] = {}
            if one_pass(self.plan.graph):
                first = replay[0] if replay is not None else windows[0]
                sinks, deltas, rounds = self._one_pass(windows, first, restore, held, timings)
            else:
                state = dict(base)
                identities: dict[str, tuple[str, ...] | None] = {}
                if replay is not None:  # a derived restore point: recompute its state, sinks muted
                    self._advance(list(range(replay[0], replay[1] + 1)), state, held, ctxs, identities, {})
                advanced = self._advance(windows, state, held, ctxs, identities, timings)
                rounds = [r for r, _ in advanced]
                for table in state:
                    if state[table] is not base.get(table):
                        delta = state[table].memory_delta(identities.get(table))
                        if delta is not None:
                            deltas[table] = delta
            self._group_invalid(rounds)
            self._last_rows_in = sum(c[0] for r in rounds for c in r.counts.values())

            # the group's snapshot, at its last window: what every window of it (and a replay) changed
            t2 = time.perf_counter()
            snapshot_uri = None
            manifest: dict[str, Any] = {}
            if deltas:
                snapshot_uri = self.snapshots.snapshot_uri(self.job, last_w, last_a)
                for table, delta in deltas.items():
                    manifest[table] = self._snapshot(snapshot_uri, self._plan_layer(table, delta, restore), timings)
            manifest = self._carry_unchanged(manifest, restore)
            timings["snapshot"] = time.perf_counter() - t2
            t3 = time.perf_counter()
            if one_pass(self.plan.graph):
                staged = self._stage_tagged(sinks, windows, attempts, held)
            else:
                outputs: dict[str, list[tuple[int, int, DataFrame, dict[str, Any]]]] = {}
                for w, attempt, (_round, window_sinks) in zip(windows, attempts, advanced, strict=True):
                    for name, df, cfg in window_sinks:
                        outputs.setdefault(name, []).append((w, attempt, df, cfg))
                staged = self._stage_group(outputs)
            timings["stage"] = time.perf_counter() - t3
            timings["write"] = time.perf_counter() - t2
        except Exception as exc:
            self._raise_data_error(exc)
            raise
        finally:
            for ctx in ctxs:
                ctx.release()
            for df in held:
                df.unpersist()
        return self._group_results(windows, attempts, restore, replay, rounds, staged, snapshot_uri, manifest, timings)

    def _rounds(self, windows: list[int], attempts: list[int], restore: RestorePoint | None) -> list[CycleResult]:
        """A group of a plan that is not window-exact: each window a round of its own, with its own
        snapshot, on the state the round before it wrote (nothing is committed in between)."""
        results = []
        point = restore
        for w, attempt in zip(windows, attempts, strict=True):
            result = self.run(w, attempt, point)
            result.timings["group"] = len(windows)
            results.append(result)
            point = RestorePoint(w, result.snapshot_uri, result.snapshot_manifest, result.positions)
        return results

    def _group_results(
        self, windows: list[int], attempts: list[int], restore: RestorePoint | None, replay: tuple[int, int] | None,
        rounds: list[_Round], staged: dict[int, dict[str, dict[str, Any]]], snapshot_uri: str | None,
        manifest: dict[str, Any], timings: dict[str, float],
    ) -> list[CycleResult]:
        """One CycleResult per window of a group: the last holds the snapshot, the others derived."""
        if restore is None:
            base_uri, base_manifest, first = None, {}, windows[0]
        else:
            base_uri, base_manifest = restore.snapshot_uri, restore.snapshot_manifest
            first = replay[0] if replay is not None else restore.window + 1
        results = []
        share: dict[str, float] = {k: round(v * 1000 / len(windows), 1) for k, v in timings.items()}
        for w, attempt, round_ in zip(windows, attempts, rounds, strict=True):
            own = w == windows[-1]
            if own or not self._state_schemas:
                uri, m = (snapshot_uri, manifest) if own else (None, {})
            else:
                uri, m = None, derived_manifest(base_uri, base_manifest, first, w)
            window_staged = staged.get(w, {})
            results.append(CycleResult(
                window=w, attempt=attempt, staged=window_staged, snapshot_uri=uri, snapshot_manifest=m,
                positions=round_.positions,
                rows_in=sum(c[0] for c in round_.counts.values()),
                rows_out=sum(int(d.get("rows", 0)) for n, d in window_staged.items() if not n.startswith("late.")),
                late_rows=sum(c[1] for c in round_.counts.values()),
                invalid_rows=sum(round_.invalid.values()),
                timings={**share, "group": len(windows)},
            ))
        return results
