# Lockgate. `make test` is the test command (.ci/run runs it).
.PHONY: setup demo demo-ui demo-cli test test-long lint

setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo_airflow.sh

# the demo in Airflow's UI (the Lockgate plugin), after `make demo`
demo-ui: setup
	@[ -f "$${LOCKGATE_AIRFLOW_DEMO_DIR:-.lockgate/airflow-demo}/airflow/airflow.db" ] || scripts/demo_airflow.sh
	@scripts/demo_ui.sh

demo-cli: setup
	@scripts/demo.sh

test: setup
	@scripts/test.sh

# the test command and the long tests it skips (each covered in short by one it runs)
test-long: setup
	@LOCKGATE_TEST_LONG=1 scripts/test.sh

lint: setup
	@.venv/bin/ruff check .

# The full fault-injection loop (bench/results/faults.json); FAULTS_ARGS="--kills 10" to change it.
.PHONY: faults
faults: setup
	@scripts/faults.sh $(FAULTS_ARGS)

# The documentation site (mkdocs.yml, docs/): `make docs` builds it into site/ with --strict (a broken
# link or a missing page fails), `make docs-serve` serves it on http://127.0.0.1:8000 as you edit.
.PHONY: docs docs-serve
docs: setup
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

docs-serve: setup
	@NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve
