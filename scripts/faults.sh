#!/usr/bin/env bash
# The full fault-injection loop (`make faults`): random kill -9 of whole runs, kills aimed at
# the commit phase, kill -9 of workers and of the controller, a PostgreSQL sink outage, a full
# disk and concurrent starts, each checked row for row. One line of progress per fault; the
# summary goes to bench/results/faults.json and is printed. The test command runs the short
# form of the same tests (tests/faults).
#
#   scripts/faults.sh [--kills N] [--worker-kills N] [--controller-kills N] [--seed S] [--out FILE]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
KILLS=30 WORKER_KILLS=6 CONTROLLER_KILLS=4 SEED=20261124 OUT="$REPO/bench/results/faults.json"
while [ $# -gt 0 ]; do
    case "$1" in
        --kills) KILLS="$2"; shift 2 ;;
        --worker-kills) WORKER_KILLS="$2"; shift 2 ;;
        --controller-kills) CONTROLLER_KILLS="$2"; shift 2 ;;
        --seed) SEED="$2"; shift 2 ;;
        --out) OUT="$(realpath -m "$2")"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "faults: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# shellcheck disable=SC1091
. .venv/bin/activate
unset PYTHONPATH  # lockgate is installed editable: test what is installed

export LOCKGATE_FAULTS_FULL=1 LOCKGATE_FAULTS_KILLS="$KILLS" LOCKGATE_FAULTS_WORKER_KILLS="$WORKER_KILLS" \
    LOCKGATE_FAULTS_CONTROLLER_KILLS="$CONTROLLER_KILLS" LOCKGATE_FAULTS_SEED="$SEED" LOCKGATE_FAULTS_SUMMARY="$OUT"
# one process, no per-test timeout (the loop takes tens of minutes), progress on the terminal;
# its own temporary folder (logs of every run, the private PostgreSQL's), kept for a look afterwards
BASETEMP="$(mktemp -d -t lockgate-faults-XXXXXX)"
echo "faults: runs' folders and logs under $BASETEMP"
python -m pytest tests/faults -m faults -q -s -p no:cacheprovider --timeout 0 --basetemp "$BASETEMP/t"
