#!/usr/bin/env bash
# The demo in Airflow's UI: serve the Airflow of the last `make demo` (its metadata DB, with the
# lockgate_failure_demo run, its failed try and its retry; its Lockgate home, with the job) with the
# Lockgate plugin, on 127.0.0.1:${LOCKGATE_UI_PORT:-8080}, until Ctrl-C.
# Run it through `make demo-ui` (which runs `make demo` first when there is no demo yet).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv"
DEMO="${LOCKGATE_AIRFLOW_DEMO_DIR:-$REPO/.lockgate/airflow-demo}"
PORT="${LOCKGATE_UI_PORT:-8080}"
[ -f "$DEMO/airflow/airflow.db" ] || { echo "demo_ui: no demo in $DEMO: run 'make demo' first" >&2; exit 1; }
# shellcheck disable=SC1091
. "$VENV/bin/activate"
unset PYTHONPATH
for var in $(env | grep -o '^AIRFLOW[A-Z_]*' || true); do unset "$var"; done
export AIRFLOW_HOME="$DEMO/airflow"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export LOCKGATE_HOME="$DEMO/lockgate"
export LOCKGATE_EXAMPLES_OUT="$DEMO/examples"

passwords="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
(
    for _ in $(seq 120); do
        if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/api/v2/version" 2>/dev/null; then
            password=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin"])' "$passwords")
            echo "demo_ui: Airflow is up: http://127.0.0.1:$PORT/plugin/lockgate (user admin, password $password)"
            echo "demo_ui: the job: http://127.0.0.1:$PORT/plugin/lockgate/lockgate/ui/jobs/failure_demo"
            echo "demo_ui: its task's tries: open the DAG lockgate_failure_demo, task run_windows, tab 'Lockgate windows'"
            exit 0
        fi
        sleep 1
    done
    echo "demo_ui: the api-server did not answer in 2 minutes (log: $DEMO/api-server.log)" >&2
) &
echo "demo_ui: starting Airflow's api-server with the Lockgate plugin (log: $DEMO/api-server.log; Ctrl-C stops it)"
exec airflow api-server --host 127.0.0.1 --port "$PORT" --workers 1 >"$DEMO/api-server.log" 2>&1
