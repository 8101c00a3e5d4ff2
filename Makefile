# Every target works from a fresh clone: it creates .venv in the repo root if missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYSPARK_VERSION := 4.3.0
STAMP := $(VENV)/.installed
INSTALL_LOG := install.log

.PHONY: azurite client-venv install lint format docs test test-unit test-spark test-differential test-airflow test-compat demo bench clean check-pyspark

# The apache-spark provider pulls pyspark-client, which installs into the same pyspark/ folder as
# pyspark and leaves a mixed install: remove both, then put the full pyspark back last.
$(STAMP): pyproject.toml constraints.txt
	@echo "Installing into $(VENV) (pip output in $(INSTALL_LOG)) ..."
	@( set -e; \
	  test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	  $(PIP) install -q --upgrade "pip>=25"; \
	  $(PIP) install -q -c constraints.txt -e '.[test,bench,pyspark,docs]'; \
	  $(PIP) uninstall -q -y pyspark-client pyspark; \
	  $(PIP) install -q --no-deps --force-reinstall "pyspark==$(PYSPARK_VERSION)"; \
	) > $(INSTALL_LOG) 2>&1 || { tail -30 $(INSTALL_LOG); echo "install failed: see $(INSTALL_LOG)"; exit 1; }
	@$(PY) -m airflow_delta_provider_apps.versions
	@touch $(STAMP)

# Azurite, Azure's storage emulator (npm, ~190 MB), for the Azure tests only (tests/objectstores,
# tests/spark/test_object_store_spark.py): installed by the targets that run them (test, test-spark),
# never by install or demo. Without npm those tests skip, saying so.
AZURITE_VERSION := 3.35.0
AZURITE := .tools/azurite/node_modules/.bin/azurite-blob
azurite:
	@if [ -x $(AZURITE) ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
	  echo "Installing Azurite $(AZURITE_VERSION) into .tools/azurite (npm) ..."; \
	  npm install -s --no-audit --no-fund --prefix .tools/azurite azurite@$(AZURITE_VERSION) >> $(INSTALL_LOG) 2>&1 \
	    || echo "Azurite did not install (see $(INSTALL_LOG)): the Azure tests will skip"; \
	else echo "npm not found: the Azure tests will skip (Azurite comes from npm)"; fi

install: $(STAMP)

check-pyspark: $(STAMP)
	$(PY) -m airflow_delta_provider_apps.versions

# The checks that keep the house in shape run first: lint, format, then the layering test (no JVM).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: lint azurite client-venv
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 tests

# An Airflow worker that reaches Spark only over Spark Connect, as a user installs it: the provider
# with pyspark-client alone (the apache-spark provider's dependency), no pyspark, no Java.
# tests/connect/test_client_only.py runs the operators in it against the tests' Connect server.
CLIENT_VENV := .venv-client
CLIENT_STAMP := $(CLIENT_VENV)/.installed
$(CLIENT_STAMP): pyproject.toml constraints.txt
	@echo "Installing the Connect-only worker into $(CLIENT_VENV) (pip output in client-install.log) ..."
	@( set -e; \
	  test -x $(CLIENT_VENV)/bin/python || $(PYTHON) -m venv $(CLIENT_VENV); \
	  $(CLIENT_VENV)/bin/pip install -q --upgrade "pip>=25"; \
	  $(CLIENT_VENV)/bin/pip install -q -c constraints.txt -e .; \
	) > client-install.log 2>&1 || { tail -30 client-install.log; echo "install failed: see client-install.log"; exit 1; }
	@touch $(CLIENT_STAMP)

client-venv: $(CLIENT_STAMP)

# Seconds, no JVM: the pure core, the apps' CLI, the provider and the layering rules.
UNIT_TESTS := tests/test_layering.py tests/engine tests/apps tests/provider

test-unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(UNIT_TESTS)

test-spark: $(STAMP) azurite
	$(PY) -m pytest -q -p no:cacheprovider tests/spark tests/interop

# Thousands of generated predicates, values and UPDATE assignments against Spark SQL itself (minutes;
# make test runs the short version). DIFFERENTIAL_EXAMPLES sets the number of examples (default 1000).
test-differential: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m differential tests/spark/test_sql_differential.py

test-airflow: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/airflow

# The lowest versions the provider declares (Airflow 3.1, apache-spark provider 5.0, pyspark 4.0), in
# their own virtualenv next to this one (which holds the highest: constraints.txt): the package installs
# without replacing Airflow, registers, and the provider, CLI and Spark scan/append tests and the example DAG (real spark-submit) pass. Needs
# PyPI; a few minutes; CI runs it after `make test`.
COMPAT_VENV := .venv-lowest
LOWEST := "apache-airflow==3.1.*" "apache-airflow-providers-apache-spark==5.0.*"
LOWEST_PYSPARK := 4.0.*
test-compat:
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	@echo "Installing the lowest supported versions into $(COMPAT_VENV) (pip output in compat-install.log) ..."
	@( set -e; \
	  $(COMPAT_VENV)/bin/pip install -q $(LOWEST) ".[test]"; \
	  $(COMPAT_VENV)/bin/pip uninstall -q -y pyspark-client pyspark; \
	  $(COMPAT_VENV)/bin/pip install -q --no-deps "pyspark==$(LOWEST_PYSPARK)"; \
	) > compat-install.log 2>&1 || { tail -30 compat-install.log; exit 1; }
	$(COMPAT_VENV)/bin/python -c "import airflow, pyspark; print('Airflow', airflow.__version__, '/ pyspark', pyspark.__version__); assert airflow.__version__.startswith('3.1') and pyspark.__version__.startswith('4.0')"
	AIRFLOW_HOME=$$(mktemp -d) $(COMPAT_VENV)/bin/airflow providers list | grep airflow-delta-provider
	AIRFLOW_HOME=$$(mktemp -d) $(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/provider tests/apps tests/test_layering.py tests/spark/test_append.py tests/spark/test_scan.py tests/airflow/test_example_dag.py

# The documentation site (docs/*.md, Markdown through MyST) into docs/_build/html: a fresh build (-E)
# with warnings as errors and nitpicky references, so a link to a page or heading of the site that does
# not exist fails it. Links outside the site are not checked (CI has no network).
docs: $(STAMP)
	$(PY) -m sphinx -b html -E -W --keep-going -n -q docs docs/_build/html
	@echo "The site: docs/_build/html/index.html"

demo: $(STAMP)
	$(PY) example_dags/run_demo.py

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(COMPAT_VENV) docs/_build $(CLIENT_VENV) client-install.log .tools .venv-airflow-3.1 demo bench/data .pytest_cache $(INSTALL_LOG) compat-install.log
