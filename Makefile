# Set-up is part of every target: a fresh clone needs nothing but `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck fuzz bench docs notebooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,interop]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m teir_plan.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check teir_plan tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) lint typecheck
	$(PY) -m pytest -q -n 2 tests
	$(MAKE) notebooks docs

# The notebooks run top to bottom (small sizes); their outputs stay stripped in git.
notebooks: $(STAMP)
	$(PY) -m pytest -q -n 2 --nbmake notebooks -p no:cacheprovider

# Pages generated from benchmarks/results, then a strict build: a broken link or
# API reference fails.
docs: $(STAMP)
	$(PY) docs/scripts/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

fuzz: $(STAMP)
	TEIR_PLAN_FUZZ=1 $(PY) -m pytest -q -n 2 tests -p no:cacheprovider --hypothesis-show-statistics

bench: $(STAMP)
	$(PY) -m pip install -q torch==2.13.0 || echo "torch not installable here: benchmarking without it"
	$(PY) -m benchmarks.prims
	$(PY) -m benchmarks.tccg --quick

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
