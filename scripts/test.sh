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

set +e
# Two test processes (one Spark session each), a test module never split between them: most
# tests wait on JVMs, controllers and Airflow, so two share this 2-core machine well.
python -m pytest tests -q -p no:cacheprovider -n "${LOCKGATE_TEST_PROCESSES:-2}" --dist loadfile \
    --durations=25 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
