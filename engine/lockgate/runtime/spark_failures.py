"""Spark failures that a job's data or code causes, as one-line Lockgate errors.

A round that Spark fails reaches Python as a py4j ``Py4JJavaError`` (``An error occurred while
calling o256.localCheckpoint``) or one of PySpark's exceptions (``PythonException``,
``NumberFormatException``...), whose first line rarely says what went wrong. :func:`spark_failure`
reads what Spark says in structured form (each throwable of the Java cause chain: its class, its
error condition such as ``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``, its message
parameters and query context; the Python worker's traceback) and returns

- :class:`~lockgate.errors.SourceSchemaError`: a source's file holds a column of another type than
  its schema says (the source, the file, the column, the expected and the found type);
- :class:`~lockgate.errors.ExpressionError`: an expression fails on a value under ANSI SQL (a CAST
  of a malformed string, an overflow, a division by zero; the operator, the expression, the value);
- :class:`~lockgate.errors.UserFunctionError`: a pipeline's function (``map_batches``) raised (its
  exception first, the operator, the last frames of its traceback kept in ``detail``);
- :class:`~lockgate.errors.SparkMemoryError`: Spark's JVM or a Python worker ran out of memory
  (which, and the settings to raise);

each naming the job, the window and the fix, with the full text Spark gave in ``detail`` (the
catalog stores it with the failed cycle; ``lockgate -v`` prints it). Any other failure gives
``None``: the caller re-raises it as it is. :func:`mapped_failures` wraps a round with it (the
embedded client's executor and the controller's workers both run their rounds in it).
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import (
    ExpressionError,
    LockgateError,
    SourceSchemaError,
    SparkMemoryError,
    UserFunctionError,
)

#: frames of the user's traceback kept in a UserFunctionError's detail
KEEP_FRAMES = 6
#: Java throwables read down a cause chain at most
MAX_CAUSES = 12

#: conditions of an expression failing on a value under ANSI SQL, and what each says
_EXPRESSION_CONDITIONS = {
    "CAST_INVALID_INPUT": "cast",
    "CAST_OVERFLOW": "overflow",
    "CAST_OVERFLOW_IN_TABLE_INSERT": "overflow",
    "DIVIDE_BY_ZERO": "divide",
    "INTERVAL_DIVIDED_BY_ZERO": "divide",
    "ARITHMETIC_OVERFLOW": "arithmetic",
    "BINARY_ARITHMETIC_OVERFLOW": "arithmetic",
    "NUMERIC_VALUE_OUT_OF_RANGE": "arithmetic",
}
#: Python exceptions that fail the same way every time (as the worker's is_deterministic says)
_DETERMINISTIC = {"ValueError", "TypeError", "ArithmeticError", "ZeroDivisionError", "OverflowError",
                  "FloatingPointError", "UnicodeError", "UnicodeDecodeError", "UnicodeEncodeError"}
#: what a Parquet physical type holds, for people
_PARQUET_TYPES = {"BINARY": "strings or bytes", "INT32": "32-bit integers", "INT64": "64-bit integers",
                  "DOUBLE": "doubles", "FLOAT": "floats", "BOOLEAN": "booleans", "INT96": "legacy timestamps",
                  "FIXED_LEN_BYTE_ARRAY": "fixed-length bytes, e.g. decimals"}
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+?)\s*$')
_TRACEBACK = "Traceback (most recent call last):"
#: frames of these packages are Spark's or Lockgate's, not the user's
_INTERNAL = (f"{os.sep}pyspark{os.sep}", f"{os.sep}lockgate{os.sep}", f"{os.sep}pyarrow{os.sep}",
             f"{os.sep}py4j{os.sep}")


@dataclass
class Throwable:
    """What one exception of a failure says: its class, Spark's error condition, the condition's
    message parameters, its message and its query context (the expressions it names)."""

    cls: str
    condition: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    message: str = ""
    fragments: list[str] = field(default_factory=list)


@dataclass
class RoundFacts:
    """What the round knows of itself: the job, its windows, the plan's vertices and functions."""

    job: str
    windows: list[int]
    graph: Any = None
    fns: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def where(self) -> str:
        w = self.windows
        if not w:
            return f"job '{self.job}'"
        return f"job '{self.job}', window {w[0]}" if len(w) == 1 else f"job '{self.job}', windows {w[0]}..{w[-1]}"

    def resume(self) -> str:
        w = self.windows
        which = "the window" if len(w) <= 1 else "the group's windows"
        first = f" at window {w[0]}" if w else ""
        return f"nothing of {which} is committed: once fixed, run again and the job resumes{first}"


def _safe(fn: Callable[[], Any], default: Any = None) -> Any:
    """``fn()``; ``default`` when it raises (a py4j call to a JVM that is gone, a method a Spark
    version lacks)."""
    try:
        value = fn()
    except Exception:
        return default
    return default if value is None else value


def _python_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(seen) < MAX_CAUSES:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _java_chain(t: Any) -> list[Throwable]:
    """Each Java throwable of ``t``'s cause chain, read through py4j."""
    out: list[Throwable] = []
    seen = 0
    while t is not None and seen < MAX_CAUSES:
        seen += 1
        cls = _safe(lambda t=t: str(t.getClass().getName()), "")
        item = Throwable(cls, message=_safe(lambda t=t: str(t.getMessage()), ""))
        item.condition = _safe(lambda t=t: t.getCondition()) or _safe(lambda t=t: t.getErrorClass())
        item.condition = str(item.condition) if item.condition else None
        if item.condition:
            params = _safe(lambda t=t: t.getMessageParameters(), {})
            item.params = {str(k): str(v) for k, v in _safe(lambda p=params: dict(p), {}).items()}
            item.fragments = [str(f) for f in (_safe(lambda q=q: q.fragment()) for q in _safe(t.getQueryContext, []))
                              if f]
        if cls.endswith("SchemaColumnConvertNotSupportedException"):
            item.params = {"column": _safe(lambda t=t: str(t.getColumn()), ""),
                           "actualType": _safe(lambda t=t: str(t.getPhysicalType()), ""),
                           "expectedType": _safe(lambda t=t: str(t.getLogicalType()), "")}
        out.append(item)
        t = _safe(lambda t=t: t.getCause())
    return out


def throwables(exc: BaseException) -> list[Throwable]:
    """What every exception of ``exc`` says: Python's chain (``__cause__``, ``__context__``) and,
    for each py4j or PySpark exception in it, the Java cause chain behind it."""
    out: list[Throwable] = []
    for e in _python_chain(exc):
        java = getattr(e, "java_exception", None)
        if java is None:
            java = getattr(e, "_origin", None)
        if java is not None:
            out += _java_chain(java)
            continue
        item = Throwable(type(e).__name__, message=str(e))
        if callable(getattr(e, "getCondition", None)):  # a PySparkException without a JVM (Spark Connect)
            item.condition = _safe(e.getCondition)  # type: ignore[attr-defined]
            item.params = dict(_safe(e.getMessageParameters, {}))  # type: ignore[attr-defined]
            item.fragments = [str(f) for f in (_safe(q.fragment) for q in _safe(e.getQueryContext, [])) if f]  # type: ignore[attr-defined]
        out.append(item)
    return out


def spark_text(exc: BaseException) -> str:
    """The full text Spark gave for ``exc``: the JVM's stack trace behind a py4j or PySpark
    exception (and PySpark's own text), else Python's traceback."""
    parts = []
    for e in _python_chain(exc):
        if getattr(e, "java_exception", None) is not None:  # py4j: its text is the JVM's stack trace
            parts.append(f"{type(e).__name__}: {e}")
        elif getattr(e, "_origin", None) is not None:
            stack = getattr(e, "_stackTrace", None) or ""
            parts.append(f"{type(e).__name__}: {e}" + (f"\n\nJVM stacktrace:\n{stack}" if stack else ""))
        if parts:
            return "\n".join(parts).strip()
    return "".join(traceback.format_exception(exc)).strip()


# -- the Python worker's traceback ------------------------------------------------------------
@dataclass
class PythonTraceback:
    """A Python worker's traceback, as text: its frames (file, line, function, the text lines
    under it), and the exception's type and message."""

    frames: list[tuple[str, int, str, list[str]]]
    error_type: str
    error_message: str

    def user_frames(self) -> list[tuple[str, int, str, list[str]]]:
        return [f for f in self.frames if not any(p in os.sep + f[0] for p in _INTERNAL)]  # "pyarrow/x.pxi" too

    def text(self, frames: int = KEEP_FRAMES) -> str:
        kept = self.user_frames()[-frames:] or self.frames[-frames:]
        lines = [_TRACEBACK]
        for file, line, name, body in kept:
            lines.append(f'  File "{file}", line {line}, in {name}')
            lines += body
        lines.append(f"{self.error_type}: {self.error_message}" if self.error_message else self.error_type)
        return "\n".join(lines)


def parse_traceback(text: str) -> PythonTraceback | None:
    """The last traceback in ``text`` (a chained exception's is the one that ended the worker)."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    lines = text[at + len(_TRACEBACK):].splitlines()
    frames: list[tuple[str, int, str, list[str]]] = []
    i = 0
    while i < len(lines):
        m = _FRAME.match(lines[i])
        if m:
            frames.append((m["file"], int(m["line"]), m["name"], []))
        elif frames and lines[i].startswith(" ") and not lines[i].strip().startswith(("^", "~")):
            frames[-1][3].append(lines[i])
        elif lines[i].strip() and not lines[i].startswith(" "):
            break
        i += 1
    rest = [ln for ln in lines[i:] if ln.strip()]
    if not rest:
        return None
    head, _, message = rest[0].partition(":")
    if " " in head.strip():  # not "SomeError: message"
        return None
    more = [ln for ln in rest[1:] if not ln.startswith("JVM stacktrace")]
    message = message.strip() + ("\n" + "\n".join(more) if more and not message.strip() else "")
    return PythonTraceback(frames, head.strip().rsplit(".", 1)[-1], message.strip())


def _worker_traceback(items: list[Throwable]) -> PythonTraceback | None:
    """The traceback of a Python worker (a ``map_batches`` function) in the failure, if any."""
    for t in items:
        if t.condition == "PYTHON_EXCEPTION" or t.cls.endswith("PythonException"):
            parsed = parse_traceback(t.params.get("traceback") or t.message)
            if parsed is not None:
                return parsed
    for t in items:  # a task failure reported as text ("Job aborted due to stage failure: ...")
        if "An exception was thrown from the Python worker" in t.message or "pyspark" in t.message:
            parsed = parse_traceback(t.message)
            if parsed is not None:
                return parsed
    return None


# -- what the plan knows ------------------------------------------------------------------------
def _vertices(facts: RoundFacts) -> dict[str, Any]:
    return dict(getattr(facts.graph, "vertices", {}) or {})


def _local(path: str) -> str:
    """A file URI or path as a plain path (``file:///a/b`` -> ``/a/b``); other schemes as they are."""
    if path.startswith("file:"):
        return "/" + unquote(urlparse(path).path).lstrip("/")
    return path


def _source_of(facts: RoundFacts, file: str | None) -> str | None:
    """The file source that reads ``file`` (the one whose path is the longest prefix of it)."""
    if not file:
        return None
    target = _local(file)
    best, best_len = None, -1
    for vid, v in _vertices(facts).items():
        cfg = (v.config or {}).get("source") if v.op == "source" else None
        if not cfg or cfg.get("kind") != "file":
            continue
        path = str(cfg.get("path") or "")
        base = _local(path) if "://" in path or path.startswith("file:") else os.path.abspath(path)
        base = base.rstrip("/")
        if (target == base or target.startswith(base + "/")) and len(base) > best_len:
            best, best_len = vid, len(base)
    return best


def _strings(value: Any) -> Iterator[str]:
    """Every string in an operator's configuration (its expressions, its query)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _operator_of_expression(facts: RoundFacts, fragments: list[str]) -> tuple[str | None, str | None]:
    """(operator, expression): the operator whose configuration holds the failing expression."""
    verts = _vertices(facts)
    order = [v for v in facts.ran if v in verts] + [v for v in verts if v not in facts.ran]
    for fragment in fragments:
        want = " ".join(fragment.split()).lower()
        for vid in order:
            v = verts[vid]
            if v.op in ("source", "sink"):
                continue
            text = " ".join(" ".join(_strings(v.config)).split()).lower()
            if want and want in text:
                return vid, fragment
    return None, (fragments[0] if fragments else None)


def _code_key(fn: Any) -> tuple[str, str] | None:
    code = getattr(fn, "__code__", None)
    if code is None and callable(fn):  # an object with __call__
        code = getattr(type(fn).__call__, "__code__", None)
    return (code.co_filename, code.co_name) if code is not None else None


def _operator_of_function(facts: RoundFacts, tb: PythonTraceback) -> str | None:
    """The operator whose function the traceback runs (its outermost frame that is one of the
    plan's functions: the one Lockgate called)."""
    keys = {}
    for vid, fn in facts.fns.items():
        key = _code_key(fn)
        if key is not None:
            keys.setdefault(key, vid)
    for file, _line, name, _body in tb.frames:
        vid = keys.get((file, name))
        if vid is not None:
            return vid
    return None


# -- the mapping ----------------------------------------------------------------------------------
def _memory(facts: RoundFacts, items: list[Throwable], exc: BaseException,
            tb: PythonTraceback | None) -> SparkMemoryError | None:
    jvm = next((t for t in items if t.cls == "java.lang.OutOfMemoryError"
                or t.cls.endswith("SparkOutOfMemoryError")
                or (t.condition or "").startswith("UNABLE_TO_ACQUIRE_MEMORY")), None)
    said = None
    if jvm is not None:
        said = f"{jvm.cls.rsplit('.', 1)[-1]}: {jvm.message}".strip().rstrip(":")
    else:
        m = next((re.search(r"java\.lang\.OutOfMemoryError(: [^\n]*)?", t.message) for t in items
                  if "java.lang.OutOfMemoryError" in t.message), None)
        if m is not None:
            said = m.group(0).removeprefix("java.lang.")
    if said is not None:
        err = SparkMemoryError(
            f"{facts.where()}: Spark's JVM ran out of memory ({said[:200]}). Fix: give Spark more memory: "
            "spark.driver.memory for local Spark (its tasks run in the driver), spark.executor.memory on a "
            "cluster (EmbeddedClient(spark_conf={...}), lockgate server --spark-conf K=V), or make the cycle "
            f"window smaller so that a round holds fewer records; {facts.resume()}",
            window=facts.windows[0] if facts.windows else None, detail=spark_text(exc))
        err.where = "jvm"
        return err
    in_worker = tb is not None and tb.error_type == "MemoryError"
    if in_worker or any(isinstance(e, MemoryError) for e in _python_chain(exc)):
        op = _operator_of_function(facts, tb) if tb is not None else None
        where = (f"the Python worker running operator '{op}'" if op else "a Python worker") if in_worker \
            else "the driver's Python process"
        what = f" ({tb.error_type}: {tb.error_message})" if in_worker and tb.error_message else ""
        setting = ("spark.executor.pyspark.memory (or the machine's memory; spark.executor.memory on a cluster)"
                   if in_worker else "the memory of the process running Lockgate (the driver)")
        detail = spark_text(exc) + ("\n\n" + tb.text() if in_worker and tb is not None else "")
        err = SparkMemoryError(
            f"{facts.where()}: {where} ran out of memory{what}. Fix: give it more memory ({setting}), or make "
            f"the cycle window smaller so that a round holds fewer records; {facts.resume()}",
            window=facts.windows[0] if facts.windows else None, operator=op, detail=detail)
        err.where = "python"
        return err
    return None


def _user_function(facts: RoundFacts, exc: BaseException, tb: PythonTraceback) -> UserFunctionError | None:
    op = _operator_of_function(facts, tb)
    if op is None and not tb.user_frames():
        return None  # raised in Spark's or Lockgate's own code: not the pipeline's function
    first = (tb.error_message.splitlines() or [""])[0].strip()
    if len(first) > 300:
        first = first[:297] + "..."
    said = f"{tb.error_type}: {first}" if first else tb.error_type
    who = f"operator '{op}'" if op else "a function of the pipeline"
    w = facts.windows
    when = f"window {w[0]}" if len(w) == 1 else f"windows {w[0]}..{w[-1]}" if w else "a round"
    err = UserFunctionError(
        f"{who} raised {said} in {when} (job '{facts.job}'). Fix the function (its traceback: lockgate -v, or "
        f"the failed cycle's error in `lockgate --json cycles {facts.job}`); {facts.resume()}",
        window=w[0] if w else None, operator=op, detail=f"{spark_text(exc)}\n\n{tb.text()}")
    err.error_type, err.error_message = tb.error_type, tb.error_message
    if tb.error_type in _DETERMINISTIC:
        err.code = "FAILED_PRECONDITION"  # fails the same way every time: a controller does not retry
    return err


def _read_mismatch(facts: RoundFacts, items: list[Throwable], exc: BaseException) -> SourceSchemaError | None:
    hit = next((t for t in items if (t.condition or "").startswith("FAILED_READ_FILE")
                and "column" in t.params), None)
    convert = next((t for t in items if t.cls.endswith("SchemaColumnConvertNotSupportedException")), None)
    if hit is None and convert is None:
        return None
    params = {**(convert.params if convert else {}), **(hit.params if hit else {})}
    file = params.get("path") or next((t.params["path"] for t in items if t.params.get("path")), None)
    file = _local(file) if file else None
    column = ".".join(c.strip().strip("`") for c in params.get("column", "").strip("[]").split(",") if c.strip())
    expected = params.get("expectedType", "").upper() or None
    found = params.get("actualType") or None
    source = _source_of(facts, file)
    kind = f" ({_PARQUET_TYPES[found]})" if found in _PARQUET_TYPES else ""
    who = f"source '{source}'" if source else "a file source"
    err = SourceSchemaError(
        f"{facts.where()}, {who}: file {file or '(unknown)'} has column '{column}' of Parquet type {found}{kind}, "
        f"but the source's schema says {expected}. Fix: write '{column}' as {expected} in that file, or declare "
        f"the type the files hold in the source's schema= and CAST it in an operator after the source; "
        f"{facts.resume()}",
        window=facts.windows[0] if facts.windows else None, operator=source, detail=spark_text(exc))
    err.file, err.column, err.expected, err.found = file, column or None, expected, found
    return err


def _expression(facts: RoundFacts, items: list[Throwable], exc: BaseException) -> ExpressionError | None:
    hit = next((t for t in items if (t.condition or "").split(".")[0] in _EXPRESSION_CONDITIONS), None)
    if hit is None:
        return None
    kind = _EXPRESSION_CONDITIONS[(hit.condition or "").split(".")[0]]
    p = hit.params
    op, expression = _operator_of_expression(facts, hit.fragments)
    who = f"operator '{op}'" if op else "an operator"
    expr = f" `{' '.join(expression.split())}`" if expression else ""
    target = p.get("targetType", "").strip('"') or None
    value = p.get("expression") or p.get("value")
    if kind == "cast":
        said = (f"the value {value} of type {p.get('sourceType', '').strip(chr(34))} cannot be cast to {target}")
        fix = ("correct the data, or use try_cast(... AS " + (target or "TYPE") + ") to get NULL for such values")
    elif kind == "overflow":
        said = f"the value {value} of type {p.get('sourceType', '').strip(chr(34))} does not fit {target}"
        fix = f"use a wider type than {target}, or try_cast(... AS {target}) to get NULL for such values"
    elif kind == "divide":
        said = "a division by zero"
        fix = "guard the divisor (try_divide(a, b) gives NULL, or CASE WHEN b = 0 ...)"
    else:
        said = f"an arithmetic overflow ({(hit.message.splitlines() or [''])[0][:160]})"
        fix = "use a wider type (BIGINT, DECIMAL), or the try_ functions (try_add, try_multiply) to get NULL"
    err = ExpressionError(
        f"{facts.where()}, {who}: expression{expr} failed on {said} (ANSI SQL, spark.sql.ansi.enabled). "
        f"Fix: {fix}; {facts.resume()}",
        window=facts.windows[0] if facts.windows else None, operator=op, detail=spark_text(exc))
    err.expression, err.value, err.expected = expression, value, target
    return err


def spark_failure(exc: BaseException, facts: RoundFacts) -> LockgateError | None:
    """The one-line Lockgate error for ``exc``, a round's failure, or ``None`` when it is none
    of the failures above (or already a Lockgate error): re-raise it then as it is."""
    if isinstance(exc, LockgateError):
        return None
    items = throwables(exc)
    tb = _worker_traceback(items)
    mapped: LockgateError | None = _memory(facts, items, exc, tb)
    if mapped is None and tb is not None:
        mapped = _user_function(facts, exc, tb)
    if mapped is None:
        mapped = _read_mismatch(facts, items, exc)
    if mapped is None:
        mapped = _expression(facts, items, exc)
    return mapped


def facts_of(runner: Any, windows: list[int]) -> RoundFacts:
    """What a :class:`~lockgate.runtime.cycle.CycleRunner` knows of a round of ``windows``."""
    plan = getattr(runner, "plan", None)
    return RoundFacts(job=str(getattr(runner, "job", "")), windows=list(windows),
                      graph=getattr(plan, "graph", None), fns=dict(getattr(plan, "fns", None) or {}),
                      ran=list(getattr(runner, "run_order", None) or []))


@contextlib.contextmanager
def mapped_failures(runner: Any, windows: list[int]) -> Iterator[None]:
    """Run a round of ``windows`` on ``runner``: a Spark failure the job's data or code caused
    comes out as its one-line Lockgate error (raised from Spark's), any other as it was."""
    try:
        yield
    except Exception as exc:
        try:
            err = spark_failure(exc, facts_of(runner, windows))
        except Exception:  # reading the failure must never hide it
            err = None
        if err is None:
            raise
        raise err from exc


__all__ = ["PythonTraceback", "RoundFacts", "Throwable", "facts_of", "mapped_failures", "parse_traceback",
           "spark_failure", "spark_text", "throwables"]
