#!/usr/bin/env bash
# The Airflow demo: the example DAG lockgate_failure_demo, end to end through Airflow
# (`airflow dags test`, a fresh SQLite metadata DB) on Lockgate's embedded default (local
# Spark, SQLite catalog). A task fails in the middle of its run on purpose; its retry
# restores from the last completed window; the output is checked to the row.
# Run it through `make demo` (which runs scripts/setup.sh first), or after `make setup`.
# Everything it writes is under .lockgate/airflow-demo (or $LOCKGATE_AIRFLOW_DEMO_DIR).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv"
DAG_ID="${1:-lockgate_failure_demo}"

if [ ! -x "$VENV/bin/airflow" ]; then
    echo "demo_airflow: $VENV/bin/airflow is missing: run 'make setup' first" >&2
    exit 1
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
unset PYTHONPATH

DEMO="${LOCKGATE_AIRFLOW_DEMO_DIR:-$REPO/.lockgate/airflow-demo}"
rm -rf "$DEMO"
mkdir -p "$DEMO"
for var in $(env | grep -o '^AIRFLOW[A-Z_]*' || true); do unset "$var"; done
export AIRFLOW_HOME="$DEMO/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export LOCKGATE_HOME="$DEMO/lockgate"          # the embedded engine: catalog, snapshots
export LOCKGATE_EXAMPLES_OUT="$DEMO/examples"  # the example pipelines' output
LOG="$DEMO/airflow-dags-test.log"

echo "demo: Airflow $(airflow version 2>/dev/null | tail -n 1), Lockgate provider $(python -c 'import lockgate_provider as p; print(p.__version__)'); home $DEMO"
echo "demo: airflow db migrate (SQLite)"
airflow db migrate >"$DEMO/airflow-db-migrate.log" 2>&1 || { tail -n 30 "$DEMO/airflow-db-migrate.log" >&2; exit 1; }

echo "demo: airflow dags test $DAG_ID  (full log: $LOG)"
set +e
airflow dags test "$DAG_ID" >"$LOG" 2>&1
rc=$?
set -e
# the story, from the task logs
grep -E "armed:|Lockgate job '[^']*': windows|Window [0-9]+ committed|failed in window|already committed|Job '[^']*': windows|exact:" "$LOG" \
    | sed -E 's/^[0-9T:.-]+Z \[[a-z ]+\] //; s/ \[airflow[^]]*\]( loc=[^ ]*)?.*$//; s/^airflow\.sdk\.exceptions\.//; s/^/  /' || true

set +e
python - "$DAG_ID" <<'PY'
import json
import sys

from sqlalchemy import select

from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

dag_id = sys.argv[1]
with create_session() as session:
    dr = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())).first()
    if dr is None:
        sys.exit(f"demo: no run of {dag_id} was recorded")
    print(f"\ndemo: DAG run {dr.run_id}: {dr.state}")
    for ti in sorted(dr.get_task_instances(session=session), key=lambda t: t.start_date or dr.start_date):
        print(f"  {ti.task_id:<14} {ti.state}  (tries: {ti.try_number})")
    rows = session.execute(
        select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == dr.run_id, XComModel.key == "return_value"
        )
    ).all()
    for task_id, value in rows:
        if task_id in ("check_output", "summarize", "report"):
            value = json.loads(value) if isinstance(value, str) else value
            print(f"demo: {task_id} -> {json.dumps(value)}")
    sys.exit(0 if str(dr.state) == "success" else 1)
PY
status=$?
set -e
if [ "$rc" -ne 0 ] || [ "$status" -ne 0 ]; then
    echo "demo: FAILED (see $LOG)" >&2
    exit 1
fi
echo "demo: done. Output: $LOCKGATE_EXAMPLES_OUT; the Lockgate catalog: $LOCKGATE_HOME/catalog.db"
echo "demo: see the job, its failed try and its resumed retry in Airflow's UI: make demo-ui"
