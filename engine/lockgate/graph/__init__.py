"""Graph computations on Spark: vertex-centric programs (GeaFlow-style) run superstep by superstep.

- :mod:`lockgate.graph.compute`: the program API (:class:`VertexProgram`, :class:`Step`,
  combiners, halting rules);
- :mod:`lockgate.graph.superstep`: the driver (:class:`SuperstepDriver`), its per-superstep stats
  and results;
- :mod:`lockgate.graph.state`: the state folder (each superstep's vertex state in Parquet);
- :mod:`lockgate.graph.library`: PageRank, connected components, shortest paths, label
  propagation, k-hop traversal, with incremental forms;
- :mod:`lockgate.graph.errors`: the errors.

>>> from lockgate.graph import SuperstepDriver
>>> from lockgate.graph.library import ConnectedComponents
>>> # SuperstepDriver(ConnectedComponents(), "/tmp/cc", spark=spark).run(edges).output
"""

from lockgate.graph.compute import (
    MAX,
    MIN,
    SUM,
    AggregateContext,
    Combiner,
    EdgeContext,
    Halt,
    Step,
    VertexContext,
    VertexProgram,
)
from lockgate.graph.errors import (
    GraphError,
    GraphInputError,
    GraphStateError,
    MessageTypeError,
    NoHaltingRuleError,
    ProgramReturnError,
    VertexValueTypeError,
)
from lockgate.graph.state import StateFolder, last_completed_superstep
from lockgate.graph.stats import SuperstepStats
from lockgate.graph.superstep import GraphResult, SuperstepDriver

__all__ = [
    "MAX",
    "MIN",
    "SUM",
    "AggregateContext",
    "Combiner",
    "EdgeContext",
    "GraphError",
    "GraphInputError",
    "GraphResult",
    "GraphStateError",
    "Halt",
    "MessageTypeError",
    "NoHaltingRuleError",
    "ProgramReturnError",
    "StateFolder",
    "Step",
    "SuperstepDriver",
    "SuperstepStats",
    "VertexContext",
    "VertexProgram",
    "VertexValueTypeError",
    "last_completed_superstep",
]
