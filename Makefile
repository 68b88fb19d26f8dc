# transflow: every target bootstraps .venv itself (standard-library venv + pip).
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
CONSTRAINTS ?= constraints/cpu.txt
PIP_C       := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP       := $(VENV)/.transflow-installed
# Keep BLAS/XLA from oversubscribing the 2-core CI machines.
export XLA_PYTHON_CLIENT_PREALLOCATE ?= false
export PYTHONUNBUFFERED = 1

.PHONY: all venv run test test-slow test-all figures figures-smoke bench lint format docs docs-serve clean

all: test

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(PIP_C) -e '.[reference,dev,docs]'
	touch $(STAMP)

venv: $(STAMP)

## The main job: a random PyTorch layer, reproduced by the split scheme (see README).
run: $(STAMP)
	$(BIN)/transflow-run

## The test suite (fast; `slow` tests excluded).
# A native backtrace if a test worker crashes (tests/tools/segv_backtrace.c; issue #40):
# preloaded when a C compiler built it, otherwise the suite runs without it.
NATIVE_BT := $(VENV)/segv_backtrace.so
$(NATIVE_BT): tests/tools/segv_backtrace.c
	-$(CC) -shared -fPIC -O1 -o $@ $< || echo "no native crash backtraces (no C compiler)"

# A persistent JAX compilation cache in a fresh temporary directory, removed afterwards:
# the two workers and the smoke runs' subprocesses reuse each other's compiled programs
# (the same program compiled in several tests; about 13 % of the scheme tests' time).
# Fresh per run, so a run never reads programs compiled by older code or another jaxlib.
test: $(STAMP) $(NATIVE_BT)
	if [ -f $(NATIVE_BT) ]; then export LD_PRELOAD="$(CURDIR)/$(NATIVE_BT)"; fi; \
	cache=$$(mktemp -d -t transflow-jax-cache.XXXXXX); \
	export JAX_COMPILATION_CACHE_DIR=$$cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
		JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0; \
	$(BIN)/python -m pytest -m "not slow" -n 2 -q --durations=20; rc=$$?; \
	rm -rf "$$cache"; exit $$rc

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

figures: $(STAMP)
	$(BIN)/python paper_figures/make_all.py $(ARGS)

# tiny versions into paper_figures/out/smoke/ (the full-size figures are left as they are)
figures-smoke: $(STAMP)
	$(BIN)/python paper_figures/make_all.py --smoke $(ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

## The documentation site into site/ (--strict: a broken link, a missing page or an API
## name mkdocstrings cannot resolve fails the build); docs-serve serves it on :8000.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

lint: $(STAMP)
	$(BIN)/ruff check src tests experiments paper_figures benchmarks
	$(BIN)/ruff format --check src tests experiments paper_figures benchmarks

format: $(STAMP)
	$(BIN)/ruff format src tests experiments paper_figures benchmarks
	$(BIN)/ruff check --fix src tests experiments paper_figures benchmarks

clean:
	rm -rf $(VENV) outputs multirun paper_figures/out site .pytest_cache .ruff_cache
