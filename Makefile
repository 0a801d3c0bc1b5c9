# The README's two commands: `make run` and `make test`. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint typecheck unit bench chaos eval demo conformance docs clean

# Both virtualenvs are made at once under `make -j`: .venv is made first by either, so
# neither `venv` races the other to create it.
$(STAMP): pyproject.toml
	@mkdir -p $(VENV)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian packages the suite needs; `make -j` may ask for several at once, and apt-get
# takes one at a time.
APT_GET := flock /tmp/longrun-apt.lock apt-get

# Pages are tested in Debian's Chromium, driven by Playwright (which downloads nothing).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium at $(CHROMIUM)"; exit 1; }
	$(APT_GET) install -y -q chromium >/dev/null || { $(APT_GET) update -q && $(APT_GET) install -y -q chromium >/dev/null; }

# Process tools run confined by bubblewrap (activities/tools/sandbox.py); a worker without
# it refuses them.
BWRAP := /usr/bin/bwrap
$(BWRAP):
	@command -v apt-get >/dev/null || { echo "install bubblewrap at $(BWRAP)"; exit 1; }
	$(APT_GET) install -y -q bubblewrap >/dev/null || { $(APT_GET) update -q && $(APT_GET) install -y -q bubblewrap >/dev/null; }

run: $(STAMP) $(BWRAP)  ## the whole local stack: Temporal + UI, worker, API (+ model stand-in)
	$(BIN)/longrun dev

# Lint and types beside the suite, and the two virtualenvs made at once: the suite's
# processes spend much of their time waiting.
test:  ## everything CI runs
	@$(MAKE) --no-print-directory -j 3 lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# docker-compose.yml is validated by Debian's docker-compose, which needs no engine.
COMPOSE := /usr/bin/docker-compose
$(COMPOSE):
	@command -v apt-get >/dev/null || { echo "install docker-compose at $(COMPOSE)"; exit 1; }
	$(APT_GET) install -y -q docker-compose >/dev/null || { $(APT_GET) update -q && $(APT_GET) install -y -q docker-compose >/dev/null; }

# An MCP server over streamable HTTP for the tests: mcp-proxy serving a stdio server. It
# pins an older `mcp` than longrun's, so it lives in a venv of its own.
MCP_PROXY := $(VENV)/mcp-proxy/bin/mcp-proxy
$(MCP_PROXY):
	@mkdir -p $(VENV)
	$(PYTHON) -m venv $(VENV)/mcp-proxy
	$(VENV)/mcp-proxy/bin/python -m pip install --quiet 'mcp-proxy==0.13.0'

# Three processes, each with its own Temporal dev server, stand-in and workers; a file's
# tests stay together on one (they share its fixtures). Files go out in collection order,
# which puts the long ones first (tests/conftest.py), not ordered by how many tests they
# hold. Three on two cores, because much of a test is waiting (for a heartbeat to time out,
# a worker to start, a page to load): a third process fills that time.
unit: $(STAMP) $(CHROMIUM) $(COMPOSE) $(MCP_PROXY) $(BWRAP)
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder

BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

# One table against bare Temporal and plain loops, kept in bench/results.json; never asserted.
# `make bench QUICK=1` is the few-minute version.
bench: $(BENCH_STAMP)  ## every benchmark: overhead, API, load, watchers, waiting runs, context, billing, faults (~1 h)
	$(BIN)/python bench/suite.py $(if $(QUICK),--quick)

chaos: $(STAMP)  ## runs under killed workers, Temporal and API restarts and model outages, printed (~11-14 min)
	$(BIN)/python bench/chaos.py

# The task suite on the stand-in, calm and under chaos, 4 attempts a task; JSON and plots in
# eval-results/. `K=`, `EVAL_ARGS=` (e.g. --model-url ... --model ...) change it.
K ?= 4
eval: $(BENCH_STAMP) $(BWRAP)  ## the task suite scored pass^1/pass^k, calm and with --chaos (~4 min)
	$(BIN)/longrun eval evals/ --k $(K) $(EVAL_ARGS)
	$(BIN)/longrun eval evals/ --k $(K) --chaos $(EVAL_ARGS)

demo: $(STAMP)  ## a goal-only run against the stack that `make run` started
	$(BIN)/longrun demo

conformance: $(STAMP)  ## what the model server in OPENAI_BASE_URL/LONGRUN_MODEL can do
	$(BIN)/longrun conformance

# Reference docs written from the code; tests/longrun/test_docs.py fails while they are stale.
docs: $(STAMP)  ## docs/settings.md from longrun/settings.py; eval and benchmark tables from their results
	$(BIN)/python -m longrun.dev.docs

clean:
	rm -rf $(VENV) .longrun .mypy_cache .ruff_cache .pytest_cache
