"""Plans: the logical PipelineGraph, the physical ExecutionGraph, compile and explain."""

from .compile import CompiledPlan, check_structure, compile_pipeline
from .explain import explain, explain_json
from .logical import OperatorKind, Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from .physical import Cycle, ExecutionGraph, ExecutionGroup, OperatorChain

__all__ = [
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
    "check_structure",
    "compile_pipeline",
    "explain",
    "explain_json",
]
