"""Spark failures that a job's data or code causes come out as one-line Lockgate errors (real Spark,
real failures): the source, the file, the column and the types of a Parquet column that does not fit
the schema (a plain and a graph pipeline); the operator, expression and value of a CAST that fails
under ANSI SQL; the user's exception first for a ``map_batches`` function that raises; which memory
ran out for a MemoryError in a Python worker and a java.lang.OutOfMemoryError. Each keeps Spark's
full text in ``detail`` and in the failed cycle's record, commits nothing of the window, and the run
after the fix completes it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from lockgate.errors import (
    DETAIL_MARKER,
    ExpressionError,
    LockgateError,
    SourceSchemaError,
    SparkMemoryError,
    UserFunctionError,
)
from lockgate.runtime.spark_failures import RoundFacts, parse_traceback, spark_failure

T0 = datetime(2026, 1, 1, tzinfo=UTC)
W0 = int(T0.timestamp()) // 60
SCHEMA = "src BIGINT, dst BIGINT, ts TIMESTAMP"


def _edges(path: Path, src: list, dst: list[int]) -> None:
    """One Parquet file of edges in window W0 (``src`` as strings when given strings)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ts = [T0 + timedelta(seconds=i + 1) for i in range(len(src))]
    kind = pa.string() if isinstance(src[0], str) else pa.int64()
    pq.write_table(pa.table({"src": pa.array(src, kind), "dst": pa.array(dst, pa.int64()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), path)


def edges_pipeline() -> lg.Pipeline:
    """Edges read with a schema= that says BIGINT: out-degrees, or connected components (graph)."""
    env = os.environ
    p = lg.Pipeline(env["LG_TEST_SF_JOB"], cycle_window=timedelta(minutes=1))
    links = p.source(lg.FileSource(env["LG_TEST_SF_PATH"], schema=SCHEMA, event_time="ts"), name="links")
    if env.get("LG_TEST_SF_GRAPH") == "1":
        from lockgate.graph.library import ConnectedComponents

        p.graph(links.select("src", "dst"), name="web").compute(ConnectedComponents(), name="cc").sink(
            lg.CollectSink("cc"), name="cc_out")
    else:
        links.key_by("src").aggregate(n=lg.count(), name="out_degree").sink(lg.CollectSink("deg"), name="deg_out")
    return p


def crasher(bad: str, mode: str):
    """A ``map_batches`` function raising on a batch holding ``bad`` (a MemoryError when ``mode`` is
    ``memory``), passing the others through (made on the driver: Spark's Python workers do not see
    the test's environment)."""

    def crash(batch: pa.RecordBatch) -> pa.RecordBatch:
        if bad and bad in batch.column("s").to_pylist():
            if mode == "memory":
                raise MemoryError(f"no room for {bad!r}")
            raise RuntimeError(f"boom on {bad!r}")
        return batch

    return crash


def values_pipeline() -> lg.Pipeline:
    """Strings ``s``: through ``map_batches`` (a crasher), then ``x = CAST(s AS INT)``."""
    env = os.environ
    p = lg.Pipeline(env["LG_TEST_SF_JOB"], cycle_window=timedelta(minutes=1))
    rows = p.source(lg.FileSource(env["LG_TEST_SF_PATH"], event_time="ts"), name="rows")
    crash = crasher(env.get("LG_TEST_SF_BAD", ""), env.get("LG_TEST_SF_MODE", ""))
    (rows.map_batches(crash, name="explode")
         .with_column("x", "CAST(s AS INT)", name="parse")
         .sink(lg.CollectSink("parsed"), name="parsed_out"))
    return p


def _values(path: Path, values: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ts = [T0 + timedelta(seconds=i + 1) for i in range(len(values))]
    pq.write_table(pa.table({"s": pa.array(values, pa.string()),
                             "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), path)


def _env(monkeypatch: pytest.MonkeyPatch, job: str, path: Path, **kw: str) -> None:
    monkeypatch.setenv("LG_TEST_SF_JOB", job)
    monkeypatch.setenv("LG_TEST_SF_PATH", str(path))
    for k, v in kw.items():
        monkeypatch.setenv(f"LG_TEST_SF_{k.upper()}", v)


def _failed_round(client, job: str, err: LockgateError) -> str:
    """The window was not committed, the job is FAILED with the one line, and the failed cycle's
    record holds the one line and then Spark's full text; returns that record."""
    assert client.list_checkpoints(job) == []
    info = client.get_job(job)
    assert info.state == "FAILED" and str(err) in (info.last_error or "")
    assert DETAIL_MARKER not in info.last_error  # the job's reason is the one line
    cycles = [c for c in client.list_cycles(job).cycles if c.window == W0]
    assert [c.state for c in cycles] == ["FAILED"]
    record = cycles[0].error or ""
    head, marker, rest = record.partition(DETAIL_MARKER)
    assert marker and head.strip() == f"{type(err).__name__}: {err}"
    assert err.detail and err.detail.strip() == rest.strip()
    return record


@pytest.mark.parametrize("graph", [False, True], ids=["plain", "graph"])
def test_a_parquet_column_of_strings_where_the_schema_says_bigint(spark, tmp_path, monkeypatch, graph) -> None:
    path = tmp_path / "edges" / "e0.parquet"
    _edges(path, ["a", "b"], [2, 3])
    job = f"sf_schema_{int(graph)}"
    _env(monkeypatch, job, path.parent, graph="1" if graph else "0")
    ref = f"{__file__}:edges_pipeline"
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(SourceSchemaError) as info:
            client.run(ref, first=W0, last=W0)
        err = info.value
        msg = str(err)
        assert "\n" not in msg and err.code == "FAILED_PRECONDITION"
        assert (err.window, err.operator, err.file, err.column, err.expected, err.found) == (
            W0, "links", str(path), "src", "BIGINT", "BINARY")
        assert msg.startswith(f"job '{job}', window {W0}, source 'links': file {path} has column 'src' of "
                              "Parquet type BINARY")
        assert "schema says BIGINT" in msg and "Fix:" in msg
        assert "Py4J" not in msg and "o2" not in msg
        # the JVM's text, behind the one line: Spark's error class and its Java stack trace
        assert "FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH" in err.detail
        assert "\tat org.apache.spark" in err.detail
        assert type(err.__cause__).__name__ == "Py4JJavaError"
        _failed_round(client, job, err)

        # the data fixed: the next run runs the window and commits it
        _edges(path, [1, 2], [2, 3])
        res = client.run(ref, first=W0, last=W0)
        assert res.state == "FINISHED" and res.windows_run == 1
        assert [c.window for c in client.list_checkpoints(job)] == [W0]
        if graph:
            got = client.read_sink(job, "cc").to_pandas()
            assert dict(zip(got["id"], got["component"], strict=True)) == {1: 1, 2: 1, 3: 1}
        else:
            got = client.read_sink(job, "deg").to_pandas()
            assert dict(zip(got["src"], got["n"], strict=True)) == {1: 1, 2: 1}


def test_a_cast_that_fails_under_ansi_sql_names_the_operator_expression_and_value(spark, tmp_path, monkeypatch):
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    path = tmp_path / "values" / "v0.parquet"
    _values(path, ["1", "x2", "3"])
    _env(monkeypatch, "sf_cast", path.parent, bad="")
    ref = f"{__file__}:values_pipeline"
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(ExpressionError) as info:
            client.run(ref, first=W0, last=W0)
        err = info.value
        msg = str(err)
        assert "\n" not in msg and err.code == "FAILED_PRECONDITION"
        assert (err.window, err.operator, err.expression, err.value, err.expected) == (
            W0, "parse", "CAST(s AS INT)", "'x2'", "INT")
        assert msg.startswith(f"job 'sf_cast', window {W0}, operator 'parse': expression `CAST(s AS INT)` failed "
                              "on the value 'x2' of type STRING cannot be cast to INT")
        assert "try_cast" in msg
        assert "CAST_INVALID_INPUT" in err.detail
        _failed_round(client, "sf_cast", err)

        _values(path, ["1", "2", "3"])
        assert client.run(ref, first=W0, last=W0).state == "FINISHED"
        got = client.read_sink("sf_cast", "parsed").to_pandas()
        assert sorted(got["x"].tolist()) == [1, 2, 3]


def test_a_map_batches_function_that_raises_shows_the_users_exception_first(spark, tmp_path, monkeypatch):
    path = tmp_path / "values" / "v0.parquet"
    _values(path, ["1", "2", "3"])
    _env(monkeypatch, "sf_udf", path.parent, bad="2", mode="error")
    ref = f"{__file__}:values_pipeline"
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(UserFunctionError) as info:
            client.run(ref, first=W0, last=W0)
        err = info.value
        msg = str(err)
        assert "\n" not in msg
        assert msg.startswith(f"operator 'explode' raised RuntimeError: boom on '2' in window {W0} (job 'sf_udf')")
        assert (err.operator, err.window, err.error_type, err.error_message) == (
            "explode", W0, "RuntimeError", "boom on '2'")
        assert err.code == "ABORTED"  # may pass: a controller retries it
        # the detail ends with the user's traceback: the function's frame and its line, not Spark's
        tail = err.detail.split("Traceback (most recent call last):")[-1]
        assert f'File "{__file__}"' in tail and "in crash" in tail and 'raise RuntimeError(f"boom on {bad!r}")' in tail
        assert "pyspark" not in tail and tail.rstrip().endswith("RuntimeError: boom on '2'")
        _failed_round(client, "sf_udf", err)

        monkeypatch.setenv("LG_TEST_SF_BAD", "")  # the function fixed
        assert client.run(ref, first=W0, last=W0).state == "FINISHED"
        assert [c.window for c in client.list_checkpoints("sf_udf")] == [W0]


def test_a_memory_error_in_a_python_worker_says_which_memory_and_the_fix(spark, tmp_path, monkeypatch):
    path = tmp_path / "values" / "v0.parquet"
    _values(path, ["1", "2"])
    _env(monkeypatch, "sf_mem", path.parent, bad="1", mode="memory")
    with lg.connect("embedded", home=str(tmp_path / "home")) as client:
        with pytest.raises(SparkMemoryError) as info:
            client.run(f"{__file__}:values_pipeline", first=W0, last=W0)
        err = info.value
        msg = str(err)
        assert "\n" not in msg and (err.where, err.operator, err.code) == ("python", "explode", "RESOURCE_EXHAUSTED")
        assert msg.startswith(f"job 'sf_mem', window {W0}: the Python worker running operator 'explode' ran out "
                              "of memory (MemoryError: no room for '1')")
        assert "spark.executor.pyspark.memory" in msg and "cycle window smaller" in msg
        _failed_round(client, "sf_mem", err)


def test_a_jvm_out_of_memory_error_maps_to_its_one_line(spark) -> None:
    """A real java.lang.OutOfMemoryError from the session's JVM: an array larger than the VM allows
    is refused before anything is allocated, so the JVM goes on unharmed."""
    jvm = spark._jvm
    with pytest.raises(Exception) as info:
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2**31 - 1)
    exc = info.value
    assert type(exc).__name__ == "Py4JJavaError"
    err = spark_failure(exc, RoundFacts("j", [W0, W0 + 1]))
    assert isinstance(err, SparkMemoryError) and err.where == "jvm"
    msg = str(err)
    assert msg.startswith(f"job 'j', windows {W0}..{W0 + 1}: Spark's JVM ran out of memory (OutOfMemoryError: "
                          "Requested array size exceeds VM limit)")
    assert "spark.driver.memory" in msg and "spark.executor.memory" in msg and "\n" not in msg
    assert "java.lang.OutOfMemoryError" in err.detail
    assert spark.range(3).count() == 3  # the JVM is fine


def test_the_mapping_leaves_other_errors_and_lockgate_code_alone(spark) -> None:
    facts = RoundFacts("j", [W0])
    assert spark_failure(KeyError("k"), facts) is None
    assert spark_failure(SourceSchemaError("already one line"), facts) is None
    # a Python MemoryError in the driver (a collect too big for the driver's Python)
    try:
        raise MemoryError()
    except MemoryError as exc:
        err = spark_failure(exc, facts)
    assert isinstance(err, SparkMemoryError) and err.where == "python"
    assert str(err).startswith(f"job 'j', window {W0}: the driver's Python process ran out of memory")
    # a Python worker's error in Lockgate's own code is no user function's (a bug: left as it is)
    df = spark.createDataFrame([(1,)], "a long")

    def internal(batches):
        for b in batches:
            yield b.column("missing")

    internal.__code__ = internal.__code__.replace(co_filename=os.path.join(os.sep, "x", "lockgate", "graph", "f.py"))
    with pytest.raises(Exception) as info:
        df.mapInArrow(internal, df.schema).collect()
    assert spark_failure(info.value, facts) is None


def test_parse_traceback_takes_the_last_exception_and_its_frames() -> None:
    text = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
            '  File "/a/pyspark/worker.py", line 3, in main\n    process()\n'
            '  File "/u/pipe.py", line 7, in f\n    g(x)\n    ^^^^\n'
            "ValueError: first\n\nDuring handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n"
            '  File "/u/pipe.py", line 9, in f\n    raise KeyError("k")\n'
            "KeyError: 'k'\n")
    tb = parse_traceback(text)
    assert tb is not None and (tb.error_type, tb.error_message) == ("KeyError", "'k'")
    assert [(f[0], f[1], f[2]) for f in tb.frames] == [("/u/pipe.py", 9, "f")]
    assert tb.text().splitlines()[-1] == "KeyError: 'k'"
    assert parse_traceback("no traceback here") is None


def test_the_detail_crosses_from_a_worker_to_the_controllers_cycle_record() -> None:
    from lockgate.control.scheduler import failure_text
    from lockgate.server.errors import CycleFailedError
    from lockgate.server.worker import Worker

    fields = Worker._error_fields(SourceSchemaError("the line", detail="JVM text\n\tat x"))
    assert (fields["error_type"], fields["error_code"]) == ("SourceSchemaError", "FAILED_PRECONDITION")
    failed = CycleFailedError(f"window 3 failed in w1: {fields['message']}", fields["error_type"], fields["error_code"])
    assert (str(failed), failed.detail, failed.code) == ("window 3 failed in w1: the line", "JVM text\n\tat x",
                                                         "FAILED_PRECONDITION")
    assert failure_text(failed) == f"CycleFailedError: window 3 failed in w1: the line\n\n{DETAIL_MARKER}\nJVM text\n\tat x"
    assert failure_text(KeyError("k")) == "KeyError: 'k'"  # other errors are kept as they were
    plain = CycleFailedError("window 3 failed in w1: KeyError: 'k'\n  File ...")
    assert plain.detail is None and str(plain) == "window 3 failed in w1: KeyError: 'k'\n  File ..."
