"""The Spark session Lockgate runs on: Java check, quiet start-up, UTC, loopback only.

``get_spark("local[2]")`` (in-process), ``get_spark("spark://host:port")`` (standalone) or
``get_spark("sc://host:port")`` (Spark Connect). The driver JVM is started with Lockgate's
``conf/log4j2.properties`` (root level ERROR, or ``LOCKGATE_SPARK_LOG_LEVEL``), so start-up
prints nothing. A Spark Connect session starts no JVM here: it gets only the session settings a
client may change, so it prints nothing either.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from lockgate.defaults import DEFAULT_SPARK_MASTER
from lockgate.errors import InvalidArgumentError, JavaNotFoundError, SparkStartError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# FutureWarnings raised from PySpark's own code (deprecations hit inside pyspark): not the user's
# to fix. pandas is pinned to the range PySpark supports, so its pandas check stays silent.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\.|$)")
logging.getLogger("py4j").setLevel(logging.ERROR)

MIN_JAVA = 17
_JAVA_FIX = "install OpenJDK 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME to a JDK/JRE 17+"
# Lines the driver JVM prints to stderr outside log4j; dropped unless LOCKGATE_SPARK_LOG_LEVEL is set.
_JVM_NOISE = re.compile(rb"^WARNING: Using incubator modules")
_LOG_LEVELS = {"ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"}

# Lockgate's defaults that are static settings of a Spark Connect server: a client cannot set them
# (Spark answers with a UserWarning on every run), so a Connect session never sends them.
_SERVER_ONLY = frozenset({"spark.python.sql.dataFrameDebugging.enabled", "spark.buffer.pageSize"})
#: how much of its status history the driver keeps (Spark's defaults: 1,000 / 1,000 / 1,000 / 100,000)
RETAINED_HISTORY = {
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
    "spark.ui.retainedTasks": "2000",
}

_session: SparkSession | None = None


def check_java() -> str:
    """Return the version of the Java Spark will use (``"17.0.15"``); raise if missing or < 17."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise JavaNotFoundError(f"JAVA_HOME={java_home} has no bin/java. Fix: {_JAVA_FIX}.")
    else:
        java = shutil.which("java")
        if java is None:
            raise JavaNotFoundError(
                f"Java {MIN_JAVA}+ is needed by Spark and no 'java' is on PATH. Fix: {_JAVA_FIX}."
            )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"cannot run '{java} -version': {e}. Fix: {_JAVA_FIX}.") from e
    m = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    if out.returncode != 0 or m is None:
        raise JavaNotFoundError(
            f"'{java} -version' gave no version ({out.stderr.strip()!r}). Fix: {_JAVA_FIX}."
        )
    version = m.group(1)
    parts = re.split(r"[.+_-]", version)
    major = int(parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0])
    if major < MIN_JAVA:
        raise JavaNotFoundError(f"Spark needs Java {MIN_JAVA}+, found {version} at {java}. Fix: {_JAVA_FIX}.")
    return version


def _log4j2_file() -> str:
    # Anchored on lockgate.runtime (a regular package): importlib.resources cannot read the
    # namespace package "lockgate" of an editable install. Lockgate is never installed zipped.
    path = Path(str(resources.files("lockgate.runtime"))).parent / "conf" / "log4j2.properties"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall lockgate (pip install -e .)")
    return str(path)


def _java_opt(opt: str) -> str:
    """``opt`` quoted when it holds a space (Spark splits extraJavaOptions on spaces)."""
    return f'"{opt}"' if " " in opt else opt


def _spark_log_level() -> str | None:
    level = os.environ.get("LOCKGATE_SPARK_LOG_LEVEL", "").strip().upper()
    if not level:
        return None
    level = "WARN" if level == "WARNING" else level
    if level not in _LOG_LEVELS:
        raise ValueError(f"LOCKGATE_SPARK_LOG_LEVEL={level!r}: use one of {sorted(_LOG_LEVELS)}")
    return level


def _reusable(s: SparkSession | None) -> bool:
    if s is None or getattr(s, "is_stopped", False):  # is_stopped: Spark Connect sessions
        return False
    sc = getattr(s, "_sc", None)  # classic sessions
    return sc is None or sc._jsc is not None


def _launch_gateway_filtered(conf: dict[str, str], keep_all: bool) -> None:
    """Start the driver JVM ourselves, with its stdout and stderr copied to stderr through a filter thread.

    The JVM prints "WARNING: Using incubator modules" (Spark's launcher always adds
    ``--add-modules=jdk.incubator.vector``) straight to stderr, outside log4j. PySpark reuses
    an already launched gateway, so the builder below attaches to this one.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    # the pump reads the JVM's stderr from its start, so a JVM that dies before it sends its
    # port (PySpark then says only "Java gateway process exited") leaves its reason in the error
    read_end, write_end = os.pipe()
    last: collections.deque[bytes] = collections.deque(maxlen=20)

    def pump(fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            for line in iter(stream.readline, b""):
                last.append(line)
                if keep_all or not _JVM_NOISE.match(line):
                    with contextlib.suppress(OSError):
                        os.write(2, line)

    reader = threading.Thread(target=pump, args=(read_end,), name="spark-jvm-stderr", daemon=True)
    reader.start()
    try:
        # the JVM's stdout too: it says why it could not start there ("Error occurred during
        # initialization of VM"), and nothing it prints belongs in a command's own output
        gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(conf.items()),
                                 {"stdout": write_end, "stderr": write_end})
    except Exception as err:
        os.close(write_end)
        reader.join(5)
        said = b"".join(last).decode(errors="replace").strip() or "(it printed nothing)"
        raise SparkStartError(f"the Spark driver JVM exited before it started ({str(err).splitlines()[0]}); "
                              f"it printed:\n{said}") from None
    os.close(write_end)  # the JVM holds its own copy: the pump ends when the JVM does
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


def get_spark(
    master: str = DEFAULT_SPARK_MASTER, app_name: str = "lockgate", conf: dict[str, str] | None = None,
    log_file: str | None = None,
) -> SparkSession:
    """Return the active session, or start one on ``master`` (``local[...]``, ``spark://``, ``sc://``).

    ``conf`` overrides the defaults (e.g. ``{"spark.sql.shuffle.partitions": "8"}``). On Spark
    Connect (``sc://``) ``app_name`` is not sent (the server names the application) and ``conf``
    may hold session settings only: see :func:`_connect_session`. ``log_file``: where the driver
    JVM writes the records it keeps off the terminal (Spark's RPC races at start-up and
    shutdown); None: the terminal, as every other record it prints.
    """
    global _session
    from pyspark.sql import SparkSession

    for s in (_session, SparkSession.getActiveSession()):
        if _reusable(s):
            _session = s
            _cache_lookups()
            return s

    runtime = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # A round is a micro-batch of one window, which Structured Streaming also runs without
        # adaptive execution: its extra planning jobs cost more than they save on a window's
        # worth of data (W1 of bench/: 754 -> 700 ms per round). Pass
        # {"spark.sql.adaptive.enabled": "true"} for cycles over large windows with skewed keys.
        "spark.sql.adaptive.enabled": "false",
        # PySpark 4 records the Python call site of every Column and DataFrame call in the
        # JVM (four to ten Py4J round trips each; F.col alone costs 13): a round built 640
        # of them. The call sites would name Lockgate's translator, not the user's pipeline.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Spark lists more than 32 given paths with a Spark job of its own (one task per path);
        # a catch-up group reads a file or more per window, so a 64-window group paid a 250 ms
        # listing job for paths whose footers Lockgate had already read (bench.backfill W1:
        # 2.0 s of 26 s). Listing up to 1,024 paths on the driver costs a few ms locally.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
        # Every hash aggregate, sort and hashed relation of a task takes its memory in pages,
        # the first one whole: Spark sizes a page from the heap (about 16 MB on a 2 GiB local[2]
        # driver), so a round of many small operators allocated and zeroed gigabytes of pages
        # for a window of rows and spent its time in full GCs (1.1 GB live after each).
        # 1 MB pages (Spark's own floor) serve a window as well; a larger task takes more pages.
        "spark.buffer.pageSize": "1m",
    }
    if master.startswith("sc://"):
        _session = _connect_session(master, runtime, conf or {})
        return _session
    if not (master.startswith("local") or master.startswith("spark://")):
        raise ValueError(
            f"unsupported Spark master {master!r}: use local[N], spark://host:port or sc://host:port"
        )

    check_java()
    level = _spark_log_level()
    java_opts = _java_opt(f"-Dlog4j2.configurationFile={_log4j2_file()}")
    if level:
        java_opts += f" -Dlockgate.spark.log.level={level}"
    elif log_file:  # LOCKGATE_SPARK_LOG_LEVEL shows everything on the terminal
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        java_opts += " -Dlockgate.spark.rpc.appender=rpcfile " + _java_opt(
            f"-Dlockgate.spark.log.file={os.path.abspath(log_file)}")
    full = {
        "spark.master": master,
        "spark.app.name": app_name,
        **runtime,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # With no UI, the status store's history serves only progress and job counts. Spark
        # keeps 1,000 SQL executions (their plan graphs and metrics), 1,000 jobs and stages and
        # 100,000 tasks by default: a driver running rounds for an hour filled its 1 GiB heap
        # with them and spent its time in full GCs. A round runs a handful of jobs.
        **RETAINED_HISTORY,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        **(conf or {}),
    }
    user_opts = (conf or {}).get("spark.driver.extraJavaOptions")
    full["spark.driver.extraJavaOptions"] = f"{java_opts} {user_opts}" if user_opts else java_opts
    os.environ["PYSPARK_PYTHON"] = full["spark.pyspark.python"]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    _launch_gateway_filtered(full, keep_all=level is not None)
    builder = SparkSession.builder
    for k, v in full.items():
        builder = builder.config(k, v)
    _session = builder.getOrCreate()
    _cache_lookups()
    return _session


def _cache_lookups() -> None:
    """Keep what the driver's gateway looks up (PySpark finds ``functions.col`` & co. again for
    every Column): a session Lockgate started or one it reuses; Spark Connect has no gateway."""
    from pyspark import SparkContext

    from lockgate.runtime.jvm_lookups import cache_lookups

    if SparkContext._jvm is not None:
        cache_lookups(SparkContext._jvm)


def _connect_session(master: str, defaults: dict[str, str], conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session on ``master`` with ``defaults`` and ``conf`` set as session settings.

    The session is created with no builder options: PySpark would send them all in one silent
    request, and the server answers a static setting there with a UserWarning on every run. Each
    setting is set on its own instead. Lockgate's server-only defaults are left to the server
    (start it with ``--conf spark.python.sql.dataFrameDebugging.enabled=false`` to skip the
    call-site capture). A setting of ``conf`` the server refuses (a static or core Spark setting)
    raises :class:`InvalidArgumentError` saying to pass it to the server: it would not take effect.
    Python UDFs (``map_batches``) run with the server's Python.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(master).getOrCreate()
    settings = {k: v for k, v in defaults.items() if k not in _SERVER_ONLY}
    for key, value in {**settings, **conf}.items():
        try:
            session.conf.set(key, value)
        except AnalysisException as err:
            if err.getCondition() not in ("CANNOT_MODIFY_STATIC_CONFIG", "CANNOT_MODIFY_CONFIG"):
                raise
            session.stop()  # not left active: a later get_spark would hand it out without the setting
            raise InvalidArgumentError(
                f"{key} cannot be set from a Spark Connect client ({master}): it is a setting of the "
                f"server. Start the Spark Connect server with --conf {key}={value} instead."
            ) from None
    return session


def stop_spark() -> None:
    """Stop the session started by :func:`get_spark` (or the active one), if any."""
    global _session
    from pyspark.sql import SparkSession

    s = _session or SparkSession.getActiveSession()
    _session = None
    if s is not None:
        s.stop()
