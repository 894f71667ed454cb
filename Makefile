# Two commands set everything up and run: `make run` (the flagship job) and `make test`;
# `make docs` builds the documentation site into site/.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-one-process docs bench clean browser bytecode

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark,docs]'
	touch $@

# The package byte-compiled ahead: an editable install compiles on import, and where
# PYTHONDONTWRITEBYTECODE is set (as on some CI machines) every process would compile all of it
# again — each worker process, each job process a kill test starts (0.15 s of CPU a start here).
# Only what changed since is compiled again.
bytecode: $(BIN)/.installed
	$(BIN)/python -m compileall -q slipstream

run: $(BIN)/.installed bytecode
	$(BIN)/python examples/bootstrap_then_stream.py --live 20000  # 5 s of live records, then the latency figures

# One test process per core, at most four (each may start a Spark JVM): pytest-xdist. A plain `pytest`
# (or `-n 0`) runs the suite in one process, as a debugger needs. Every job that configures no worker
# count and runs above parallelism 1 runs on two worker processes (tests/conftest.py).
test: $(BIN)/.installed browser bytecode
	$(BIN)/python -m pytest -n auto --maxprocesses=4

# The suite with every job that configures no worker count in the test's process: about 0.8 times
# `make test`'s time.
test-one-process: $(BIN)/.installed browser bytecode
	SLIPSTREAM_WORKERS=1 $(BIN)/python -m pytest -n auto --maxprocesses=4

docs: $(BIN)/.installed
	$(BIN)/python -m mkdocs build --strict

# The web view's test renders the page in headless Chromium, a Debian package: installed here when
# missing and we are root (as on CI); otherwise the test says how to install it.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/stream_throughput.py

clean:
	rm -rf $(VENV) build site *.egg-info
