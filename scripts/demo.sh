#!/usr/bin/env bash
# The demo: the Nexmark pipeline run until it has caught up with its source.
# Run through `make demo` (which runs scripts/setup.sh first).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

missing=()
[ -f examples/nexmark_demo.py ] || missing+=("examples/nexmark_demo.py (the demo pipeline, defining 'pipeline')")
[ -f engine/lockgate/cli/main.py ] || missing+=("engine/lockgate/cli/main.py (the lockgate CLI)")
if [ "${#missing[@]}" -gt 0 ]; then
    echo "demo: cannot run yet; missing:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
fi

exec .venv/bin/python -m lockgate.cli.main run examples/nexmark_demo.py:pipeline --until-caught-up
