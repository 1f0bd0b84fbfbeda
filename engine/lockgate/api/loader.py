"""Loading a pipeline from a reference: ``path/to/file.py:attr`` or ``package.module:attr``.

Loading a reference runs code: the module's top-level code, and the factory function the
reference may name. A controller therefore confines references with a
:class:`ReferencePolicy` (``lockgate server --pipelines DIR --pipeline-modules PREFIX``),
checked before anything is imported, and loads them ``strict``: ``attr`` must be a
:class:`Pipeline`, or a function marked with :func:`pipeline_factory`, checked before it
is called.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import PipelineLoadError, PipelineRefusedError
from ..names import hidden_character
from .pipeline import Pipeline

#: the longest reference accepted (a path and an attribute)
MAX_REFERENCE = 4096
_FACTORY_MARK = "__lockgate_pipeline_factory__"

F = TypeVar("F", bound=Callable[..., Any])


def pipeline_factory(fn: F) -> F:
    """Mark a function with no arguments that returns a :class:`Pipeline` as one a
    reference (``file.py:make`` or ``module:make``) may name.

    >>> @pipeline_factory
    ... def make() -> Pipeline:
    ...     return Pipeline("made")
    >>> is_pipeline_factory(make)
    True
    """
    if not inspect.isfunction(fn):
        raise TypeError(f"@pipeline_factory marks a function, not a {type(fn).__name__}")
    setattr(fn, _FACTORY_MARK, True)
    return fn


def is_pipeline_factory(obj: object) -> bool:
    """Whether ``obj`` is a function marked with :func:`pipeline_factory`."""
    return inspect.isfunction(obj) and getattr(obj, _FACTORY_MARK, False) is True


@dataclass(frozen=True)
class Reference:
    """A parsed pipeline reference."""

    ref: str
    target: str
    attr: str

    @property
    def is_file(self) -> bool:
        return self.target.endswith(".py") or os.sep in self.target or "/" in self.target


def parse_reference(ref: str) -> Reference:
    """Check a reference's form (nothing is looked up): PipelineLoadError when it is not
    ``path/to/file.py[:attr]`` or ``package.module[:attr]``."""
    if not isinstance(ref, str) or not ref.strip():
        raise PipelineLoadError("the pipeline reference is empty: give path/to/file.py:attr or module:attr")
    if len(ref) > MAX_REFERENCE:
        raise PipelineLoadError(f"the pipeline reference is {len(ref)} characters long, more than {MAX_REFERENCE}")
    bad = hidden_character(ref)
    if bad is not None:
        raise PipelineLoadError(f"the pipeline reference holds the control or format character {bad} (a NUL, a "
                                "newline, a C1 control, a bidi override...)")
    target, _, attr = ref.partition(":")
    attr = attr or "pipeline"
    if not attr.isidentifier():
        raise PipelineLoadError(f"{ref!r}: the attribute after ':' must be a Python name, got {attr!r}")
    r = Reference(ref, target, attr)
    if not target:
        raise PipelineLoadError(f"{ref!r}: give path/to/file.py:attr or module:attr")
    if not r.is_file and not all(part.isidentifier() for part in target.split(".")):
        raise PipelineLoadError(f"{ref!r}: {target!r} is neither a .py file nor a dotted module name")
    return r


@dataclass(frozen=True)
class ReferencePolicy:
    """Where pipeline references may come from.

    ``folders``: files under these folders (symbolic links resolved first); ``modules``:
    modules named ``prefix`` or ``prefix.*``. ``unrestricted``: any reference (the embedded
    client's, and a development controller's ``--allow-any-pipeline``). With neither folders,
    modules nor ``unrestricted``, every reference is refused. Relative paths are taken from
    ``base`` (the folder the worker loads them in)."""

    folders: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    base: str | None = None
    unrestricted: bool = False

    @classmethod
    def of(cls, folders: Sequence[str], modules: Sequence[str], base: str | None = None,
           unrestricted: bool = False) -> ReferencePolicy:
        return cls(tuple(os.path.realpath(os.path.expanduser(f)) for f in folders),
                   tuple(m.strip().rstrip(".") for m in modules if m.strip().rstrip(".")), base, unrestricted)

    @property
    def confined(self) -> bool:
        return bool(self.folders or self.modules)

    def describe(self) -> str:
        parts = []
        if self.folders:
            parts.append("files under " + ", ".join(self.folders) + " (--pipelines)")
        if self.modules:
            parts.append("modules " + ", ".join(f"{m} or {m}.*" for m in self.modules) + " (--pipeline-modules)")
        return " and ".join(parts) or "nothing"

    def _refused(self, ref: str) -> PipelineRefusedError:
        # one message whatever the reason: it must not tell whether a file exists outside
        if not self.confined:
            return PipelineRefusedError(
                f"pipeline reference {ref!r} refused: this controller accepts no pipeline references until it is "
                "told where they may come from: start it with --pipelines DIR and/or --pipeline-modules PREFIX "
                "(or --allow-any-pipeline, on loopback, for development)")
        return PipelineRefusedError(
            f"pipeline reference {ref!r} refused: this controller loads only {self.describe()}"
        )

    def check(self, ref: str) -> Reference:
        """The parsed reference, when the policy accepts it; PipelineRefusedError (before
        anything is imported or opened) when it does not."""
        r = parse_reference(ref)
        if self.unrestricted:
            return r
        if not self.confined:
            raise self._refused(ref)
        if r.is_file:
            if not r.target.endswith(".py") or not self.folders:
                raise self._refused(ref)
            path = os.path.join(self.base or os.getcwd(), os.path.expanduser(r.target))
            real = os.path.realpath(path)
            for folder in self.folders:
                if real != folder and os.path.commonpath([real, folder]) == folder:
                    return r
            raise self._refused(ref)
        if any(r.target == m or r.target.startswith(m + ".") for m in self.modules):
            return r
        raise self._refused(ref)


def load_pipeline(ref: str, *, policy: ReferencePolicy | None = None, strict: bool = False) -> Pipeline:
    """Import the module named by ``ref`` and return its pipeline attribute.

    ``attr`` may name a :class:`Pipeline` or a function with no arguments returning one;
    ``:attr`` may be left out when the module has a single pipeline named ``pipeline``.
    A function is called only when it is marked with :func:`pipeline_factory` or, unless
    ``strict`` (as on a controller), when it is a plain function defined in that module.
    ``policy`` refuses references from elsewhere before anything is imported.

    >>> load_pipeline("examples/nexmark_demo.py:pipeline")
    Pipeline('nexmark_demo', operators=['bids', 'auction_windows', 'auction_windows_files', 'bidder_totals', 'bidder_totals_sink'])
    """
    r = (policy or ReferencePolicy(unrestricted=True)).check(ref)
    target, attr = r.target, r.attr
    if r.is_file:
        base = policy.base if policy is not None and policy.base else os.getcwd()
        path = os.path.realpath(os.path.join(base, os.path.expanduser(target)))
        if not os.path.isfile(path):
            raise PipelineLoadError(f"pipeline file {target!r} does not exist (reference {ref!r})")
        name = "lockgate_pipeline_" + hashlib.sha1(path.encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise PipelineLoadError(f"cannot import {target!r}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as err:
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
        except (Exception, SystemExit) as err:
            raise PipelineLoadError(f"importing module {target!r} failed: {type(err).__name__}: {err}") from err
    if not hasattr(module, attr):
        found = [k for k, v in vars(module).items() if isinstance(v, Pipeline)]
        hint = f"; pipelines in it: {', '.join(found)}" if found else ""
        raise PipelineLoadError(f"{target!r} has no attribute {attr!r}{hint}")
    obj = getattr(module, attr)
    if not isinstance(obj, Pipeline):
        obj = _call_factory(ref, obj, module.__name__, strict)
    if not isinstance(obj, Pipeline):
        raise PipelineLoadError(f"{ref!r} returned a {type(obj).__name__}, not a lockgate.Pipeline")
    return obj


def _call_factory(ref: str, obj: object, module: str, strict: bool) -> object:
    """Call ``obj`` when it may be called as a pipeline factory; PipelineLoadError (and no
    call) when not."""
    own = inspect.isfunction(obj) and getattr(obj, "__module__", None) == module
    if not (is_pipeline_factory(obj) or (own and not strict)):
        what = "a function not marked @lockgate.pipeline_factory" if inspect.isfunction(obj) \
            else f"a {type(obj).__name__}"
        raise PipelineLoadError(
            f"{ref!r} is {what}, not a lockgate.Pipeline; it was not called. Name a Pipeline, or mark a "
            "function that returns one with @lockgate.pipeline_factory"
        )
    try:
        inspect.signature(obj).bind()  # type: ignore[arg-type]
    except TypeError:
        raise PipelineLoadError(f"{ref!r}: a pipeline factory takes no arguments") from None
    return obj()  # type: ignore[operator]


def _ship_by_value(module: object) -> None:
    """Spark's Python workers cannot import a pipeline *file* by its synthetic module
    name: pickle its functions (map_batches, UDFs) with their code instead."""
    try:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    except (ImportError, ValueError):  # pragma: no cover - Spark absent or already registered
        pass
