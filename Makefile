# The README's two commands: `make run` (the main job) and `make test test-slow` (the default suite, then the
# slow tests: what .ci/run runs).
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

# Two pytest workers (the CI machine's 2 cores), a test file per worker (docs/development.md).
test: setup chromium lint
	$(BIN)/python -m pytest -n 2 --dist loadfile $(ARGS)

# The browser tests (tests/integration/test_ui.py) use Debian's chromium: installed with apt-get when
# missing and run as root (as CI does); otherwise playwright's own Chromium (needs the internet); else
# the browser tests skip with the reason (they fail instead under CI=true).
chromium: setup
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		$(BIN)/playwright install chromium >/dev/null 2>&1 || echo "make: no chromium (not root, and playwright could not download its own): the browser tests will be skipped"; \
	fi

test-slow: setup
	$(BIN)/pip install --quiet -e '.[dev,scale]'
	$(BIN)/python -m pytest -m slow $(ARGS)

# The formatter and the linter (ruff, pyproject [tool.ruff]), then the layers contract (pyproject
# [tool.importlinter]), checked on a plain install of the checkout: import-linter reads a package's folder, and
# the checkout's ragtrack/ holds only the package root (docs/development.md). The wheel test checks the installed
# wheel too. `make test` runs this first.
lint: setup
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .
	rm -rf build/lint
	$(BIN)/pip install --quiet --no-deps --no-build-isolation --target build/lint .
	cd build/lint && ../../$(BIN)/lint-imports --config ../../pyproject.toml --no-cache

# Expected scores of the shipped datasets (pipeline/regressions.yaml); ARGS=--slow adds the dense conditions.
regress: setup
	$(BIN)/ragtrack regress $(ARGS)

bench: setup
	for script in $(filter-out bench/machine.py,$(wildcard bench/*.py)); do $(BIN)/python $$script || exit 1; done

ui: setup
	$(BIN)/ragtrack ui

clean:
	rm -rf outputs multirun .cache
