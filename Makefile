# The README's two commands: `make run` (the main job) and `make test` (the test suite).
# Each creates .venv and installs the project on first use (CPU PyTorch first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup chromium run test test-slow lint regress bench ui clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: setup
	$(BIN)/ragtrack run $(ARGS)

test: setup chromium
	$(BIN)/python -m pytest $(ARGS)

# tests/test_ui.py drives Debian's chromium headless (CI runs as root on a fresh Debian machine).
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "make: could not install chromium (needs root and apt-get): tests/test_ui.py will fail"


test-slow: setup
	$(BIN)/pip install --quiet -e '.[dev,scale]'
	$(BIN)/python -m pytest -m slow $(ARGS)

# The layers contract (pyproject [tool.importlinter]) on an installed copy of the package: import-linter
# reads a package's folder tree, which only an install assembles from the repo's folders.
lint: setup
	rm -rf .cache/lint && $(BIN)/pip install --quiet --no-deps --no-build-isolation --target .cache/lint .
	cd .cache && PYTHONPATH=lint ../$(BIN)/lint-imports --config ../pyproject.toml --no-cache

# Expected scores of the shipped datasets (pipeline/regressions.yaml); ARGS=--slow adds the dense conditions.
regress: setup
	$(BIN)/ragtrack regress $(ARGS)

bench: setup
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

ui: setup
	$(BIN)/ragtrack ui

clean:
	rm -rf outputs multirun .cache
