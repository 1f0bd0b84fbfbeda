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
# Three test processes (one Spark session each), a test module never split between them: many
# tests wait on JVMs, controllers, heartbeats and Airflow, so three keep a 2-core machine busy.
python -m pytest tests -q -p no:cacheprovider -n "${LOCKGATE_TEST_PROCESSES:-3}" --dist loadfile \
    --durations=25 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
