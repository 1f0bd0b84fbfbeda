"""Code generation per round: Spark's generated code for large rounds, interpreted
evaluation for small ones.

Spark compiles Java code for the stages and expressions of every query, and caches the
compiled classes by their source text. A long or timestamp literal is written into that text,
and a round's bounds (its window, its watermark, the windows it closes) are such literals: so
every round's stages compile anew, the cache never hits. On bench/'s ``small`` data (5,000
events a window) that is 14 compilations and about 210 ms a round on W6 (q18) and 67
compilations, about 960 ms, on W5 (q9): more than interpreting a window's rows costs.

So a round expected to touch at most ``LOCKGATE_CODEGEN_ROWS`` rows (its last round's input
rows plus the rows of the state layers it may read; default 300,000; 0 keeps Spark's code
generation on for every round) runs with whole-stage code generation off and expressions
interpreted. At 40 rounds of 25,000 events (2026-11-29, a bench run kept in git's history), W5
(q9, 24,500 records a round on up to 170,000 rows of state layers) ran 10 % to 15 % faster
interpreted than compiled, and W6 (q18, 23,000 bids on up to 290,000) the same either way; the
earlier default of 100,000 compiled most of W5's rounds. Far above that it is not measured
(the state-growth bench's rounds over millions of rows keep code generation). A runner's first
round, whose size is not known yet, and catch-up groups (many windows at once) keep code
generation. Results are the same either way; only where the time goes changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from .settings import count_setting

#: default largest round (rows) run without code generation
DEFAULT_CODEGEN_ROWS = 300_000

#: the session settings a round without code generation changes, and their values then
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    # CODEGEN_ONLY / FALLBACK / NO_CODEGEN: how expressions are evaluated outside whole stages
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def codegen_rows() -> int:
    """``LOCKGATE_CODEGEN_ROWS``: the largest round (rows) run without code generation; a round
    runs interpreted when :func:`~lockgate.runtime.settings.within` that many rows."""
    return count_setting("LOCKGATE_CODEGEN_ROWS", DEFAULT_CODEGEN_ROWS, "rows",
                         "0 keeps Spark's code generation for every round")


@contextmanager
def round_codegen(spark: SparkSession, interpret: bool) -> Iterator[None]:
    """Run the block with code generation off when ``interpret``; the session's settings are
    restored after it. A session that refuses the settings (a Spark Connect server that keeps
    them) runs the block as it is."""
    if not interpret:
        yield
        return
    saved: dict[str, str | None] = {}
    try:
        for key, value in INTERPRETED.items():
            saved[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    except Exception:  # a session that keeps its settings runs the round with code generation
        _restore(spark, saved)
        saved = {}
    try:
        yield
    finally:
        _restore(spark, saved)


def _restore(spark: SparkSession, saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
