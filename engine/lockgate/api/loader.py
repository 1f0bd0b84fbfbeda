"""Loading a pipeline from a reference: ``path/to/file.py:attr`` or ``package.module:attr``."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys

from ..errors import PipelineLoadError
from .pipeline import Pipeline


def load_pipeline(ref: str) -> Pipeline:
    """Import the module named by ``ref`` and return its pipeline attribute.

    ``attr`` may name a :class:`Pipeline` or a function with no arguments returning one;
    ``:attr`` may be left out when the module has a single pipeline named ``pipeline``.

    >>> load_pipeline("examples/nexmark_demo.py:pipeline")
    Pipeline('nexmark_demo', operators=['bids', 'auction_windows', 'auction_windows_files', 'bidder_totals', 'bidder_totals_sink'])
    """
    target, _, attr = ref.partition(":")
    attr = attr or "pipeline"
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise PipelineLoadError(f"pipeline file {target!r} does not exist (reference {ref!r})")
        name = "lockgate_pipeline_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise PipelineLoadError(f"cannot import {path!r}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[name]
            raise PipelineLoadError(f"importing {target!r} failed: {type(err).__name__}: {err}") from err
        _ship_by_value(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as err:
            raise PipelineLoadError(
                f"cannot import module {target!r} ({err}); use path/to/file.py:attr or an importable module"
            ) from err
    if not hasattr(module, attr):
        found = [k for k, v in vars(module).items() if isinstance(v, Pipeline)]
        hint = f"; pipelines in it: {', '.join(found)}" if found else ""
        raise PipelineLoadError(f"{target!r} has no attribute {attr!r}{hint}")
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Pipeline):
        obj = obj()
    if not isinstance(obj, Pipeline):
        raise PipelineLoadError(f"{ref!r} is a {type(obj).__name__}, not a lockgate.Pipeline")
    return obj


def _ship_by_value(module: object) -> None:
    """Spark's Python workers cannot import a pipeline *file* by its synthetic module
    name: pickle its functions (map_batches, UDFs) with their code instead."""
    try:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except (ImportError, ValueError):  # pragma: no cover - Spark absent or already registered
        pass
