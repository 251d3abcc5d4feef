# medic: `make demo` runs the simulated-cluster demo; `make test` runs every check.
# Both create .venv and install what they need, on a fresh Debian machine with Python 3.11.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEPS   := pyproject.toml

.PHONY: demo serve test lint typecheck imports pytest chromium promtool bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python $(DEPS)
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed $(DEPS)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/medic demo

serve: $(VENV)/.installed
	$(BIN)/medic serve

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy src/medic

imports: $(VENV)/.installed-dev
	$(BIN)/lint-imports

# The console's browser tests (tests/console) drive Debian's chromium with Playwright (the dev
# extra); Playwright never downloads a browser of its own. Installed with apt when missing.
chromium:
	@[ -x /usr/bin/chromium ] || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "make: /usr/bin/chromium is missing: apt-get install -y chromium (as root)" >&2; fi; }

# The shipped alert rules (deploy/prometheus) are checked and unit-tested with Debian's real
# promtool (package prometheus; its server is not started). Installed with apt when missing.
promtool:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  else echo "make: promtool is missing: apt-get install -y prometheus (as root)" >&2; fi; }

pytest: $(VENV)/.installed-dev chromium promtool
	eval "$$($(BIN)/python tools/test_databases.py)"; \
	echo "store suite engines: sqlite$${MEDIC_TEST_POSTGRES_URL:+ postgresql}$${MEDIC_TEST_MYSQL_URL:+ mariadb}"; \
	$(BIN)/pytest

test: lint typecheck imports pytest

# Every benchmark, one after the other (about an hour on 2 cores); the last line is one JSON
# object. One of them: make bench ONLY=api (names: benchmarks/bench_NAME.py).
bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run_all.py $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
