"""The superstep driver: runs a :class:`~lockgate.graph.compute.VertexProgram` over a graph in Spark.

Each superstep is one Spark job over the previous superstep's state, read back from Parquet:

1. the program's ``compute`` (or ``evolve``) Column expressions give every vertex's new value and
   the messages it sends (a projection of the state);
2. the messages are joined with the edges (``src`` for ``send_out``, ``dst`` for ``send_in``),
   shaped by ``along_edge`` and combined per receiving vertex by the program's combiner (a
   ``groupBy`` aggregate);
3. the combined messages are joined back to the vertices (the inbox of the next superstep) and
   the state is written to ``folder/superstep-NNNNN`` in Parquet, with its stats (messages sent,
   vertices changed, the program's aggregates) observed in the same job;
4. the state is read back from Parquet: the next superstep's plan starts there, so Spark's lineage
   never grows and superstep 50 costs what superstep 5 does.

After each superstep the driver calls ``on_superstep(stats)`` (record them, checkpoint the state
folder) and checks the halting rules. A run killed at any point resumes from its last complete
superstep with :meth:`SuperstepDriver.resume` and ends with the same result.

Example::

    from lockgate.graph import SuperstepDriver
    from lockgate.graph.library import ConnectedComponents

    driver = SuperstepDriver(ConnectedComponents(), "/data/cc-state", spark=spark,
                             on_superstep=lambda stats: print(stats.superstep, stats.messages_sent))
    result = driver.run(edges)                 # edges: DataFrame with src, dst
    result.output.show()                       # id, component
    # after a crash: SuperstepDriver(ConnectedComponents(), "/data/cc-state", spark=spark).resume()
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    Row,
    ShortType,
    StringType,
    StructType,
)

from lockgate.graph import local
from lockgate.graph.compute import (
    MAX,
    MIN,
    SUM,
    AggregateContext,
    EdgeContext,
    Halt,
    Step,
    VertexContext,
    VertexProgram,
)
from lockgate.graph.errors import (
    GraphInputError,
    GraphStateError,
    MessageTypeError,
    NoHaltingRuleError,
    ProgramReturnError,
    VertexValueTypeError,
    step_type_error,
)
from lockgate.graph.state import StateFolder
from lockgate.graph.stats import SuperstepStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: state columns besides ``id`` and the vertex attributes
VALUE, INBOX, COUNT, OUT_DEGREE, IN_DEGREE = "__value", "__inbox", "__n", "__out_degree", "__in_degree"
_INTERNAL = (VALUE, INBOX, COUNT, OUT_DEGREE, IN_DEGREE)
_FORMAT = 1
#: column types the driver path writes with pyarrow exactly as Spark reads them back
_PLAIN = (BooleanType, ShortType, IntegerType, LongType, FloatType, DoubleType, StringType)
#: graphs of at most this many vertices have their superstep state written from the driver
DRIVER_VERTICES = 200_000
#: a superstep whose senders are at most this many (only the vertices with messages compute, and
#: the last superstep sent this many messages at most) broadcasts them to the join with the edges
BROADCAST_SENDERS = 500_000
#: Parquet row-group size of the edges copied into the folder: Spark splits a file's scan between
#: tasks only at row groups, and every superstep scans the edges (one 128 MiB row group: one task)
EDGE_ROW_GROUP_BYTES = 2 * 1024 * 1024


#: the two ways messages travel: (the edge column of the sender, the edge column of the receiver)
ROUTES = {"send_out": ("src", "dst"), "send_in": ("dst", "src")}


@dataclass
class _Computed:
    """A superstep's ``compute`` over the previous state (see ``SuperstepDriver._step``)."""

    frame: DataFrame
    #: the ways the vertices send messages (``send_out``, ``send_in``): columns ``__<way>``
    sends: list[str]
    #: every vertex computes (else only those with messages)
    everyone: bool
    evolving: bool
    attrs: list[str]
    message_type: DataType


@dataclass
class GraphResult:
    """The outcome of :meth:`SuperstepDriver.run` or :meth:`~SuperstepDriver.resume`.

    ``superstep`` is the last complete superstep, ``halted_by`` why the computation ended
    (``None``: stopped by ``stop_after``, resumable), ``stats`` the supersteps of this call.
    """

    program: VertexProgram
    folder: StateFolder
    superstep: int
    halted_by: str | None
    stats: list[SuperstepStats]
    spark: SparkSession = field(repr=False)
    state_schema: StructType = field(repr=False)
    edges_schema: StructType = field(repr=False)
    #: where the edges are read from when they were not copied into the folder (``stored_edges``)
    edge_sources: list[str] | None = field(default=None, repr=False)

    @property
    def state_uri(self) -> str:
        """The Parquet folder of the final state (what a checkpoint references)."""
        return self.folder.superstep_uri(self.superstep)

    @property
    def state(self) -> DataFrame:
        """The final state: ``id``, the vertex attributes and ``value``."""
        raw = self.spark.read.schema(self.state_schema).parquet(self.state_uri)
        attrs = [c for c in raw.columns if c != "id" and c not in _INTERNAL]
        return raw.select("id", *attrs, F.col(VALUE).alias("value"))

    @property
    def values(self) -> DataFrame:
        """``id`` and ``value`` of every vertex: the ``previous`` of a next dynamic run."""
        return self.state.select("id", "value")

    @property
    def output(self) -> DataFrame:
        """The program's results: ``program.finish(state)``."""
        return self.program.finish(self.state)

    @property
    def edges(self) -> DataFrame:
        """The edges the computation ran over (from the state folder, or where ``stored_edges`` said)."""
        return self.spark.read.schema(self.edges_schema).parquet(*(self.edge_sources or [self.folder.edges_uri]))


def _type_name(t: DataType) -> str:
    return t.simpleString()


def _same_type(a: DataType, b: DataType) -> bool:
    return _type_name(a) == _type_name(b)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Row):
        return {k: _jsonable(x) for k, x in v.asDict().items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def check_init_type(program: VertexProgram, value_type: DataType) -> None:
    """Raise :class:`VertexValueTypeError` when ``init``'s vertex values have no type (a bare null
    literal) or not the type the program declares (``value_type``)."""
    if isinstance(value_type, NullType):
        raise VertexValueTypeError(
            f"{program.name}.init returned a null literal, which has no type. Fix: give it the "
            "type of the vertex values, e.g. F.lit(None).cast('double')"
        )
    declared = program.value_type
    if declared is not None and not _same_type(value_type, declared):
        raise VertexValueTypeError(
            f"{program.name}.init returned vertex values of type {_type_name(value_type)}, but "
            f"{program.name}.value_type is {_type_name(declared)}. Fix: cast the value, e.g. "
            f".cast('{_type_name(declared)}'), or change value_type"
        )


class SuperstepDriver:
    """Runs a vertex program superstep by superstep, with its state in Parquet under ``folder``.

    ``on_superstep(stats)`` is called after each complete superstep (0, the init, included);
    ``max_supersteps`` bounds the computation besides the program's own bound; ``keep_last``
    keeps only the state of the last ``keep_last`` supersteps (``None``: all).
    ``checkpoint_every=k`` writes the state to the folder (a checkpoint a resume starts from)
    every ``k`` supersteps and at the last one; the supersteps between are held by Spark alone
    (``localCheckpoint``: the lineage is cut all the same). ``tag`` is recorded in the folder's
    manifest (:meth:`tag_of` reads it back): what the computation started from. The state of a
    graph of at most ``driver_vertices`` vertices is collected and written from the driver, and a
    graph of at most ``local_vertices`` vertices and :data:`~lockgate.graph.local.LOCAL_EDGES`
    edges runs its supersteps on the driver (:mod:`lockgate.graph.local`; 0: always Spark).

    >>> # driver = SuperstepDriver(PageRank(), "/tmp/pr", spark=spark, on_superstep=record)
    >>> # result = driver.run(edges); result.output
    """

    def __init__(
        self,
        program: VertexProgram,
        folder: str,
        *,
        spark: SparkSession | None = None,
        on_superstep: Callable[[SuperstepStats], None] | None = None,
        max_supersteps: int | None = None,
        keep_last: int | None = None,
        checkpoint_every: int = 1,
        tag: dict[str, Any] | None = None,
        driver_vertices: int = DRIVER_VERTICES,
        local_vertices: int | None = None,
    ):
        if not isinstance(program, VertexProgram):
            raise ProgramReturnError(
                f"{program!r} is not a VertexProgram: subclass lockgate.graph.VertexProgram"
            )
        self.program = program
        self.folder = StateFolder(folder)
        self.on_superstep = on_superstep
        bounds = [b for b in (program.max_supersteps, max_supersteps) if b is not None]
        self.max_supersteps = min(bounds) if bounds else None
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"keep_last={keep_last}: keep at least the last superstep (1) or all (None)")
        self.keep_last = keep_last
        if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
            raise ValueError(f"checkpoint_every={checkpoint_every!r}: write the state every 1 or more supersteps")
        self.checkpoint_every = checkpoint_every
        #: what the caller records in the folder's manifest (e.g. what the computation started from)
        self.tag = tag
        #: supersteps held by Spark alone (not checkpointed), by superstep
        self._held: dict[int, DataFrame] = {}
        #: a graph of at most this many vertices (of plain column types) is written from the driver:
        #: collected with ``toArrow`` and written as one Parquet file, which saves a distributed
        #: write and its commit per superstep (0: always Spark)
        self.driver_vertices = driver_vertices
        #: a graph of at most this many vertices runs on the driver (None: ``local.LOCAL_VERTICES``
        #: when the superstep starts, so that it can be set for a whole process)
        self.local_vertices = local_vertices
        #: the small graph held on the driver (None: the supersteps run as Spark jobs)
        self._local: local.LocalGraph | None = None
        #: the superstep and state the last driver-side write wrote
        self._written: tuple[int, pa.Table] | None = None
        if program.halt_when is None and self.max_supersteps is None and not program.has_converged():
            raise NoHaltingRuleError(
                f"{program.name} has no halting rule and no bound: it would run supersteps forever. "
                f"Fix: set {program.name}.halt_when to Halt.NO_MESSAGES or Halt.NO_CHANGE, set "
                f"{program.name}.max_supersteps, define {program.name}.converged(stats), or pass "
                "max_supersteps= to SuperstepDriver."
            )
        if spark is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
            if spark is None:
                raise GraphStateError("no active Spark session: pass spark= (lockgate.runtime.session.get_spark())")
        self.spark = spark
        #: the DataFrame the last superstep wrote: its plan is what one superstep costs
        self.last_superstep_frame: DataFrame | None = None
        self._state_schema: StructType | None = None
        self._edges_schema: StructType | None = None
        self._num_vertices = 0
        self._dynamic = False
        #: the vertices of a graph run on the driver, with degrees (and ``__previous``), until superstep 0
        self._base_table: pa.Table | None = None
        #: where the edges are when they were not copied into the folder (``run(stored_edges=)``)
        self._edge_sources: list[str] | None = None

    # -- starting ------------------------------------------------------------------------------

    def run(
        self,
        edges: DataFrame,
        vertices: DataFrame | None = None,
        *,
        previous: DataFrame | None = None,
        new_edges: DataFrame | None = None,
        stop_after: int | None = None,
        stored_edges: list[str] | None = None,
    ) -> GraphResult:
        """Run the program from superstep 0 in an empty ``folder``.

        ``edges`` has ``src`` and ``dst`` (and any edge attributes); ``vertices`` has ``id`` (and
        any vertex attributes); without it the vertices are the edges' endpoints. Endpoints
        missing from ``vertices`` are added (with null attributes).

        A dynamic run continues an earlier result: ``previous`` (``id``, ``value``: an earlier
        ``GraphResult.values``) gives the starting value of the vertices it holds (``init`` gives
        the others'), ``edges`` is the whole graph now and ``new_edges`` the part of it that is new.
        When the program defines ``evolve``, superstep 1 runs it, with messages along the new
        edges only. ``stop_after=s`` returns after superstep ``s`` (``halted_by`` ``None``): the
        folder then resumes from ``s + 1``.

        ``stored_edges`` (Parquet files or folders) saves copying the edges into the folder: these
        locations, with ``new_edges`` in a dynamic run (which the driver writes into the folder),
        hold exactly the rows of ``edges`` (the columns read by name), and stay in place while the
        folder is used (e.g. a snapshot store's layers of the checkpoint the run starts from). The
        manifest records them: a resume reads the edges from there.
        """
        if not self.folder.is_empty():
            raise GraphStateError(
                f"state folder {self.folder.uri} is not empty (it holds an earlier computation): "
                "resume it with SuperstepDriver.resume(), or run in a new or emptied folder"
            )
        if new_edges is not None and previous is None:
            raise GraphInputError("new_edges= is given without previous=: pass the previous result's values too")
        self._check_inputs(edges, vertices, previous, new_edges)
        self._dynamic = new_edges is not None

        edge_cols = edges.columns
        self._edges_schema = edges.select(*edge_cols).schema
        # a small graph is collected once: its edges are written from the driver and its superstep 0
        # is computed over local relations (no Spark job where the program has no aggregates)
        new_held = None
        if stored_edges and self._local_limit() > 0:  # read in place: no Spark job over every edge
            new_held = None if new_edges is None else local.collect_table(new_edges.select(*edge_cols))
            held = self._stored_edges(stored_edges, new_held)
            if held is None:
                new_held = None
        else:
            held = self._small_edges(edges.select(*edge_cols))
            new_held = None if held is None or new_edges is None else local.collect_table(new_edges.select(*edge_cols))
        if stored_edges is not None:
            sources = [*stored_edges, *([self.folder.new_edges_uri] if new_edges is not None else [])]
            if not sources:
                raise GraphInputError("stored_edges= is empty and there are no new_edges: pass where the edges are")
            self._edge_sources = sources
        elif held is not None:
            self.folder.write_edges(held)
        else:
            edges.select(*edge_cols).write.option("parquet.block.size", EDGE_ROW_GROUP_BYTES).parquet(
                self.folder.edges_uri
            )
        if new_held is not None:
            self.folder.write_edges(new_held, new=True)
        elif new_edges is not None:
            new_edges.select(*edge_cols).write.parquet(self.folder.new_edges_uri)

        on_driver = None if held is None else self._base_on_driver(held, vertices, previous)
        if on_driver is not None:
            base, attrs = on_driver
        else:
            base, attrs = self._base(vertices, previous)

        ctx = VertexContext(
            id=F.col("id"),
            value=F.lit(None),
            messages=F.lit(None),
            message_count=F.lit(0),
            out_degree=F.coalesce(F.col(OUT_DEGREE), F.lit(0)),
            in_degree=F.coalesce(F.col(IN_DEGREE), F.lit(0)),
            superstep=0,
            num_vertices=self._num_vertices,
        )
        init = self._call("init", ctx, Column)
        probe = base.select(init.alias(VALUE))
        value_type = probe.schema[VALUE].dataType
        check_init_type(self.program, value_type)
        if previous is not None:
            prev_type = previous.schema["value"].dataType
            if not _same_type(prev_type, value_type):
                raise VertexValueTypeError(
                    f"the previous values have type {_type_name(prev_type)} but {self.program.name}.init "
                    f"gives {_type_name(value_type)}. Fix: pass previous= the values of a run of the same "
                    "program (GraphResult.values), or cast them"
                )
            init = F.when(F.col("__previous").isNotNull(), F.col("__previous")).otherwise(init)
        message_type = self.program.message_type or value_type

        def initial(frame: DataFrame) -> DataFrame:
            return frame.select(
                "id",
                *attrs,
                init.alias(VALUE),
                F.lit(None).cast(message_type).alias(INBOX),
                F.lit(0).cast(LongType()).alias(COUNT),
                F.coalesce(F.col(OUT_DEGREE), F.lit(0)).cast(LongType()).alias(OUT_DEGREE),
                F.coalesce(F.col(IN_DEGREE), F.lit(0)).cast(LongType()).alias(IN_DEGREE),
            )

        state0 = initial(base)
        self._state_schema = state0.schema
        self.folder.write_manifest(
            {
                "format": _FORMAT,
                **self.program.describe(),
                "num_vertices": self._num_vertices,
                "dynamic": self._dynamic,
                "evolve": self._dynamic and self.program.has_evolve(),
                "state_schema": json.loads(self._state_schema.json()),
                "edges_schema": json.loads(self._edges_schema.json()),
                "edge_sources": self._edge_sources,
                "tag": self.tag,
            }
        )
        started = time.perf_counter()
        with_old = state0.withColumn("__old", F.col(VALUE)).withColumn("__active", F.lit(True))
        if on_driver is not None:
            assert held is not None
            stats = self._start_on_driver(with_old, held, new_held, started, initial)
        else:
            stats = self._write(0, with_old, with_old.withColumn("__changed", F.lit(True)), started)
            self._localize(0)
        return self._loop(stats, stop_after)

    def _base(self, vertices: DataFrame | None, previous: DataFrame | None) -> tuple[DataFrame, list[str]]:
        """The vertices (the edges' endpoints, ``vertices``' rows, ``previous``' ids) with their degrees
        and previous values, computed by Spark; sets the vertex count. Returns them and the names of
        the vertex attributes."""
        e = self._edges()
        # every endpoint with its degrees in one aggregate over the edges (one scan, one shuffle),
        # held by Spark: the vertex count and superstep 0 read it, not the edges again
        ends = e.select(F.col("src").alias("id"), F.lit(1).alias("__o"), F.lit(0).alias("__i")).union(
            e.select(F.col("dst").alias("id"), F.lit(0).alias("__o"), F.lit(1).alias("__i"))
        )
        degrees = ends.groupBy("id").agg(
            F.sum("__o").cast(LongType()).alias(OUT_DEGREE), F.sum("__i").cast(LongType()).alias(IN_DEGREE)
        ).localCheckpoint(eager=True)
        ids = degrees.select("id")
        if previous is not None:
            ids = ids.union(previous.select("id")).distinct()
        if vertices is None:
            v = ids
        else:
            v = vertices.unionByName(ids.join(vertices.select("id"), "id", "left_anti"), allowMissingColumns=True)
        base = v.join(degrees, "id", "left")
        if previous is not None:
            base = base.join(previous.select("id", F.col("value").alias("__previous")), "id", "left")
        self._num_vertices = v.count()
        return base, [c for c in v.columns if c != "id"]

    def _local_limit(self) -> int:
        return local.LOCAL_VERTICES if self.local_vertices is None else self.local_vertices

    def _plain_edges(self) -> bool:
        """Whether the driver path can hold the edges: plain column types, ``src`` and ``dst`` of one type."""
        assert self._edges_schema is not None
        schema = self._edges_schema
        plain = all(isinstance(f.dataType, _PLAIN) for f in schema)
        return plain and _same_type(schema["src"].dataType, schema["dst"].dataType)

    def _small_edges(self, edges: DataFrame) -> pa.Table | None:
        """The edges, collected, when the graph may run on the driver (at most ``LOCAL_EDGES`` of
        them, :meth:`_plain_edges`); else ``None``."""
        if self._local_limit() <= 0 or not self._plain_edges():
            return None
        return local.collect_edges(edges)

    def _stored_edges(self, stored: list[str], new_held: pa.Table | None) -> pa.Table | None:
        """:meth:`_small_edges` for edges stored at ``stored`` (with ``new_held``, a dynamic run's
        new edges, collected): read with pyarrow, not scanned by Spark; ``None`` when the graph
        is not small or the edges are not on the local file system."""
        assert self._edges_schema is not None
        if not self._plain_edges():
            return None
        arrow = to_arrow_schema(self._edges_schema)
        room = local.LOCAL_EDGES - (0 if new_held is None else new_held.num_rows)
        table = local.read_edges(stored, arrow, room) if room >= 0 else None
        if table is None:
            return None
        return table if new_held is None else pa.concat_tables([table, new_held.cast(arrow)])

    def _base_on_driver(
        self, edges: pa.Table, vertices: DataFrame | None, previous: DataFrame | None
    ) -> tuple[DataFrame, list[str]] | None:
        """What :meth:`_base` computes, with Arrow over the collected edges, as a local relation;
        ``None`` when the graph is not small after all (too many vertices, vertex attributes or ids
        of types the driver path does not hold): Spark computes it then."""
        for df in (vertices, previous):
            if df is not None and not all(isinstance(f.dataType, _PLAIN) for f in df.schema):
                return None
        v_table = None if vertices is None else vertices.toArrow()
        p_table = None if previous is None else previous.select("id", "value").toArrow()
        for t in (v_table, p_table):
            if t is not None and not t.schema.field("id").type.equals(edges.schema.field("src").type):
                return None
        ids = local.vertex_ids(edges, None if p_table is None else p_table["id"])
        v = local.with_missing(v_table, ids) if v_table is not None else pa.table({"id": ids})
        if not 0 < v.num_rows <= self._local_limit():
            return None
        base = local.with_degrees(v, edges, OUT_DEGREE, IN_DEGREE)
        if p_table is not None:
            at = pc.index_in(base["id"], value_set=p_table["id"])
            base = base.append_column("__previous", p_table["value"].take(at))
        self._num_vertices = v.num_rows
        self._base_table = base
        # a warm start builds superstep 0 from this table: Spark needs the vertices' schema here, not their rows
        shape = base.slice(0, 0) if self._warm_on_driver() else base
        return self.spark.createDataFrame(shape), [c for c in v.column_names if c != "id"]

    def _warm_on_driver(self) -> bool:
        """Whether superstep 0 on the driver is a warm start: the vertices with a previous value start
        from it (built in Arrow) and ``init`` runs over the new vertices alone. Not when the program
        has aggregates, which superstep 0 observes over every vertex."""
        base = self._base_table
        return base is not None and "__previous" in base.column_names and not self._user_aggregates(0)

    def _start_on_driver(
        self, with_old: DataFrame, edges: pa.Table, new_edges: pa.Table | None, started: float,
        initial: Callable[[DataFrame], DataFrame],
    ) -> SuperstepStats:
        """Superstep 0 of a small graph: the initial state computed over the local relation, written
        from the driver, and held for the supersteps that follow (:mod:`lockgate.graph.local`).
        ``initial`` is the projection from the vertices (``_base_table``'s columns) to the state."""
        assert self._state_schema is not None and self._base_table is not None
        user = self._user_aggregates(0)
        observation = None
        frame = with_old
        schema = self._arrow_state_schema()
        base = self._base_table
        if self._warm_on_driver():
            warm = pc.is_valid(base["__previous"])
            cold = base.filter(pc.invert(warm))
            parts = [local.warm_start(base.filter(warm), schema, VALUE, INBOX, COUNT, OUT_DEGREE, IN_DEGREE)]
            if cold.num_rows:
                cold_state = initial(self.spark.createDataFrame(cold)).select(*self._state_schema.fieldNames())
                parts.append(local.collect_table(cold_state, cold.num_rows).cast(schema))
            state = pa.concat_tables(parts)
        else:
            if user:
                observation = Observation(f"lockgate_graph_{id(self)}_0_{time.monotonic_ns()}")
                frame = frame.observe(observation, *[c.alias(name) for name, c in user.items()])
            state = local.collect_table(frame.select(*self._state_schema.fieldNames()), self._num_vertices)
            state = state.cast(schema)
        self._base_table = None
        metrics = observation.get if observation is not None else {}
        self._persist(state, 0)
        self._local = local.LocalGraph(edges, new_edges if self._evolving(1) else None, state)
        stats = SuperstepStats(
            superstep=0,
            messages_sent=0,
            vertices_changed=state.num_rows,
            active_vertices=state.num_rows,
            elapsed_ms=0.0,
            num_vertices=self._num_vertices,
            aggregates={name: _jsonable(metrics.get(name)) for name in user},
            state_uri=self.folder.superstep_uri(0),
        )
        return self._close(stats, True, started)

    def resume(self, *, from_superstep: int | None = None, stop_after: int | None = None) -> GraphResult:
        """Continue the computation in ``folder`` from its last complete superstep, or from
        ``from_superstep`` (a complete one, e.g. the superstep of the checkpoint being restored: the
        supersteps after it are deleted and computed again).

        The edges and the vertex state are read from the folder (nothing else is needed); the result
        is the one an uninterrupted run gives. A computation that had halted is returned as it is.
        """
        manifest = self.folder.read_manifest()
        if manifest is None:
            raise GraphStateError(
                f"state folder {self.folder.uri} holds no graph computation to resume: start one with run()"
            )
        described = self.program.describe()
        if (manifest.get("program"), manifest.get("params")) != (described["program"], described["params"]):
            raise GraphStateError(
                f"state folder {self.folder.uri} holds a run of {manifest.get('program')} "
                f"{manifest.get('params')}, not of {described['program']} {described['params']}: resume it "
                "with the same program and parameters, or run this one in another folder"
            )
        last = self.folder.last_completed()
        if last is None:
            raise GraphStateError(
                f"state folder {self.folder.uri} has no complete superstep (the run stopped during "
                "superstep 0): empty the folder and start again with run()"
            )
        if from_superstep is not None and from_superstep != last:
            if from_superstep not in self.folder.completed():
                raise GraphStateError(
                    f"superstep {from_superstep} is not complete in {self.folder.uri} (complete: "
                    f"{self.folder.completed()}): resume from one of those, or from the last (from_superstep=None)"
                )
            for later in [s for s in self.folder.completed() if s > from_superstep]:
                self.folder.delete_superstep(later)
            last = from_superstep
        self._num_vertices = manifest["num_vertices"]
        self._dynamic = manifest["dynamic"]
        self._state_schema = StructType.fromJson(manifest["state_schema"])
        self._edges_schema = StructType.fromJson(manifest["edges_schema"])
        self._edge_sources = manifest.get("edge_sources")
        record = self.folder.read_record(last)
        assert record is not None
        stats = SuperstepStats.from_json(record)
        if stats.halted_by is not None:
            return self._result(stats, [])
        self._localize(last)
        return self._loop(stats, stop_after, resumed=True)

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self, stats: SuperstepStats, stop_after: int | None, resumed: bool = False) -> GraphResult:
        done: list[SuperstepStats] = []
        if not resumed:
            done.append(stats)
            self._after(stats)
        while stats.halted_by is None and (stop_after is None or stats.superstep < stop_after):
            stats = self._superstep(stats.superstep + 1, stats.aggregates, stats.messages_sent)
            done.append(stats)
            self._after(stats)
        if stats.superstep in self._held:  # stopped (stop_after) between checkpoints: write where it stopped
            self._persist(self._held[stats.superstep], stats.superstep)
            self._held.clear()
            stats = SuperstepStats(**{**stats.__dict__, "checkpointed": True})
            self.folder.write_record(stats.superstep, stats.to_json())
        return self._result(stats, done)

    def _after(self, stats: SuperstepStats) -> None:
        if self.on_superstep is not None:
            self.on_superstep(stats)
        if self.keep_last is not None:
            for s in self.folder.completed():
                if s <= stats.superstep - self.keep_last:
                    self.folder.delete_superstep(s)

    def _result(self, stats: SuperstepStats, done: list[SuperstepStats]) -> GraphResult:
        assert self._state_schema is not None and self._edges_schema is not None
        return GraphResult(
            self.program, self.folder, stats.superstep, stats.halted_by, done, self.spark,
            self._state_schema, self._edges_schema, self._edge_sources,
        )

    # -- one superstep -------------------------------------------------------------------------

    def _edges(self) -> DataFrame:
        assert self._edges_schema is not None
        return self.spark.read.schema(self._edges_schema).parquet(*(self._edge_sources or [self.folder.edges_uri]))

    def tag_of(self) -> dict[str, Any] | None:
        """The ``tag`` recorded by the run in ``folder`` (None: none, or no run there)."""
        manifest = self.folder.read_manifest()
        return None if manifest is None else manifest.get("tag")

    def _state(self, superstep: int) -> DataFrame:
        assert self._state_schema is not None
        if superstep in self._held:
            return self._held[superstep]
        return self.spark.read.schema(self._state_schema).parquet(self.folder.superstep_uri(superstep))

    def _call(self, fn: str, ctx: Any, kind: type) -> Any:
        out = getattr(self.program, fn)(ctx)
        if not isinstance(out, kind):
            what = "a Column (the vertex value)" if kind is Column else "a Step(value, send_out=, send_in=)"
            raise ProgramReturnError(
                f"{self.program.name}.{fn} returned {type(out).__name__} {out!r:.80}, not {what}. Fix: return "
                f"{what}; build it from the ctx columns and pyspark.sql.functions (F.lit(x) for a constant)"
            )
        return out

    def _superstep(self, s: int, aggregates: dict[str, Any], delivered: int | None = None) -> SuperstepStats:
        """Superstep ``s`` (``delivered``: the messages superstep ``s - 1`` sent, which bounds the
        senders of a superstep where only the vertices with messages compute)."""
        if self._local is not None:
            return self._superstep_local(s, aggregates)
        started = time.perf_counter()
        prev = self._state(s - 1)
        touched = None
        if self._evolving(s):
            new_edges = self.spark.read.schema(self._edges_schema).parquet(self.folder.new_edges_uri)
            ends = new_edges.select(F.col("src").alias("id")).union(new_edges.select(F.col("dst").alias("id")))
            prev = prev.join(ends.distinct().withColumn("__touched", F.lit(True)), "id", "left")
            touched = F.coalesce(F.col("__touched"), F.lit(False))
        step = self._step(s, aggregates, prev, touched)
        computed, sends = step.frame, step.sends
        attrs, message_type = step.attrs, step.message_type

        routes = (
            self.spark.read.schema(self._edges_schema).parquet(self.folder.new_edges_uri)
            if step.evolving
            else self._edges()
        )
        few_senders = not step.everyone and delivered is not None and delivered <= BROADCAST_SENDERS
        parts = []
        for k, (key, _) in ROUTES.items():
            if k not in sends:
                continue
            sender = computed.where(F.col(f"__{k}").isNotNull()).select(
                F.col("id").alias("__sender"), F.col(f"__{k}").alias("__message")
            )
            if few_senders:  # the edges are scanned once, not shuffled (Spark sizes the state by its files)
                sender = F.broadcast(sender)
            joined = sender.join(routes, F.col("__sender") == routes[key])
            parts.append(self._along_edge(k, joined, message_type))

        if parts:
            # one shuffle: the vertices and their messages grouped by vertex together (no join)
            keep = [*attrs, VALUE, "__old", "__active", OUT_DEGREE, IN_DEGREE, "__vertex"]
            rows = computed.select("id", *keep[:-1], F.lit(True).alias("__vertex"))
            for part in parts:
                rows = rows.unionByName(part, allowMissingColumns=True)
            new = self._combined(rows, message_type, [F.first(c, ignorenulls=True).alias(c) for c in keep])
            new = new.where(F.col("__vertex"))
        else:
            new = computed.withColumn(INBOX, F.lit(None).cast(message_type)).withColumn(
                COUNT, F.lit(0).cast(LongType())
            )
        changed = new.withColumn("__changed", ~F.col(VALUE).eqNullSafe(F.col("__old")))
        return self._write(s, new, changed, started)

    def _evolving(self, s: int) -> bool:
        """True when superstep ``s`` runs the program's ``evolve`` (over the window's new edges)."""
        return self._dynamic and s == 1 and self.program.has_evolve()

    def _vertex_ctx(self, s: int, aggregates: dict[str, Any], touched: Column | None) -> VertexContext:
        """The ``ctx`` of ``compute`` (or ``evolve``) at superstep ``s``: Columns of the state."""
        return VertexContext(
            id=F.col("id"),
            value=F.col(VALUE),
            messages=F.col(INBOX),
            message_count=F.col(COUNT),
            out_degree=F.col(OUT_DEGREE),
            in_degree=F.col(IN_DEGREE),
            superstep=s,
            num_vertices=self._num_vertices,
            aggregates=aggregates,
            touched=touched,
        )

    def _evolve_keeps_values(self, s: int, aggregates: dict[str, Any], touched: Column) -> bool:
        """True when the program's ``evolve`` gives every vertex its value as it is (``ctx.value``
        itself): then only the new edges' endpoints, which alone send along them, need computing."""
        step = self._call("evolve", self._vertex_ctx(s, aggregates, touched), Step)
        return str(step.value) == str(F.col(VALUE))

    def _step(self, s: int, aggregates: dict[str, Any], prev: DataFrame, touched: Column | None) -> _Computed:
        """The program's ``compute`` (or ``evolve``) over ``prev``, type-checked: every vertex's new
        value (``VALUE``, the old one as ``__old``), whether it computed (``__active``) and its
        messages (``__send_out``, ``__send_in``), with the attributes and degrees."""
        program = self.program
        assert self._state_schema is not None
        value_type = self._state_schema[VALUE].dataType
        message_type = self._state_schema[INBOX].dataType
        attrs = [c for c in prev.columns if c != "id" and not c.startswith("__")]
        evolving = self._evolving(s)
        fn = "evolve" if evolving else "compute"
        step = self._call(fn, self._vertex_ctx(s, aggregates, touched), Step)

        everyone = s == 1 or program.compute_all
        active = F.lit(True) if everyone else F.col(COUNT) > 0
        columns = {"value": step.value, "send_out": step.send_out, "send_in": step.send_in}
        probe = prev.select(*[c.alias(k) for k, c in columns.items() if c is not None])
        found = {f.name: f.dataType for f in probe.schema.fields}
        casts: dict[str, DataType] = {}
        for k, t in found.items():
            want = value_type if k == "value" else message_type
            if isinstance(t, NullType):
                casts[k] = want
            elif not _same_type(t, want):
                raise step_type_error(program.name, fn, s, k, _type_name(t), _type_name(want))

        def shaped(k: str) -> Column | None:
            c = columns[k]
            if c is None:
                return None
            return c.cast(casts[k]) if k in casts else c

        value = shaped("value")
        assert value is not None
        if not everyone:
            value = F.when(active, value).otherwise(F.col(VALUE))
        sends = {k: shaped(k) for k in ROUTES}
        sends = {k: (c if everyone else F.when(active, c)) for k, c in sends.items() if c is not None}
        frame = prev.select(
            "id",
            *attrs,
            value.alias(VALUE),
            F.col(VALUE).alias("__old"),
            active.alias("__active"),
            *[c.alias(f"__{k}") for k, c in sends.items()],
            F.col(OUT_DEGREE),
            F.col(IN_DEGREE),
        )
        return _Computed(frame, list(sends), everyone, evolving, attrs, message_type)

    def _along_edge(self, k: str, joined: DataFrame, message_type: DataType) -> DataFrame:
        """The ``k`` messages (``send_out``, ``send_in``) joined with their edges as they arrive:
        ``id`` (the receiving vertex) and ``__m``, shaped by the program's ``along_edge``."""
        program = self.program
        to = ROUTES[k][1]
        edge = EdgeContext(src=F.col("src"), dst=F.col("dst"), direction="out" if k == "send_out" else "in")
        message = program.along_edge(F.col("__message"), edge)
        part = joined.select(F.col(to).alias("id"), message.alias("__m"))
        t = part.schema["__m"].dataType
        if not _same_type(t, message_type):
            raise MessageTypeError(
                f"{program.name}.along_edge turned a {k} message of type {_type_name(message_type)} into "
                f"{_type_name(t)}, but {program.name}'s messages are {_type_name(message_type)}. Fix: "
                f"cast it in {program.name}.along_edge, e.g. .cast('{_type_name(message_type)}'), or set "
                f"{program.name}.message_type"
            )
        return part

    def _combined(self, rows: DataFrame, message_type: DataType, keep: list[Column]) -> DataFrame:
        """``rows`` (``id``, messages ``__m``) grouped by ``id``: ``keep``, the combined message
        (``INBOX``, of the message type) and how many were combined (``COUNT``)."""
        program = self.program

        def grouped(cast: bool) -> DataFrame:
            combined = program.combiner.aggregate(F.col("__m"))
            return rows.groupBy("id").agg(
                *keep,
                (combined.cast(message_type) if cast else combined).alias(INBOX),
                F.count("__m").alias(COUNT),
            )

        new = grouped(cast=False)
        t = new.schema[INBOX].dataType
        if not _same_type(t, message_type):
            if not program.combiner.cast:
                raise MessageTypeError(
                    f"{program.name}.combiner ({program.combiner.name}) combines messages of type "
                    f"{_type_name(message_type)} into {_type_name(t)}. Fix: make the combiner's aggregate "
                    f"keep the type, e.g. .cast('{_type_name(message_type)}')"
                )
            new = grouped(cast=True)
        return new

    # -- a small graph on the driver -----------------------------------------------------------

    def _localize(self, s: int) -> None:
        """Hold the graph on the driver from superstep ``s`` on when it is small enough (see
        :mod:`lockgate.graph.local`): its edges are read once, its state taken from the write of
        superstep ``s`` (or read back, on a resume)."""
        self._local = None
        limit = self._local_limit()
        assert self._state_schema is not None and self._edges_schema is not None
        plain = all(isinstance(f.dataType, _PLAIN) for f in self._state_schema)
        if not (plain and self._plain_edges() and 0 < self._num_vertices <= limit):
            return
        edges = None
        if self._edge_sources is not None:
            edges = local.read_edges(self._edge_sources, to_arrow_schema(self._edges_schema), local.LOCAL_EDGES)
        if edges is None:
            edges = local.collect_edges(self._edges())
        if edges is None:
            return
        new_edges = None
        if self._evolving(s + 1):
            new_edges = local.collect_table(
                self.spark.read.schema(self._edges_schema).parquet(self.folder.new_edges_uri)
            )
        if self._written is not None and self._written[0] == s:
            state = self._written[1]
        else:
            state = local.collect_table(self._state(s))
        self._local = local.LocalGraph(edges, new_edges, state.cast(self._arrow_state_schema()))

    def _arrow_state_schema(self) -> pa.Schema:
        assert self._state_schema is not None
        return to_arrow_schema(self._state_schema)

    def _superstep_local(self, s: int, aggregates: dict[str, Any]) -> SuperstepStats:
        """Superstep ``s`` of a graph held on the driver (:mod:`lockgate.graph.local`)."""
        started = time.perf_counter()
        held = self._local
        assert held is not None and self._state_schema is not None
        program = self.program
        table = held.state
        touched = None
        if self._evolving(s):
            assert held.new_edges is not None
            table = table.append_column("__touched", local.touched(table["id"], held.new_edges))
            touched = F.col("__touched")
        user = self._user_aggregates(s)
        # only the vertices with messages compute after superstep 1, and only the new edges' ends
        # in an evolve that keeps every value: the others keep their value and send nothing, so
        # Spark evaluates the program over those alone (a superstep's cost follows the active
        # vertices). Aggregates see every vertex: then all of them go through.
        resting = None
        computing = None
        resting_active = False
        if not (s == 1 or program.compute_all or user):
            computing = pc.greater(table[COUNT], 0)
        elif touched is not None and not user and self._evolve_keeps_values(s, aggregates, touched):
            computing = table["__touched"]  # the messages travel along the new edges: their ends send
            resting_active = True
        if computing is not None and 0 < local.count_true(computing) < table.num_rows:
            resting, table = table.filter(pc.invert(computing)), table.filter(computing)
        step = self._step(s, aggregates, self.spark.createDataFrame(table), touched)
        frame = step.frame
        observation = None
        if user:  # observed in the same pass: over the new values and the old, which routing leaves alone
            observation = Observation(f"lockgate_graph_{id(self)}_{s}_{time.monotonic_ns()}")
            frame = frame.observe(observation, *[c.alias(name) for name, c in user.items()])
        computed = local.collect_table(frame, table.num_rows)
        if resting is not None:
            computed = pa.concat_tables([computed, local.at_rest(resting, computed.schema, VALUE, resting_active)])
        metrics = observation.get if observation is not None else {}

        routes = held.new_edges if step.evolving else held.edges
        assert routes is not None
        schema = held.state.schema  # the state schema in Arrow types, held since superstep 0
        arrow_message = schema.field(INBOX).type
        identity = type(program).along_edge is VertexProgram.along_edge
        parts = []
        for k, (key, to) in ROUTES.items():
            if k not in step.sends:
                continue
            joined = local.route(computed, f"__{k}", routes, key)
            if identity:
                parts.append(joined.select([to, "__message"]).rename_columns(["id", "__m"]))
            else:
                part = self._along_edge(k, self.spark.createDataFrame(joined), step.message_type)
                parts.append(local.collect_table(part, joined.num_rows).cast(pa.schema([("id", joined.schema.field(to).type),
                                                                        ("__m", arrow_message)])))
        ids = computed["id"]
        if not parts:
            inbox = pa.nulls(len(ids), arrow_message)
            count = pa.array([0] * len(ids), pa.int64())
        else:
            messages = pa.concat_tables(parts)
            if program.combiner in (SUM, MIN, MAX) and local.combinable(program.combiner.name, messages):
                inbox, count = local.combine(ids, messages, program.combiner.name, arrow_message)
            else:  # a custom combiner: a Spark aggregate over the messages
                combined = self._combined(self.spark.createDataFrame(messages), step.message_type, [])
                inbox, count = local.align(ids, local.collect_table(combined, messages.num_rows), INBOX, COUNT)

        new = computed.append_column(INBOX, inbox).append_column(COUNT, count)
        state = new.select(schema.names).cast(schema)
        held.state = state
        stats = SuperstepStats(
            superstep=s,
            messages_sent=int(pc.sum(count).as_py() or 0),
            vertices_changed=local.count_true(local.changed(new[VALUE], new["__old"])),
            active_vertices=local.count_true(new["__active"]),
            elapsed_ms=0.0,
            num_vertices=self._num_vertices,
            aggregates={name: _jsonable(metrics.get(name)) for name in user},
            state_uri=self.folder.superstep_uri(s),
        )
        written = s % self.checkpoint_every == 0
        if written:
            self._persist(state, s)
        else:
            self._held = {s: state}
        return self._close(stats, written, started)

    # -- writing a superstep -------------------------------------------------------------------

    def _persist(self, frame: DataFrame | pa.Table, s: int) -> None:
        """Write superstep ``s``'s state: from the driver for a small graph, else by Spark."""
        assert self._state_schema is not None
        if isinstance(frame, pa.Table):
            self.folder.write_state(s, frame)
            self._written = (s, frame)
            return
        small = 0 < self._num_vertices <= self.driver_vertices
        if small and all(isinstance(f.dataType, _PLAIN) for f in self._state_schema.fields):
            table = frame.toArrow()
            self.folder.write_state(s, table)
            self._written = (s, table)
        else:
            frame.write.mode("overwrite").parquet(self.folder.superstep_uri(s))

    def _user_aggregates(self, s: int) -> dict[str, Column]:
        """The program's aggregates over superstep ``s``'s state (names checked)."""
        program = self.program
        actx = AggregateContext(
            id=F.col("id"),
            value=F.col(VALUE),
            previous=F.col("__old"),
            out_degree=F.col(OUT_DEGREE),
            in_degree=F.col(IN_DEGREE),
            superstep=s,
            num_vertices=self._num_vertices,
        )
        user = program.aggregates(actx)
        for name in user:
            if name.startswith("__"):
                raise GraphInputError(f"{program.name}.aggregates: the name {name!r} is reserved (starts with __)")
        return user

    def _write(self, s: int, new: DataFrame, changed: DataFrame, started: float) -> SuperstepStats:
        """Write superstep ``s``'s state (``new`` has ``__old`` and ``__active``; ``changed``
        adds ``__changed``), with its stats observed in the same job, then decide whether to halt."""
        assert self._state_schema is not None
        user = self._user_aggregates(s)
        observation = Observation(f"lockgate_graph_{id(self)}_{s}_{time.monotonic_ns()}")
        observed = changed.observe(
            observation,
            F.coalesce(F.sum(COUNT), F.lit(0)).alias("__messages"),
            F.coalesce(F.sum(F.col("__changed").cast("long")), F.lit(0)).alias("__changed"),
            F.coalesce(F.sum(F.col("__active").cast("long")), F.lit(0)).alias("__active"),
            *[c.alias(name) for name, c in user.items()],
        )
        frame = observed.select(*self._state_schema.fieldNames())
        self.last_superstep_frame = frame
        written = s == 0 or s % self.checkpoint_every == 0
        if written:
            self._persist(frame, s)
        else:  # held by Spark: the lineage is cut, the folder is not written
            self._held = {s: frame.localCheckpoint(eager=True)}
        metrics = observation.get
        stats = SuperstepStats(
            superstep=s,
            messages_sent=int(metrics["__messages"]),
            vertices_changed=int(metrics["__changed"]),
            active_vertices=int(metrics["__active"]),
            elapsed_ms=0.0,
            num_vertices=self._num_vertices,
            aggregates={name: _jsonable(metrics.get(name)) for name in user},
            state_uri=self.folder.superstep_uri(s),
        )
        return self._close(stats, written, started)

    def _close(self, stats: SuperstepStats, written: bool, started: float) -> SuperstepStats:
        """Decide whether the computation halts after ``stats``' superstep, write the state it held
        when it does (the final state is always checkpointed), and record a written superstep."""
        program, s = self.program, stats.superstep
        halted_by = None
        if s > 0:
            if program.halt_when is Halt.NO_MESSAGES and stats.messages_sent == 0:
                halted_by = "no_messages"
            elif program.halt_when is Halt.NO_CHANGE and s >= 2 and stats.vertices_changed == 0:
                halted_by = "no_change"
            elif program.converged(stats):
                halted_by = "converged"
            elif self.max_supersteps is not None and s >= self.max_supersteps:
                halted_by = "max_supersteps"
        if halted_by is not None and not written:
            self._persist(self._held[s], s)
            self._held.clear()
            written = True
        elapsed = round((time.perf_counter() - started) * 1000, 1)
        stats = SuperstepStats(**{**stats.__dict__, "elapsed_ms": elapsed, "halted_by": halted_by,
                                  "checkpointed": written})
        if written:
            self._held.clear()
            self.folder.write_record(s, stats.to_json())
        return stats

    def _check_inputs(
        self,
        edges: DataFrame,
        vertices: DataFrame | None,
        previous: DataFrame | None,
        new_edges: DataFrame | None,
    ) -> None:
        for name, df, need in (
            ("edges", edges, ("src", "dst")),
            ("vertices", vertices, ("id",)),
            ("previous", previous, ("id", "value")),
            ("new_edges", new_edges, ("src", "dst")),
        ):
            if df is None:
                continue
            missing = [c for c in need if c not in df.columns]
            if missing:
                raise GraphInputError(
                    f"{name} has no column {missing[0]!r} (it has {df.columns}): rename its columns to "
                    f"{', '.join(need)}"
                )
            reserved = [c for c in df.columns if c.startswith("__")]
            if reserved:
                raise GraphInputError(f"{name} has column {reserved[0]!r}: names starting with __ are reserved")
        if vertices is not None and "value" in vertices.columns:
            raise GraphInputError("vertices has a column 'value', the name of the vertex value: rename it")
        if new_edges is not None and sorted(new_edges.columns) != sorted(edges.columns):
            raise GraphInputError(
                f"new_edges has columns {new_edges.columns} but edges has {edges.columns}: give them the same"
            )


__all__ = ["GraphResult", "SuperstepDriver", "SuperstepStats"]
