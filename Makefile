# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(VENV)/bin/ruff check tessera tests examples benchmarks
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -n 2 tests

lint: $(STAMP)
	$(VENV)/bin/ruff check tessera tests examples benchmarks

bench: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
