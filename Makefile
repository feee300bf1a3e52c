# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ptflow-installed
PYTEST_ARGS ?=

.PHONY: venv demo test check lint format bench clean

$(STAMP): envs/requirements.txt envs/requirements-dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile -r envs/requirements-dev.txt
	$(VENV)/bin/pip install -q --no-deps -e .
	# Byte-compile on every core: pip compiles on one (50 s of an 86 s install here). Compiled now, not on first
	# import, because PYTHONDONTWRITEBYTECODE (set on some machines) would make every import compile again. As with
	# pip, a file that does not compile (a test of some package in old syntax) is skipped.
	-$(PY) -m compileall -qq -j 0 $(VENV)/lib
	touch $@

venv: $(STAMP)

# The suite's environment: the venv first on PATH, and bytecode written (PYTHONDONTWRITEBYTECODE cleared). Where that
# variable is set (this kind of machine sets it), every pytest-xdist worker rewrote and compiled every test module
# again at collection (8.4 CPU-s each, 3.6 with the cache pytest writes beside them), and every process of the run
# compiled the ptflow modules it imported. `make test` writes them in one collection first: its workers collect at
# once, and each would rewrite every module again. The files go to __pycache__ (ignored by git and `ptflow remote`).
PYTEST_ENV = PATH="$(abspath $(VENV))/bin:$$PATH" PYTHONDONTWRITEBYTECODE=

# The embedded default: the whole matrix on this machine (no GPU, no Slurm, no network), then the leaderboard.
demo: venv
	$(VENV)/bin/snakemake --profile profiles/local
	@cat results/leaderboard.md

# Every test, the real Slurm cluster ones included (they start it themselves). pytest's exit 5 (no tests
# collected) fails here like any other non-zero exit. Five workers on two cores: the Slurm tests mostly wait on the
# cluster, so the CPU-bound workflow runs go on beside them (scopes: tests/conftest.py, suite_scope). With four the
# CPUs idled 15 % of the run (all four workers waiting on Slurm at once) and the suite took 1,163-1,180 s; with five,
# 4 % and 1,065 s on the same machine (bench/RESULTS.md, the suite).
TEST_WORKERS ?= 5
test: venv
	-$(PYTEST_ENV) $(VENV)/bin/pytest --collect-only -q -p no:cacheprovider > /dev/null  # the caches above, once (errors: below)
	$(PYTEST_ENV) $(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The inner loop: lint and the unit tests (no Slurm cluster, no workflow runs), in under two minutes. Three workers on
# two cores: some unit tests wait (signals, timeouts, a trainer starting up), and with two workers a core idled while
# one of them waited (2:20 with -n 2, 1:48 with -n 3 on the same quiet 2-core machine; bench/RESULTS.md).
CHECK_WORKERS ?= 3
check: lint
	$(PYTEST_ENV) $(VENV)/bin/pytest tests/unit -n $(CHECK_WORKERS) $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check src tests workflow bench
	$(VENV)/bin/ruff format --check src tests workflow bench
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules
	$(VENV)/bin/snakemake --lint

format: venv
	$(VENV)/bin/ruff format src tests workflow bench
	$(VENV)/bin/ruff check --fix src tests workflow bench
	$(VENV)/bin/snakefmt Snakefile workflow/rules

bench: venv
	$(PY) bench/demo_time.py

clean:
	rm -rf results/* .scratch .snakemake
	touch results/.gitkeep
