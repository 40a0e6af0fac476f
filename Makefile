# The two commands a newcomer needs (see README):
#   make demo   - set everything up and run the main job on its embedded default
#   make test   - set everything up and run the whole test suite (what CI runs)
# Everything is installed into ./.venv and ./node_modules; nothing global but the
# Debian packages the tests need.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STORAGE_DIR ?= .ray-history

.PHONY: demo test test-fast lint typecheck venv node-deps system-deps clean bench

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

node-deps: node_modules/.installed

# Debian's chromium drives the Dashboard UI tests (Playwright never downloads a browser).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Ray + collector + a failing sample job, then the history server on what was stored.
demo: venv
	$(PY) -m runtime.quickstart --storage-dir $(STORAGE_DIR)

test: venv node-deps system-deps
	$(VENV)/bin/ruff check runtime infra tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

test-fast: venv node-deps system-deps
	$(VENV)/bin/pytest -m "not slow"

lint: venv
	$(VENV)/bin/ruff check runtime infra tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff format --check runtime infra tests bench

typecheck: venv
	$(VENV)/bin/mypy

bench: venv node-deps
	$(PY) bench/storage_upload_memory.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
