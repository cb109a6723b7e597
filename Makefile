# Set-up and entry points. Both `make test` and `make demo` work on a fresh machine:
# they create .venv, install the CPU build of torch and the package, and bubblewrap (as root).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
EXTRAS := train,duckdb,server,docker,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: install test lint format demo clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@if ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing bubblewrap"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
	      || echo "warning: could not install bubblewrap; sandbox tests will skip"; \
	  else echo "warning: bwrap missing and not root; install the 'bubblewrap' package"; fi; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q $(PYTEST_ARGS)

demo: install
	$(BIN)/skyrl demo

clean:
	rm -rf $(VENV) .pytest_cache runs
