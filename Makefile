# Two commands do all of the setup on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .make-installed

.PHONY: install demo test bench lint clean

install: $(STAMP)

# torch==2.13.0 first, pinned: a CPU build. Installing it before the package
# keeps pip from resolving "torch" to a CUDA build of several GB.
$(STAMP): pyproject.toml Makefile
	$(PIP) install "torch==2.13.0"
	$(PIP) install -e ".[dev]"
	$(PIP) install -e tests/plugin_backend
	touch $(STAMP)

demo: install
	$(PYTHON) -m combolayer demo

test: install
	$(PYTHON) -m pytest -q -p no:cacheprovider

bench: install
	$(PYTHON) -m combolayer bench

lint: install
	ruff check combolayer tests benchmarks examples

clean:
	rm -f $(STAMP)
