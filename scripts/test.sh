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
python -m pytest tests -q -p no:cacheprovider --durations=20 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
