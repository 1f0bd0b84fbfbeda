"""One cycle round on Spark: read the window's slices, run the chains, merge keyed state,
snapshot it, and stage every sink's output (the worker's half of a round).

The round runs the physical plan (:class:`~lockgate.plan.physical.ExecutionGraph`) and
nothing else: every cycle in order; at its heads the window's slices are read; then its
groups in order, each group's chains in order, each chain's operators in order (what
``lockgate explain`` prints); at its tails state is snapshotted and sink output staged.
Outputs a group materialises (read by several consumers) are persisted for the round.

Small states are collected to the driver and written as one Parquet file, which saves a
distributed write and its commit protocol; an empty state writes nothing. A Parquet
sink's small output is staged the same way. :func:`driver_rows` says what "small" is.

The controller's half (commit the staged output, then write the checkpoint row) is in
:mod:`lockgate.control.scheduler`; nothing here makes a window visible to anyone.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ..checkpoint.snapshots import SnapshotStore
from ..errors import CompileError, InvalidArgumentError
from ..plan.compile import CompiledPlan
from .analysis import struct_of
from .availability import slices_by_arrival
from .context import CycleContext
from .results import CycleResult, RestorePoint, late_sink_config
from .sinks import driver_stageable, driver_writable, stage_sink, stage_table
from .sources import read_slice
from .translate import translate
from .walk import OperatorStep, walk_cycles


def driver_rows(setting: str, default: int = 200_000) -> int:
    """A ``LOCKGATE_DRIVER_*_ROWS`` setting (rows; 0 turns that driver path off), read when
    a runner starts, so every job takes the environment its worker runs in.

    - ``LOCKGATE_DRIVER_SNAPSHOT_ROWS``: a state table expected to hold at most this many
      rows (its last snapshot's rows plus the last round's input rows) is collected to the
      driver and written as one Parquet file; a larger one is written by the executors.
    - ``LOCKGATE_DRIVER_STAGE_ROWS``: a Parquet sink whose last round staged at most this
      many rows stages the next round from the driver (``toArrow``, one file written with
      pyarrow) instead of a Spark write.
    """
    raw = os.environ.get(setting, "").strip()
    if not raw:
        return default
    try:
        rows = int(raw)
    except ValueError:
        rows = -1
    if rows < 0:
        raise InvalidArgumentError(
            f"{setting}={raw!r}: expected a whole number of rows (0 turns the driver path off; default {default})"
        )
    return rows


def _within(rows: int | None, limit: int) -> bool:
    """True when an expected row count is known and a driver path of ``limit`` rows takes it."""
    return limit > 0 and rows is not None and rows <= limit


@dataclass
class _Round:
    """What one round accumulates while it runs."""

    frames: dict[str, DataFrame] = field(default_factory=dict)
    observations: dict[str, Observation] = field(default_factory=dict)
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)
    late_frames: dict[str, DataFrame] = field(default_factory=dict)


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
        #: rows each sink staged in the last round this runner ran
        self._last_staged_rows: dict[str, int] = {}
        self.driver_snapshot_rows = driver_rows("LOCKGATE_DRIVER_SNAPSHOT_ROWS")
        self.driver_stage_rows = driver_rows("LOCKGATE_DRIVER_STAGE_ROWS")
        #: state tables and sinks whose rows the driver paths can write (known per sink after
        #: its first round: a sink's output schema is looked up once)
        self._state_on_driver = {t: driver_writable(s) for t, s in self._state_schemas.items()}
        self._sink_on_driver: dict[str, bool] = {}

    def _state_estimate(self, table: str, restore: RestorePoint | None) -> int | None:
        """Rows the state table may hold after this round; None when unknown."""
        if self._last_rows_in is None:
            return None
        before = 0
        if restore is not None and restore.snapshot_uri is not None:
            before = int((restore.snapshot_manifest.get(table) or {}).get("rows", 0))
        return before + self._last_rows_in

    def _snapshot(
        self, snapshot_uri: str, table: str, df: DataFrame, restore: RestorePoint | None, timings: dict[str, float]
    ) -> dict[str, Any]:
        """Write one state table (from the driver when it is expected to be small); returns
        its manifest entry. Adds the time spent persisting it to ``timings["snapshot_io"]``:
        on the driver path the file write alone (the collect computes the round, which the
        sinks then reuse); on Spark's path the whole write, which cannot be split."""
        estimate = self._state_estimate(table, restore)
        if self._state_on_driver[table] and _within(estimate, self.driver_snapshot_rows):
            collected = df.toArrow()
            t = time.perf_counter()
            entry = self.snapshots.write_table(snapshot_uri, table, collected)
        else:
            t = time.perf_counter()
            df.write.mode("overwrite").parquet(self.snapshots.operator_uri(snapshot_uri, table))
            entry = self.snapshots.operator_manifest(snapshot_uri, table)
        timings["snapshot_io"] = timings.get("snapshot_io", 0.0) + time.perf_counter() - t
        return entry

    def _stage(self, name: str, df: DataFrame, sink: dict[str, Any], window: int, attempt: int) -> dict[str, Any]:
        """Stage one sink's output: from the driver when its last round was small and its
        columns are of types the driver writes as Spark does (the first round of a runner
        always goes through Spark, which also tells the size)."""
        where = dict(job=self.job, sink_name=name, window=window, attempt=attempt, home=self.home)
        last = self._last_staged_rows.get(name)
        if _within(last, self.driver_stage_rows) and self._sink_on_driver[name]:
            staged = stage_table(df.toArrow(), sink, **where)
        else:
            staged = stage_sink(df, sink, **where)
            if name not in self._sink_on_driver:
                schema = df.schema  # once per sink and runner; no file stores zero columns
                self._sink_on_driver[name] = driver_stageable(sink) and bool(schema.fields) and driver_writable(schema)
        self._last_staged_rows[name] = int(staged["rows"])
        return staged

    def bounds(self, window: int) -> tuple[int, int]:
        """``(start, end)`` of cycle window ``window`` in microseconds, end exclusive."""
        return self.plan.graph.clock.bounds_us(window)

    def _load_state(self, restore: RestorePoint | None) -> dict[str, DataFrame]:
        if restore is None or restore.snapshot_uri is None:
            return {}
        self.snapshots.verify(restore.snapshot_uri, restore.snapshot_manifest)
        state = {}
        for table, schema in self._state_schemas.items():
            entry = restore.snapshot_manifest.get(table)
            # an empty state has no file: restored as no state, which operators treat as empty
            if entry is not None and entry.get("rows", 1) > 0:
                uri = self.snapshots.operator_uri(restore.snapshot_uri, table)
                state[table] = self.spark.read.schema(schema).parquet(uri)
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

    def _read_head(self, ctx: CycleContext, head: OperatorStep, round_: _Round) -> None:
        """Read the window's slice of source ``head``: drop (or set aside for the late sink)
        the records below the watermark, and count rows without an extra Spark job."""
        v = head.vertex
        cfg = v.config["source"]
        piece = read_slice(self.spark, cfg, self._schemas[v.id], ctx.start_us, ctx.end_us)
        round_.positions[v.id] = piece.position
        df = piece.df
        by_arrival = slices_by_arrival(cfg)
        late = F.col(cfg["event_time"]) < F.timestamp_micros(F.lit(ctx.prev_watermark_us))
        if piece.table is not None or piece.empty:
            round_.counts[v.id] = self._count_on_driver(piece.table, cfg, ctx.prev_watermark_us, by_arrival)
        else:
            obs = Observation(f"lg_{v.id}_{uuid.uuid4().hex[:8]}")
            metrics = [F.count(F.lit(1)).alias("rows")]
            if by_arrival:
                metrics.append(F.coalesce(F.sum(late.cast("long")), F.lit(0)).alias("late"))
            df = df.observe(obs, *metrics)
            round_.observations[v.id] = obs
        if by_arrival:
            if not isinstance(self.plan.graph.watermark["late"], str):
                df = ctx.cache(df.withColumn("__late", late))
                round_.late_frames[v.id] = df.filter(F.col("__late")).drop("__late")
                df = df.filter(~F.col("__late")).drop("__late")
            else:
                df = df.filter(~late)
        round_.frames[v.id] = ctx.cache(df) if head.materialize else df

    def run(self, window: int, attempt: int, restore: RestorePoint | None) -> CycleResult:
        """Process cycle window ``window``; returns the staged output and the new snapshot."""
        g = self.plan.graph
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        start, end = self.bounds(window)
        lateness = g.watermark["lateness_us"]
        state_in = self._load_state(restore)
        timings["state_load"] = time.perf_counter() - t0
        ctx = CycleContext(
            self.spark,
            window,
            start,
            end,
            prev_watermark_us=start - lateness,
            watermark_us=end - lateness,
            parallelism=max(v.parallelism for v in g.vertices.values()),
            state_in=state_in,
        )
        round_ = _Round()
        ran: list[str] = []
        read_s = plan_s = 0.0
        try:
            sinks: list[tuple[str, DataFrame, dict[str, Any]]] = []
            state_tables: list[str] = []
            for walk in self._walks:
                t = time.perf_counter()
                for head in walk.heads:  # the cycle's head: read the window's slices
                    self._read_head(ctx, head, round_)
                read_s += time.perf_counter() - t
                t = time.perf_counter()
                frames = round_.frames
                for op in walk.operators:  # groups, chains, operators: the ExecutionGraph's order
                    ran.append(op.vertex.id)
                    if op.head:
                        continue  # its slice was read at the head
                    out = translate(ctx, g, op.vertex, [frames[i] for i in op.inputs], self.plan.fns)
                    frames[op.vertex.id] = ctx.cache(out) if op.materialize else out
                # the cycle's tail: its sinks' output and its stateful operators' state
                sinks += [(vid, frames[vid], cfg) for vid, cfg in walk.sinks]
                state_tables += [t for t in walk.state_tables if t in ctx.state_out]
                plan_s += time.perf_counter() - t
            self.run_order = ran
            late_cfg = g.watermark["late"]
            for src, df in round_.late_frames.items():
                sinks.append((f"late.{src}", df, late_sink_config(late_cfg["sink"], src)))
            timings["read"] = timings["state_load"] + read_s  # from the round's start, as it always was
            timings["plan"] = plan_s
            if len(state_tables) != len(ctx.state_out):
                stray = ", ".join(sorted(set(ctx.state_out) - set(state_tables)))
                raise CompileError(f"state {stray} was produced by no tail of the execution graph's cycles")

            # snapshots first: they compute the round's cached state the sinks then reuse
            t2 = time.perf_counter()
            snapshot_uri = None
            manifest: dict[str, Any] = {}
            if state_tables:
                snapshot_uri = self.snapshots.snapshot_uri(self.job, window, attempt)
                for table in state_tables:
                    manifest[table] = self._snapshot(snapshot_uri, table, ctx.state_out[table], restore, timings)
            timings["snapshot"] = time.perf_counter() - t2

            t3 = time.perf_counter()
            staged = {}
            for name, df, sink_cfg in sinks:
                staged[name] = self._stage(name, df, sink_cfg, window, attempt)
            timings["stage"] = time.perf_counter() - t3
            timings["write"] = time.perf_counter() - t2
            counts = round_.counts
            for vid, obs in round_.observations.items():
                m = obs.get
                counts[vid] = (int(m.get("rows") or 0), int(m.get("late") or 0))
            rows_in = sum(c[0] for c in counts.values())
            late_rows = sum(c[1] for c in counts.values())
            self._last_rows_in = rows_in
        finally:
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
            timings={k: round(v * 1000, 1) for k, v in timings.items()},
        )

