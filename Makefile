# Domain Portal — the two commands that matter: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
AXE := tests/browser/axe/node_modules/axe-core/axe.min.js

# The tests' PostgreSQL and Redis: private servers started for the run and stopped after it
# (testbed/devservices.py), unless these name running ones.
TEST_DATABASE_URL ?=
TEST_REDIS_URL ?=
PYTEST_ARGS ?=
# The suite runs on this many pytest-xdist workers, a test file each at a time (0: in this
# process alone). Each worker has its own test database, Redis database and tray addresses.
PYTEST_WORKERS ?= 2
BENCH_DATABASE_URL ?=
BENCH_REDIS_URL ?=

.PHONY: demo demo-smoke test install lint format bench clean lock lock-upgrade lock-check proto openapi

# Exactly the locked versions, each file checked against its hash (requirements/dev.txt,
# written by `make lock`), then the project itself, built with the locked setuptools.
$(STAMP): pyproject.toml requirements/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP) $(AXE)

# axe-core for the accessibility test, exactly as its lock pins it (npm, no build step).
$(AXE): tests/browser/axe/package.json tests/browser/axe/package-lock.json
	npm ci --prefix tests/browser/axe --no-audit --no-fund --loglevel=error
	touch $(AXE)

demo: $(STAMP)
	bash scripts/demo.sh

# `make demo` as the README says, driven as a user would: a domain formed and released
# over the API, then Ctrl-C, then nothing of the demo left running (CI runs it).
demo-smoke: $(STAMP)
	$(PY) scripts/demo_smoke.py

test: $(STAMP) $(AXE)
	bash scripts/system_deps.sh
	PORTAL_TESTING=1 $(PY) -m testbed.devservices \
		--database-url "$(TEST_DATABASE_URL)" --redis-url "$(TEST_REDIS_URL)" -- \
		$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_limits.py
	PORTAL_TESTING=1 $(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The DRA plugin's gRPC modules (nodeagent/dra/pb/*_pb2*.py, committed) from our .proto
# files; tests/nodeagent/test_dra_proto.py checks that this leaves them unchanged.
proto: $(STAMP)
	PY=$(PY) bash scripts/proto.sh

# The committed OpenAPI schema (docs/openapi.yaml), rewritten from the code; a test diffs it.
openapi: $(STAMP)
	DEBUG=1 PORTAL_TESTING=1 $(PY) manage.py openapi

# Benchmarks against BENCH_DATABASE_URL / BENCH_REDIS_URL, or private servers for the run.
bench: $(STAMP)
	$(PY) -m testbed.devservices \
		--database-url "$(BENCH_DATABASE_URL)" --redis-url "$(BENCH_REDIS_URL)" -- \
		bash bench/run_all.sh

# After changing dependencies in pyproject.toml: re-resolve requirements/*.txt (keeps every
# pin that still fits), then commit both. lock-upgrade moves every pin to the newest allowed.
lock: $(STAMP)
	bash scripts/lock.sh

lock-upgrade: $(STAMP)
	bash scripts/lock.sh --upgrade

lock-check: $(STAMP)
	bash scripts/lock.sh --check

clean:
	rm -rf var/ staticfiles/ test-artifacts/
