# The two entry points of the README: `make run` and `make test`. Each does every set-up step itself (virtualenv,
# Python packages, the pinned binaries of the local stack) and is cheap to repeat once things are in place.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test setup binaries containers lint pytest record-histories

run: binaries
	$(BIN)/grove-temporal run

test: lint binaries containers pytest

setup: $(VENV)/.installed

# Reinstall when the dependencies change; the package itself is installed editable.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# Cached under $$GROVE_TEMPORAL_BIN_DIR (default ~/.cache/grove-temporal/bin); the first run builds them.
binaries: setup
	$(BIN)/grove-temporal binaries

# helm, and where a Docker Engine can be found or started (installed with apt-get as root): docker compose v2 and
# the images of tests/containers/, all cached outside the clone; without an engine it says why and goes on.
containers: binaries
	$(BIN)/grove-temporal containers prepare

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

pytest: setup binaries
	$(BIN)/pytest --timeout=900 $(PYTEST_ARGS)

# Re-record the workflow histories that tests/workflows/test_replay.py replays (runs the end-to-end suite).
record-histories: setup binaries
	$(BIN)/pytest --timeout=900 tests/e2e --record-histories
