"""Plans: the logical PipelineGraph, the physical ExecutionGraph, compile and explain.

Nothing here imports Spark or the runtime: compiling infers schemas through the
:class:`SchemaInference` it is handed (on Spark: :func:`lockgate.runtime.compiler.compile_pipeline`).
"""

from .compile import CompiledPlan, SchemaInference, check_structure, compile_pipeline
from .explain import explain, explain_json
from .logical import OperatorKind, Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from .physical import STREAM, Cycle, ExecutionGraph, ExecutionGroup, OperatorChain, Step

__all__ = [
    "STREAM",
    "CompiledPlan",
    "Cycle",
    "ExecutionGraph",
    "ExecutionGroup",
    "OperatorChain",
    "OperatorKind",
    "Partitioning",
    "PipelineEdge",
    "PipelineGraph",
    "PipelineVertex",
    "SchemaInference",
    "Step",
    "check_structure",
    "compile_pipeline",
    "explain",
    "explain_json",
]
