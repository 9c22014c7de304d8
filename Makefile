# Sluice: `make run` (the control plane with demo data) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# Parallel test workers; the suite waits on Postgres, Redis and subprocesses more than on CPU.
TEST_WORKERS ?= 4

.PHONY: install run test check lint format bench gateway clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) manage.py preflight --create-database
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	@echo
	@echo "Sluice control plane: http://$(HOST):$(PORT)/admin/  (log in as admin / admin)"
	@echo
	$(PY) manage.py runserver $(HOST):$(PORT)

check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run

test: check
	$(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The demo gateway: sample backends behind the enforcement client. Its settings
# (control plane URL, gateway token, Redis...) are SLUICE_* environment variables: see gateway/demo.py.
gateway: install
	$(PY) -m gateway.demo

# Every benchmark and fault scenario (docs/benchmarks.md), within 15 minutes on 2 cores:
# private redis-servers, gunicorn and a *_bench database; the report is var/bench/report.md.
# BENCH_ARGS="--quick" for a smoke run, "--only polling" for one part.
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
