# The two commands a newcomer needs (see README):
#   make demo   - set up the demo environment and run the quickstart on its embedded default
#   make test   - set up the development environment and run the whole suite (what CI runs)
# Everything is installed into ./.venv and ./node_modules; nothing global but the
# Debian packages the tests need.
#
# One venv, two levels: `make demo` installs the runtime + quickstart extra only (no
# Pulumi SDKs, linters or emulators); `make test` installs the dev extra on top. Each level
# has its own marker; the dev one also satisfies the demo one, so `make test` after
# `make demo` upgrades the venv and `make demo` after `make test` leaves it as it is.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STORAGE_DIR ?= .ray-history
SITE_DIR ?= .test-artifacts/site

.PHONY: demo test native test-native test-fast lint typecheck docs venv venv-demo node-deps system-deps clean bench

define check_python
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version.split()[0]'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
endef

# The development environment: everything `make test` runs.
$(VENV)/.installed: pyproject.toml
	$(check_python)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.demo-installed

# The demo environment. A dev venv that is up to date already holds all of it (dev is a
# superset): leave it alone rather than spend minutes re-resolving.
DEV_CURRENT := $(shell [ $(VENV)/.installed -nt pyproject.toml ] && echo yes)
$(VENV)/.demo-installed: pyproject.toml
ifeq ($(DEV_CURRENT),yes)
	@echo "$(VENV) already holds the dev extra, which includes the demo's"
else
	$(check_python)
	$(PY) -m pip install --quiet -e '.[quickstart]'
endif
	@touch $@

venv: $(VENV)/.installed

venv-demo: $(VENV)/.demo-installed

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

node-deps: node_modules/.installed

# Debian's chromium drives the Dashboard UI tests (Playwright never downloads a browser).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@# The metrics test (#20) scrapes a real Ray head with Debian's Prometheus.
	@command -v prometheus >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq prometheus >/dev/null; }

# Ray + collector + a failing sample job, then the history server on what was stored.
demo: venv-demo
	$(PY) -m runtime.quickstart --storage-dir $(STORAGE_DIR)

test: venv node-deps system-deps
	$(VENV)/bin/ruff check runtime ray_history_pulumi infra pulumi-package tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir $(SITE_DIR)
	$(VENV)/bin/pytest
	$(MAKE) --no-print-directory test-native

# The index builder's hot path compiled with mypyc, as the server image ships it (setup.py):
# compiled in a copy of the tree (never here, where a compiled module would shadow every
# later edit of its source) and the build's tests run there against it.
NATIVE_DIR ?= .test-artifacts/native
NATIVE_TESTS := tests/unit/server/index tests/unit/server/replay tests/unit/server/perf_index \
  tests/unit/server/queries tests/unit/server/test_build.py tests/unit/server/test_build_progress.py \
  tests/unit/server/test_golden_session_a.py tests/unit/server/test_hostile_sessions.py \
  tests/unit/server/test_index_building.py tests/unit/server/test_index_child.py
native: venv
	rm -rf $(NATIVE_DIR) && mkdir -p $(NATIVE_DIR)
	git ls-files --cached --others --exclude-standard | tar --create --file - --files-from - --ignore-failed-read \
	  | tar --extract --file - --directory $(NATIVE_DIR)
	cd $(NATIVE_DIR) && RHS_MYPYC=1 $(abspath $(PY)) setup.py --quiet build_ext --inplace
	# Bytecode for the modules left as Python, as pip writes it when it installs the wheel:
	# without it every builder and worker process compiles them again (~0.1 s each).
	cd $(NATIVE_DIR) && $(abspath $(PY)) -m compileall -q runtime

test-native: native
	cd $(NATIVE_DIR) && RHS_EXPECT_NATIVE=1 PYTHONPATH=. $(abspath $(PY)) -m pytest -p no:cacheprovider $(NATIVE_TESTS)

test-fast: venv node-deps system-deps
	$(VENV)/bin/pytest -m "not slow"

lint: venv
	$(VENV)/bin/ruff check runtime ray_history_pulumi infra pulumi-package tests bench
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff format --check runtime ray_history_pulumi infra pulumi-package tests bench docs

typecheck: venv
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/); broken links and stale generated tables fail.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(SITE_DIR)

bench: venv node-deps
	$(PY) bench/storage_upload_memory.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
