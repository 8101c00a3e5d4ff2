# Every target works from a fresh clone: it creates .venv in the repo root if missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYSPARK_VERSION := 4.3.0
STAMP := $(VENV)/.installed

.PHONY: install test test-unit test-spark test-airflow demo bench clean check-pyspark

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade "pip>=25"
	$(PIP) install -q -c constraints.txt -e '.[test,bench]'
	# The apache-spark provider pulls pyspark-client, which installs into the same pyspark/ folder
	# as pyspark and leaves a mixed install. Remove both, then put the full pyspark back last.
	$(PIP) uninstall -q -y pyspark-client pyspark
	$(PIP) install -q --no-deps --force-reinstall "pyspark==$(PYSPARK_VERSION)"
	$(PY) -m spark_apps.versions
	@touch $(STAMP)

install: $(STAMP)

check-pyspark: $(STAMP)
	$(PY) -m spark_apps.versions

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

demo: $(STAMP)
	$(PY) example_dags/run_demo.py

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) demo bench/data .pytest_cache
