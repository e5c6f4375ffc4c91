# The README's two commands: `make run` (the main job) and `make test` (the test suite).
# Each creates .venv and installs the project on first use (CPU PyTorch first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup chromium run test test-slow bench ui clean

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

bench: setup
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

ui: setup
	$(BIN)/ragtrack ui

clean:
	rm -rf outputs multirun .cache
