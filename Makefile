# The two entry points a newcomer needs: `make demo` (the demo experiment on the
# built-in local cluster) and `make test` (the whole test suite). Both create the
# environment and build (or reuse) the cluster binaries on their first run.
PY ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python

.PHONY: venv binaries test unit demo docs clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt trainable-runtime/pyproject.toml operator/pyproject.toml
	$(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-deps -e trainable-runtime -e operator
	touch $@

binaries: venv
	$(PYTHON) -m devcluster build

test: binaries
	$(PYTHON) -m pytest

unit: venv
	$(PYTHON) -m pytest tests/unit

demo: binaries
	$(PYTHON) -m examples.digits.demo

# docs/api-reference.md from the CRDs (after a CRD change; tests/unit/test_docs.py fails while it is stale)
docs: venv
	$(PYTHON) docs/api_reference.py

clean:
	rm -rf $(VENV) .pytest_cache
