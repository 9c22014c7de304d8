# Sluice: `make run` (the control plane with demo data) and `make test` (the whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# What a developer machine runs with (make run, make traffic): DEBUG on, with the
# development SECRET_KEY, and webhooks to receivers on localhost; both off by default.
DEV_ENV := DEBUG=$${DEBUG:-1} SLUICE_WEBHOOK_ALLOW_PRIVATE=$${SLUICE_WEBHOOK_ALLOW_PRIVATE:-1}
# Parallel test workers; the suite waits on Postgres, Redis and subprocesses more than on CPU.
TEST_WORKERS ?= 4

.PHONY: install setup run test test-suite test-loaded test-client-matrix check lint format bench fuzz gateway traffic clean

$(VENV)/.installed: pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e './client[hiredis,django,service]' -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# What the suite needs from the machine, when missing: the Debian packages of
# .ci/apt-packages (Redis, PostgreSQL, Chromium), the machine's Postgres and Redis running.
setup:
	.ci/setup

# Postgres and Redis are started too when nothing answers on DATABASE_URL, REDIS_URL or
# CELERY_BROKER_URL (private ones under var/, see Procfile.dev); migrations and demo
# data load once they answer. With DEV_ENV (above).
# Two database roles, as in production (docs/operator-guide.md, "Audit log"): the superuser
# sets up sluice_owner (migrations) and sluice_app (every process). Set DATABASE_URL
# yourself and the run uses it as it is, as one role unless DATABASE_MIGRATE_URL names another.
ifeq ($(origin DATABASE_URL),undefined)
run: export DATABASE_ADMIN_URL = postgres://postgres@127.0.0.1:5432/sluice
run: export DATABASE_MIGRATE_URL = postgres://sluice_owner@127.0.0.1:5432/sluice
run: export DATABASE_URL = postgres://sluice_app@127.0.0.1:5432/sluice
endif
run: install
	@mkdir -p var && rm -f var/demo.ready
	@echo
	@echo "  Sluice is starting: control plane, Celery worker and beat, demo gateway, Envoy, nginx, light"
	@echo "  traffic, and a private Postgres or Redis where nothing answers (web says when the demo is ready)."
	@echo "  Admin           http://$(HOST):$(PORT)/admin/   (log in as admin / admin)"
	@echo "  Changelog       http://$(HOST):$(PORT)/changelog/"
	@echo "  Dashboard       http://$(HOST):$(PORT)/admin/limits/decisionminute/"
	@echo "  API docs        http://$(HOST):$(PORT)/api/docs/"
	@echo "  Demo gateway    http://127.0.0.1:8080/v1/search   (curl -H 'X-Tenant: initech' ...)"
	@echo "  Envoy gateway   http://127.0.0.1:10000/v1/search  (the same backends, through Sluice's decision service)"
	@echo "  nginx gateway   http://127.0.0.1:10004/v1/search  (the same backends, nginx enforcing with Sluice's Lua module)"
	@echo "  Ctrl-C stops everything."
	@echo
	$(DEV_ENV) SLUICE_HOST=$(HOST) SLUICE_PORT=$(PORT) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" \
		$(VENV)/bin/honcho -f Procfile.dev start

check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run --settings controlplane.settings_test
	$(PY) manage.py spectacular --validate --fail-on-warn --file /dev/null --settings controlplane.settings_test

# The whole suite, then the client's, the gateways' and the conformance tests again with the asyncio
# limiter's auto-pipelining off (both ways must hold).
test: setup check test-suite

# The suite alone (no setup, no lint): what test and test-loaded run. The 20 slowest
# tests are listed at the end of each pass (docs/testing.md says what each waits on).
test-suite: install
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --durations=20 $(PYTEST_ARGS)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) -q --durations=20 --no-pipelining tests/client tests/gateways tests/conformance

# The same suite beside a CPU load of twice the cores (stress-ng, started and stopped by
# .ci/loaded), as on a busy CI machine: verdicts must not depend on the machine's speed.
test-loaded: setup check
	.ci/loaded $(MAKE) --no-print-directory test-suite

# The client's tests (tests/client and the conformance corpus of the Python client and
# its memory store) with the oldest and the newest redis-py the client allows, each in a
# virtualenv of its own under var/matrix/ (needs the package index for redis-py). Not
# part of `make test`: about 8 minutes on a busy 2-core machine (two runs of tests/client).
# REDIS_PY_VERSIONS="5.0.1 6.4.0" to choose.
test-client-matrix: install
	.ci/client-matrix

# The demo gateway: sample backends behind the enforcement client. Its settings
# (control plane URL, gateway token, Redis...) are SLUICE_* environment variables: see gateway/demo.py.
gateway: install
	$(PY) -m gateway.demo

# Skewed traffic through the demo gateway (make gateway) for a minute, so the
# dashboards show who is limited: tenants from the rules, GATEWAY_URL to aim it.
GATEWAY_URL ?= http://127.0.0.1:8080
traffic: install
	$(DEV_ENV) $(PY) manage.py generate_traffic --gateway $(GATEWAY_URL)

# Every benchmark and fault scenario (docs/benchmarks.md), within 15 minutes on 2 cores:
# private redis-servers, gunicorn and a *_bench database; the report is var/bench/report.md.
# BENCH_ARGS="--quick" for a smoke run, "--only polling" for one part.
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)

# schemathesis against gunicorn on a database of its own (<DATABASE_URL's name>_fuzz_bench):
# every phase and check (the stateful one follows the links inferred from the schema),
# FUZZ_ARGS (default 300 examples per operation), as admin, viewer and gateway; figures per
# role, logs in var/fuzz/ (docs/benchmarks.md). Fails on a 5xx or a response the schema does
# not document. Not part of make test: it takes most of an hour on 2 cores.
FUZZ_ARGS ?= --max-examples 300
fuzz: install
	$(PY) -m bench.fuzz $(FUZZ_ARGS)

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
