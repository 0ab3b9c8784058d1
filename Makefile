# unlearnbench: `make demo` runs the built-in example, `make test` the test suite (both install first).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PYTHONUNBUFFERED := 1

.PHONY: install demo test test-fast lint docs bench readme-table study text-study tune-study forget-quality clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: install
	$(BIN)/unlearnbench

# The tests keep Python's bytecode caches (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set:
# without them each of the suite's fresh interpreters (test workers, forkservers, SLURM's tasks) compiles the project
# again, and each test worker rewrites every test module's asserts again (14.3 CPU-s a worker's collection against
# 8.8 with the caches).
TESTS := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test: install  # one worker more than the cores (pytest-xdist, tests/conftest.py), each test file on one worker (module fixtures built once), the longest files first (tests/conftest.py)
	$(TESTS) -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test-fast: install  # the inner loop: the tests that start no process (a test that does fails, saying to mark it) and are not slow
	$(TESTS) -q -n auto --dist loadfile --no-loadscope-reorder -m "not processes and not slow" --durations=10

lint: install
	$(BIN)/ruff check unlearnbench conf tests benchmarks scripts hydra_plugins docs/examples

docs: install  # the documentation site into site/; --strict: a broken link, anchor or include, or a page outside the nav, fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: install
	$(BIN)/python benchmarks/bench_demo.py
	$(BIN)/python benchmarks/bench_foltr.py
	$(BIN)/python benchmarks/bench_decode.py
	$(BIN)/python benchmarks/bench_throughput.py
	$(BIN)/python benchmarks/bench_launcher.py
	$(BIN)/python benchmarks/bench_during.py
	$(BIN)/python benchmarks/bench_during.py experiment=tofu

readme-table: install  # rerun the demo from an empty cache and rewrite README.md's table, naming this machine
	$(BIN)/python scripts/readme_demo_table.py

study: install  # the seed study's Figure 1 on digits (about 10 minutes on 2 cores): docs/seed_study.png, docs/seed-study.md's table and docs/comparing.md's leaderboard
	$(BIN)/python scripts/seed_study.py --docs

tune-study: install  # tuning on one training seed against three, three replicates of 30 trials each on disjoint seed sets, judged on five held-out seeds (about 15 minutes on 2 cores): docs/tuning.md's tables
	$(BIN)/python scripts/tune_study.py --docs

text-study: install  # the seed study on the text task (about 3 minutes on 2 cores): docs/text_seed_study.png and docs/text.md's table
	$(BIN)/python scripts/text_seed_study.py --docs

forget-quality: install  # experiment=forget_quality on digits (125 jobs, about an hour on 2 cores): docs/forget_quality.png and docs/forget-quality.md's table
	$(BIN)/python scripts/forget_quality_table.py --docs

clean:
	rm -rf multirun_outputs outputs seed_study text_seed_study tune_study forget_quality site .cache .pytest_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
