"""The user's DSL: Pipeline, Stream, windows, aggregates, sources and sinks."""

from .aggregates import Aggregate, approx_distinct, avg, collect, count, count_distinct, max, min, sum, top_k
from .graphs import Graph
from .loader import ReferencePolicy, load_pipeline, pipeline_factory
from .nodes import Input, OpNode
from .pipeline import Pipeline
from .sinks import CollectSink, DeltaSink, FileSink, IcebergSink, PostgresSink, Sink
from .sources import FileSource, NatsSource, NexmarkSource, PostgresSource, Source
from .stream import Stream, WindowedStream
from .tables import FileTable, LookupTable, PostgresTable
from .windows import Session, Sliding, Tumbling, Watermark, WindowSpec

__all__ = [
    "Aggregate",
    "CollectSink",
    "DeltaSink",
    "FileSink",
    "FileSource",
    "FileTable",
    "Graph",
    "IcebergSink",
    "LookupTable",
    "Input",
    "NatsSource",
    "NexmarkSource",
    "OpNode",
    "Pipeline",
    "PostgresSink",
    "PostgresSource",
    "PostgresTable",
    "Session",
    "Sink",
    "Sliding",
    "Source",
    "Stream",
    "Tumbling",
    "Watermark",
    "WindowSpec",
    "WindowedStream",
    "ReferencePolicy",
    "load_pipeline",
    "pipeline_factory",
    "approx_distinct",
    "avg",
    "collect",
    "count",
    "count_distinct",
    "max",
    "min",
    "sum",
    "top_k",
]
