# The two commands a newcomer needs are `make demo` and `make test`; each creates .venv when
# missing and installs what it needs (re-installing only when pyproject.toml changed); `make test`
# also installs the system tools its tests drive (nsys, Chromium, procps: tests/install-tools.sh).

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test lint typecheck bench samples docs-images clean mutate fuzz

# The packages mypy checks ([tool.mypy] in pyproject.toml holds its settings).
TYPED = parsers taxonomy analyzer

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/rlperf demo

# Test processes (pytest-xdist; a test file runs whole in one of them, so its module fixtures
# are built once; the longest files go first, tests/conftest.py). 2 fits the 2-core CI machine;
# `make test WORKERS=0` runs in one process.
WORKERS ?= 2

test: $(VENV)/.installed-test
	tests/install-tools.sh
	$(BIN)/ruff check .
	$(BIN)/python -m mypy $(TYPED)
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed-test
	$(BIN)/python -m mypy $(TYPED)

$(VENV)/.installed-samples: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[samples]'
	touch $@ $(VENV)/.installed

# Regenerates sample_traces/runs/ from scratch (real tiny RL runs on CPU; nsys for one of them)
# and the synthetic samples in sample_traces/synthetic/.
samples: $(VENV)/.installed-samples
	$(BIN)/python -m sample_traces.harness.run
	$(BIN)/python -m sample_traces.synth.samples

# Screenshots of a sample run's HTML report for docs/reports.md (headless Chromium, offline).
docs-images: $(VENV)/.installed-test
	$(BIN)/python docs/img/screenshots.py

# Speed and memory against the references, measured in the same run (figures in each script's doc).
bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/nsys_ingest.py
	$(BIN)/python benchmarks/logs_ingest.py
	$(BIN)/python benchmarks/analyze_scale.py
	$(BIN)/python benchmarks/dataset.py
	$(BIN)/python benchmarks/dataset_scale.py --ranks 1024
	$(BIN)/python benchmarks/vs_hta.py
	$(BIN)/python benchmarks/scale.py --ranks 8,64,256

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# Mutation testing (docs/mutation.md); not part of `make test`. MODULES: source files or folders
# whose mutants to run, every one of them again (empty: all of [tool.mutmut] only_mutate, going on
# where the last run stopped); MUTANTS: mutmut name globs instead; MAX_SECONDS: the wall-clock
# limit of the whole run (results so far are kept in build/mutate/mutants/); SAMPLE: run N mutants
# drawn uniformly at random with SEED from all of them instead, listed in build/mutate/sample-SEED-N.txt.
MODULES     ?=
MAX_SECONDS ?= 3600
SAMPLE      ?=
MUTATE_DIR   = build/mutate
MUTANTS      = $(foreach m,$(MODULES),'$(subst /,.,$(patsubst %.py,%,$(m:/=))).*')
MUTATE_LIST  = sample-$(SEED)-$(SAMPLE).txt

$(VENV)/.installed-mutate: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,mutate]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-test

mutate: $(VENV)/.installed-mutate
	mkdir -p $(MUTATE_DIR)
	cd $(MUTATE_DIR) && for p in parsers taxonomy analyzer tests sample_traces docs pyproject.toml; do \
	    [ -e $$p ] && [ ! -L $$p ] || ln -sfn $(CURDIR)/$$p $$p; done && ln -sfn ../../../shared shared
ifeq ($(SAMPLE),)
	-cd $(MUTATE_DIR) && timeout $(MAX_SECONDS) nice -n 15 $(abspath $(BIN))/mutmut run --max-children 2 $(MUTANTS)
	cd $(MUTATE_DIR) && $(abspath $(BIN))/python $(CURDIR)/tests/mutation_score.py mutants $(CURDIR)/docs/mutation.md $(MUTANTS)
else
	cd $(MUTATE_DIR) && nice -n 15 $(abspath $(BIN))/python $(CURDIR)/tests/mutation_score.py sample $(SAMPLE) $(SEED) $(MUTATE_LIST)
	-cd $(MUTATE_DIR) && timeout $(MAX_SECONDS) nice -n 15 $(abspath $(BIN))/mutmut run --max-children 2 $$(cat $(MUTATE_LIST))
	cd $(MUTATE_DIR) && $(abspath $(BIN))/python $(CURDIR)/tests/mutation_score.py mutants $(CURDIR)/docs/mutation.md --names $(MUTATE_LIST)
endif

# The long fuzz run (docs/testing.md): CASES damaged corpus inputs from SEED, counts per parser
# and outcome; `make test` runs a CI-sized one.
CASES ?= 200000
SEED  ?= 0
fuzz: $(VENV)/.installed-test
	nice -n 10 $(BIN)/python -m tests.fuzz.long_run --cases $(CASES) --seed $(SEED)
