"""The JVM lookups PySpark repeats for every column, answered once per driver.

PySpark (classic) finds ``org.apache.spark.sql.functions`` and the static method it calls
(``col``, ``lit``, ``when``...) through Py4J reflection every time it builds a Column, and
``PythonUtils.toSeq`` every time it passes a list of columns: two round trips to the JVM before
the call itself. ``PythonUtils`` is found by trying each ``*`` import of the gateway's view in
turn, and each miss searches every jar of the classpath. A round of a plan with twelve
stateful operators made about 2,500 such lookups, a quarter of its Py4J calls.

What a lookup finds cannot change while the gateway lives: a class is on the classpath or not,
a static method is a member of its class or not. :func:`cache_lookups` gives the gateway's
view a cache of the classes and static methods it found. Packages, static fields (their values
may change), constructors and failed lookups are never cached, so nothing behaves differently
but the number of round trips.

>>> from pyspark import SparkContext
>>> cache_lookups(SparkContext._jvm)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JVMView


def _found(kept: dict[str, Any], name: str, look_up: Callable[[str], Any], methods: bool) -> Any:
    """``name`` from ``kept``, else looked up and kept when it is a class (made a
    :class:`_CachedClass`) or, with ``methods``, a static method."""
    found = kept.get(name)
    if found is None:
        found = look_up(name)
        if isinstance(found, JavaClass):
            found.__class__ = _CachedClass
            kept[name] = found
        elif methods and isinstance(found, JavaMember):
            kept[name] = found
    return found


class _CachedClass(JavaClass):
    """A :class:`JavaClass` that keeps the static methods and nested classes it found."""

    def __getattr__(self, name: str) -> Any:
        kept = self.__dict__.setdefault("_lg_members", {})
        return _found(kept, name, lambda n: JavaClass.__getattr__(self, n), methods=True)


class _CachedView(JVMView):
    """A :class:`JVMView` that keeps the classes it found, each a :class:`_CachedClass`."""

    def __getattr__(self, name: str) -> Any:
        kept = self.__dict__.setdefault("_lg_classes", {})
        return _found(kept, name, lambda n: JVMView.__getattr__(self, n), methods=False)


def cache_lookups(view: JVMView) -> None:
    """Make ``view`` (a gateway's ``jvm``, shared by every SparkContext of the process) keep
    the classes and static methods it finds. Idempotent."""
    if type(view) is JVMView:
        view.__class__ = _CachedView


__all__ = ["cache_lookups"]
