# Two commands do all of the setup on a fresh machine: `make demo` and `make test`.
#
# Everything runs in a virtual environment of its own (.venv), so PEP 668
# system Pythons (Debian, Ubuntu, Homebrew) are never pip-installed into.
# requirements.lock pins the exact versions the suite passed with; `make
# test-latest` tries the newest releases in .venv-latest, and `make lock`
# writes them into requirements.lock once they pass (docs/dependencies.md).
PYTHON ?= python3
VENV ?= .venv
LOCK := requirements.lock
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LATEST := .venv-latest
# torch==2.13.0 is a CPU build. It is installed before anything else, so pip
# never resolves "torch" to a CUDA build of several GB.
TORCH := torch==2.13.0

.PHONY: install demo test test-fast coverage test-latest lock bench device-wheels lint docs docs-check docs-serve clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(LOCK) Makefile | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c $(LOCK) "$(TORCH)"
	$(PY) -m pip install -q -c $(LOCK) -e ".[dev]" -e tests/plugin_backend
	touch $(STAMP)

demo: install
	$(PY) -m combolayer demo

# The suite on TEST_WORKERS pytest-xdist workers (make test TEST_WORKERS=0: in this
# process alone); --dist loadgroup keeps the Ray tests on one worker, so one session
# cluster serves them (tests/conftest.py puts them in one group).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup

test: install
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST)

# Without the tests marked slow, ray, subprocess (they start Python processes) or cuda.
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow and not ray and not subprocess and not cuda"

# The suite as `make test` runs it, measuring line coverage of combolayer/ (pytest-cov):
# a per-file table ending in the TOTAL line, and the JSON report that
# tools/coverage_page.py turns into docs/measurements/coverage.md.
COVERAGE_JSON ?= runs/coverage.json

coverage: install
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --cov=combolayer --cov-report=term \
		--cov-report=json:$(COVERAGE_JSON)

# The newest releases of every dependency (torch stays the CPU build), in a
# separate environment; the lock is untouched.
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q "$(TORCH)"
	$(LATEST)/bin/python -m pip install -q --upgrade -e ".[dev]" -e tests/plugin_backend
	$(LATEST)/bin/python -m pip freeze --exclude-editable > $(LATEST)/freeze.txt
	$(LATEST)/bin/python -m pytest -q -p no:cacheprovider

# Refresh the lock from the newest releases, only after they pass the suite.
lock: test-latest
	{ echo "# The exact set the test suite passed with (make lock writes it; docs/dependencies.md)."; \
	  sed -e 's/+cpu$$//' $(LATEST)/freeze.txt; } > $(LOCK)

bench: install
	$(PY) -m combolayer bench

# The documentation site (MkDocs Material + mkdocstrings) in site/; --strict
# turns every warning (a broken link, a docstring argument that is not in the
# signature) into an error, as tests/test_docs.py does.
docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Every page of the built site in headless Chromium at a laptop's width: no clipped
# code block, no identifier broken mid-token; screenshots in site-check/. Needs
# Chromium (Debian: apt-get install chromium).
docs-check: docs
	$(PY) tools/site_check.py --site site --out site-check

docs-serve: install
	$(VENV)/bin/mkdocs serve

# The wheels a lent CUDA machine lacks (Python 3.12; docs/measurements/gpu.md), at
# the lock's versions, into .device/wheels for tools/device_check.sh to install there.
DEVICE_WHEELS := highspy pydantic pydantic_core annotated-types typing-inspection PySCIPOpt

device-wheels: install
	$(PY) -m pip download -q --only-binary=:all: --python-version 3.12 --no-deps \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .device/wheels \
		$$(for name in $(DEVICE_WHEELS); do grep -i "^$$name==" $(LOCK) | tr _ -; done)

lint: install
	$(VENV)/bin/ruff check combolayer tests benchmarks examples

clean:
	rm -rf $(VENV) $(LATEST)
