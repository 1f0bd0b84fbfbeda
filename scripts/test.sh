#!/usr/bin/env bash
# The test command: ruff, then the whole pytest suite. Run through `make test` (which runs
# scripts/setup.sh first). Extra arguments go to pytest.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck disable=SC1091
. .venv/bin/activate
unset PYTHONPATH  # lockgate is installed editable: test what is installed

ruff check .

# Every Spark driver JVM the tests start (the test processes' own, `lockgate run`, workers, the
# Spark Connect server) compiles with C1 only and collects with one GC thread: a test JVM lives
# seconds to minutes, where C2's compile threads cost more CPU than they save (20 % less CPU on
# the Nexmark query tests). C1 alone gets a 48 MB code cache, which a test process's JVM filled
# within a minute (then the JIT stops and new code runs interpreted for the rest of its life):
# 240 MB, the tiered default. Set SPARK_SUBMIT_OPTS to override; the bench never sets it.
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:--XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC}"
# Spark's default 1 GiB driver heap: a test of many stateful operators needs most of it (Spark
# takes up to ~420 MB of it for execution and storage) and then spends its time in full GCs
export SPARK_DRIVER_MEMORY="${SPARK_DRIVER_MEMORY:-2g}"
# ...and maps Spark's classes from a class-data archive made once (scripts/spark_class_archive.py:
# a session and its first query start in about 60 % of the time). LOCKGATE_TEST_CLASS_ARCHIVE=0: none
if [ "${LOCKGATE_TEST_CLASS_ARCHIVE:-1}" != 0 ]; then
    archive="$(python scripts/spark_class_archive.py || true)"
    if [ -n "$archive" ]; then
        export SPARK_SUBMIT_OPTS="$SPARK_SUBMIT_OPTS -XX:SharedArchiveFile=$archive -Xlog:cds=off -Xlog:cds+dynamic=off"
    fi
fi

set +e
# Three test processes (one Spark session each), a test module never split between them: many
# tests wait on JVMs, controllers, heartbeats and Airflow, so three keep a 2-core machine busy.
# The modules go out longest first (tests/conftest.py); --no-loadscope-reorder keeps that order.
python -m pytest tests -q -p no:cacheprovider -n "${LOCKGATE_TEST_PROCESSES:-3}" --dist loadfile \
    --no-loadscope-reorder --durations=25 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
