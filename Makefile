# The README's two commands: `make run` (the main job) and `make test` (the test suite).
# Each creates .venv and installs the project on first use (CPU PyTorch first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test test-slow bench ui clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: setup
	$(BIN)/ragtrack run $(ARGS)

test: setup
	$(BIN)/python -m pytest $(ARGS)

test-slow: setup
	$(BIN)/pip install --quiet -e '.[dev,scale]'
	$(BIN)/python -m pytest -m slow $(ARGS)

bench: setup
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

ui: setup
	$(BIN)/ragtrack ui

clean:
	rm -rf outputs multirun .cache
