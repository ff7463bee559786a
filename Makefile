# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench mpi-check gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py
	@echo "The GEMM kernel's explain page (source, IR levels and PTX linked; tile map):"
	@$(PY) examples/explain/gemm_page.py build/explain/gemm.html

test: $(STAMP)
	$(VENV)/bin/ruff check tessera tests examples benchmarks
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -n 2 tests

# The mesh simulator over MPI ranks: the same SHA-256 as one process for 1, 2 and 4 ranks.
mpi-check: $(STAMP)
	@ref=$$($(PY) tests/mesh_sim/mpi_allreduce_check.py --reference); \
	echo "one process, functools.reduce: $$ref"; \
	for n in 1 2 4; do \
	  got=$$($(VENV)/bin/mpiexec -n $$n $(PY) tests/mesh_sim/mpi_allreduce_check.py); \
	  echo "mpiexec -n $$n: $$got"; \
	  [ "$$got" = "$$ref" ] || { echo "MPI result differs from the one-process sum"; exit 1; }; \
	done

# On a GPU machine (see .ci/gpu-check): the PTX tests with every Target IR interpreter
# run repeated on the GPU bit for bit, then the example kernels timed against cuBLAS/SDPA.
gpu-check:
	bash .ci/gpu-check

lint: $(STAMP)
	$(VENV)/bin/ruff check tessera tests examples benchmarks

bench: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
