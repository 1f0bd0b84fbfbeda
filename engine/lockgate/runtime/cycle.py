"""One cycle round on Spark: read the window's slices, run the chains, merge keyed state,
snapshot it, and stage every sink's output (the worker's half of a round).

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
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ..checkpoint.snapshots import SnapshotStore
from ..errors import InvalidArgumentError
from ..plan.compile import CompiledPlan, struct_of
from ..plan.logical import OperatorKind
from .context import CycleContext
from .results import CycleResult, RestorePoint, late_sink_config
from .sinks import driver_stageable, driver_writable, stage_sink, stage_table
from .sources import read_slice, slices_by_arrival
from .translate import translate


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


class CycleRunner:
    """Runs rounds of one compiled plan on one SparkSession (a Worker's engine)."""

    def __init__(self, spark: SparkSession, plan: CompiledPlan, job: str, home: str, snapshots: SnapshotStore):
        self.spark = spark
        self.plan = plan
        self.job = job
        self.home = home
        self.snapshots = snapshots
        g = plan.graph
        self._order = g.topological_order()
        self._fanout = {v for v in g.vertices if len(g.outputs(v)) > 1}
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
        g = self.plan.graph
        start = g.origin_us + window * g.cycle_window_us
        return start, start + g.cycle_window_us

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
        frames: dict[str, DataFrame] = {}
        observations: dict[str, Observation] = {}
        counts: dict[str, tuple[int, int]] = {}
        positions: dict[str, dict[str, Any]] = {}
        late_frames: dict[str, DataFrame] = {}
        late_cfg = g.watermark["late"]
        try:
            for v in g.sources():
                cfg = v.config["source"]
                piece = read_slice(self.spark, cfg, self._schemas[v.id], start, end)
                positions[v.id] = piece.position
                df = piece.df
                by_arrival = slices_by_arrival(cfg)
                late = F.col(cfg["event_time"]) < F.timestamp_micros(F.lit(ctx.prev_watermark_us))
                if piece.table is not None or piece.empty:
                    counts[v.id] = self._count_on_driver(piece.table, cfg, ctx.prev_watermark_us, by_arrival)
                else:
                    obs = Observation(f"lg_{v.id}_{uuid.uuid4().hex[:8]}")
                    metrics = [F.count(F.lit(1)).alias("rows")]
                    if by_arrival:
                        metrics.append(F.coalesce(F.sum(late.cast("long")), F.lit(0)).alias("late"))
                    df = df.observe(obs, *metrics)
                    observations[v.id] = obs
                if by_arrival:
                    if not isinstance(late_cfg, str):
                        df = ctx.cache(df.withColumn("__late", late))
                        late_frames[v.id] = df.filter(F.col("__late")).drop("__late")
                        df = df.filter(~F.col("__late")).drop("__late")
                    else:
                        df = df.filter(~late)
                frames[v.id] = ctx.cache(df) if v.id in self._fanout else df
            timings["read"] = time.perf_counter() - t0

            t1 = time.perf_counter()
            sinks: list[tuple[str, DataFrame, dict[str, Any]]] = []
            for vid in self._order:
                v = g.vertices[vid]
                if v.kind == OperatorKind.SOURCE:
                    continue
                inputs = [frames[e.source] for e in g.inputs(vid)]
                out = translate(ctx, g, v, inputs, self.plan.fns)
                if vid in self._fanout:
                    out = ctx.cache(out)
                frames[vid] = out
                if v.kind == OperatorKind.SINK:
                    sinks.append((vid, out, v.config["sink"]))
            for src, df in late_frames.items():
                sinks.append((f"late.{src}", df, late_sink_config(late_cfg["sink"], src)))
            timings["plan"] = time.perf_counter() - t1

            # snapshots first: they compute the round's cached state the sinks then reuse
            t2 = time.perf_counter()
            snapshot_uri = None
            manifest: dict[str, Any] = {}
            if ctx.state_out:
                snapshot_uri = self.snapshots.snapshot_uri(self.job, window, attempt)
                for table, df in ctx.state_out.items():
                    manifest[table] = self._snapshot(snapshot_uri, table, df, restore, timings)
            timings["snapshot"] = time.perf_counter() - t2

            t3 = time.perf_counter()
            staged = {}
            for name, df, sink_cfg in sinks:
                staged[name] = self._stage(name, df, sink_cfg, window, attempt)
            timings["stage"] = time.perf_counter() - t3
            timings["write"] = time.perf_counter() - t2
            for vid, obs in observations.items():
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
            positions=positions,
            rows_in=rows_in,
            rows_out=rows_out,
            late_rows=late_rows,
            timings={k: round(v * 1000, 1) for k, v in timings.items()},
        )

