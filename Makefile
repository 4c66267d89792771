# Two commands matter: `make demo` and `make test`. Both bootstrap .venv from scratch.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Bytecode caches (gitignored) spare every run, and every engine process the tests start,
# recompiling our modules and re-rewriting the tests' asserts: about 1.5 s of CPU per
# `make test`. Some environments turn them off for everything; the recipes turn them back on.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test redis-server lint typecheck contracts unit bench bench-core bench-zmq bench-floor fmt demo-model harmony-model clean protos protos-check

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,vision]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/smg-trio demo

test: $(STAMP) redis-server lint typecheck contracts unit

# The tenant tests start their own redis-server (harness/redis_server.py). On a fresh Debian
# machine, as root (CI), install Debian's package when it is absent; anywhere else those tests
# skip with a reason. PostgreSQL stays opt-in (SMG_TRIO_POSTGRES=1): it is not installed here.
redis-server:
	@command -v redis-server >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; \
	  else echo "redis-server is absent and cannot be installed here: its tests will skip"; fi; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

# Two phases (docs/architecture.md §8.1): the tests not marked `serial` on PYTEST_WORKERS processes
# (pytest-xdist, one test file per worker at a time, so a module's shared engine starts once),
# then the `serial` ones (real-time bounds) alone, collected only from the files that mark them.
# Both phases run even when the first fails, so one run shows every failure; either fails `unit`.
PYTEST_WORKERS ?= 3
unit: $(STAMP)
	status=0; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" || status=$$?; \
	$(BIN)/pytest -m serial $$(grep -rl --include='test_*.py' 'mark.serial' tests) || status=$$?; \
	exit $$status

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# `make bench SMG_BIN=/path/to/smg` also measures the Rust smg as an anchor in scenario (a).
bench: $(STAMP)
	$(BIN)/python -m bench scenarios $(if $(SMG_BIN),--scenarios a --smg-bin $(SMG_BIN))

bench-core: $(STAMP)
	$(BIN)/python -m bench core_pipeline

bench-zmq: $(STAMP)
	$(BIN)/python -m bench zmq_throughput

bench-floor: $(STAMP)
	$(BIN)/python -m bench floor_compare

demo-model: $(STAMP)
	$(BIN)/python scripts/build_demo_model.py

harmony-model: $(STAMP)
	$(BIN)/python scripts/build_harmony_model.py

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

protos-check: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis
