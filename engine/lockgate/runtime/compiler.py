"""Compiling a pipeline on Spark: the entry point callers use.

:func:`compile_pipeline` hands the plan layer's
:func:`lockgate.plan.compile.compile_pipeline` the Spark-backed schema inference of
:mod:`lockgate.runtime.analysis`.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from ..api.pipeline import Pipeline
from ..plan.compile import CompiledPlan
from ..plan.compile import compile_pipeline as compile_with
from .analysis import SparkSchemaInference


def compile_pipeline(pipeline: Pipeline, spark: SparkSession | None = None) -> CompiledPlan:
    """Validate ``pipeline`` and build its logical and physical plans, inferring every
    operator's schema with Spark's analyzer (on ``spark``, or the process's session).

    Raises :class:`~lockgate.errors.CompileError` naming the operator and the fix.

    >>> plan = compile_pipeline(load_pipeline("examples/nexmark_demo.py:pipeline"))
    >>> len(plan.version), plan.execution.cycles[0].mode    # a stable 16-hex-digit hash; one stream cycle
    (16, 'stream')
    """
    return compile_with(pipeline, SparkSchemaInference(spark))


__all__ = ["compile_pipeline"]
