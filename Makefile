# Set-up is part of every target: a fresh clone needs nothing but `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-avx2 test-widths lint typecheck fuzz bench docs docs-check notebooks wheel-smoke \
	clean clean-cache

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Everything the tests, lint, type check, notebooks and docs need.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev,interop]'
	touch $(STAMP)

# The demo needs the package and the two extras it uses (the tile figures, the coloured
# report), not the test and docs tools.
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[plot,report]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m teir_plan.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check teir_plan tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Three workers on two cores: a worker waiting for another's compile of a shared kernel
# (executor/cache.py's lock) or for a subprocess leaves its core to the third (11.4
# against 12.6 minutes of pytest on the 2-core AVX2 machine, cold compiled-code cache).
test: $(STAMP) lint typecheck
	$(PY) -m pytest -q -n 3 --durations=40 tests --doctest-modules teir_plan
	$(MAKE) notebooks docs-check

# The test suite again with the kernels, their plans and OpenBLAS at AVX2 width (32-byte
# vectors, 16 registers), on a host with AVX-512: what an AVX2 machine's make test runs,
# doctests included. Tests that assumed a plan of one width have failed at the other (CI
# runs this too).
test-avx2: $(STAMP)
	@if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES= OPENBLAS_CORETYPE=Haswell \
	    $(PY) -m pytest -q -n 2 tests --doctest-modules teir_plan; \
	else echo "test-avx2: no AVX-512 on this host, so make test ran its narrower kernels"; fi

# The kernel test modules whole at every narrower vector width the host executes (make
# test runs a representative of each kernel at those widths): 16-byte vectors and
# BLAS-only on an AVX2 host, also AVX2's 32 on an AVX-512 one.  CI runs it.
test-widths: $(STAMP)
	$(PY) -m pytest -q -m slow tests/test_isa_variants.py -p no:cacheprovider

# The notebooks run top to bottom (small sizes); their outputs stay stripped in git.  They
# plan against the reference machine parameters, as the tests do: a test run neither
# measures this machine on first use nor writes into the user's calibration cache.
notebooks: $(STAMP)
	TEIR_PLAN_AUTOCALIBRATE=reference $(PY) -m pytest -q -n 2 --nbmake notebooks -p no:cacheprovider

# `make docs` regenerates the pages derived from benchmarks/results and the example's
# output (tracked files: commit them), then builds the site into site/, running the
# notebooks so that their pages show their outputs (against the reference parameters, as
# `make notebooks` does; about two minutes).
docs: $(STAMP)
	$(PY) docs/scripts/generate.py
	TEIR_PLAN_DOCS_EXECUTE=true TEIR_PLAN_AUTOCALIBRATE=reference NO_MKDOCS_2_WARNING=1 \
	  $(VENV)/bin/mkdocs build --strict --quiet

# What `make test` runs: writes no tracked file; fails on a stale generated page, a
# broken link or a broken API reference (strict build into the ignored site/).
docs-check: $(STAMP)
	$(PY) docs/scripts/generate.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The wheel as a user installs it: built from an sdist, installed into a fresh venv (not
# editable), the README's example run from outside the source tree, then twice as a user
# who cannot write site-packages (the second run must compile nothing).  CI runs it.
wheel-smoke: $(STAMP)
	PYTHON=$(abspath $(PY)) .ci/wheel-smoke

fuzz: $(STAMP)
	TEIR_PLAN_FUZZ=1 $(PY) -m pytest -q -n 2 tests -p no:cacheprovider --hypothesis-show-statistics

# The peers' OpenBLAS on the kernels it picks for this CPU, as its users have it: a host
# may set OPENBLAS_CORETYPE (with OPENBLAS_L2_SIZE) to an older CPU's, which on an
# AVX-512 CPU halves numpy's GEMM rate (the results name the kernels OpenBLAS ran).
BENCH = env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY)
bench: $(STAMP)
	$(PY) -m pip install -q torch==2.13.0 || echo "torch not installable here: benchmarking without it"
	$(PY) -m pip install -q pytblis==0.0.16 || echo "pytblis not installable here: benchmarking without TBLIS"
	$(PY) -m pip install -q jax==0.10.2 jaxlib==0.10.2 || echo "jax not installable here: benchmarking without it"
	$(BENCH) -m benchmarks.prims
	$(BENCH) -m benchmarks.everyday
	$(BENCH) -m benchmarks.mixed --rounds 2
	$(BENCH) -m benchmarks.mixed --rounds 2 --peer numba
	$(BENCH) -m benchmarks.gaps
	$(BENCH) -m benchmarks.tccg --quick

# numba's compiled-code cache. Not needed for correctness: the executor's cache is keyed on
# every executor source file and the vector target (teir_plan/executor/cache.py).
clean-cache:
	find teir_plan -name '*.nbi' -delete -o -name '*.nbc' -delete

clean: clean-cache
	rm -rf $(VENV) .pytest_cache .hypothesis build dist
