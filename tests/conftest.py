"""Fixtures shared by the tests (helper functions live in helpers.py and fabricate.py), the schedule of the files,
and `make test-fast`'s guard."""

from __future__ import annotations

import json
import multiprocessing.process
import os
import subprocess
from pathlib import Path

# OpenMP threads that wait for a busy core sleep instead of spinning (read once, when torch loads its OpenMP runtime,
# so before `import torch`; workers and the processes they start inherit it). The workers load the cores fully: a
# job at two threads, whose second thread often waits for a core another worker holds, ran twice as fast so (12 s
# against 21 s). It changes no result, only how the threads wait.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch
from helpers import TINY, compose_config
from omegaconf import DictConfig, OmegaConf

from unlearnbench.runtime.seeding import configure_determinism

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch thread per worker (`make test`): a second thread, here or in a job that leaves runtime.threads unset
    # (the demo), would oversubscribe the cores, and OpenMP threads that wait for a busy core run several times
    # slower.
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def tiny() -> list[str]:
    """A digits setting that trains in about a second per model and still learns."""
    return list(TINY)


@pytest.fixture(scope="session")
def cfg_tiny_global() -> DictConfig:
    """The tiny digits job's config, composed once per run (lightning-hydra-template's `cfg_train_global`): tests
    take a copy (`cfg_tiny`) and change what they test instead of keeping override lists."""
    cfg = compose_config(list(TINY))
    OmegaConf.set_readonly(cfg, True)
    return cfg


@pytest.fixture
def cfg_tiny(cfg_tiny_global, tmp_path) -> DictConfig:
    """A writable copy of `cfg_tiny_global` whose data and cache folders are the test's own."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg_tiny_global))
    cfg.paths.data_dir, cfg.paths.cache_dir = str(tmp_path / "data"), str(tmp_path / "cache")
    return cfg


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """The suite's model cache, for the tests that assert nothing about where a model came from: the product's own
    content-addressed cache, shared by every xdist worker of the run (an entry is published whole, under a lock that
    makes a second worker wait instead of training twice), so that a tiny M_o or M_r that many tests need is
    trained once per suite. Tests about the cache itself (hits, training once, what a cold run computes) keep one
    of their own."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if base.name.startswith("popen-gw") else base) / "shared-cache"


@pytest.fixture(scope="module")
def one_thread():
    """Float32 on one CPU thread with the deterministic switches, as a job sets them (runs built by hand in a test do
    not set them); a module uses it with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    configure_determinism(True, 1, "high")
    yield
    torch.set_num_threads(threads)


# The schedule: pytest-xdist (`--dist loadfile --no-loadscope-reorder`, as `make test` runs it) hands whole files to
# the workers in collection order, so starting the long files first lets the workers end together instead of one of
# them running a long file alone at the end. The order is derived, never kept by hand: each file's time in the last
# run of this checkout (pytest's cache, `DURATIONS`), else in the last whole `make test` whose times were committed
# (`DURATIONS_FILE`, written by that run, as pytest-split's .test_durations: a clean clone, CI's, schedules by it),
# and for a file new to both the number of its tests that start processes (`tests/system/` first). Only the
# schedule depends on it.
DURATIONS = "unlearnbench/file_durations"
DURATIONS_FILE = Path(__file__).with_name("durations.json")


def measured_durations(config: pytest.Config) -> dict[str, float]:
    committed = json.loads(DURATIONS_FILE.read_text()) if DURATIONS_FILE.exists() else {}
    return committed | (config.cache.get(DURATIONS, {}) if getattr(config, "cache", None) else {})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    measured = measured_durations(config)
    starting: dict[str, int] = {}
    for item in items:
        starting[item.path.name] = starting.get(item.path.name, 0) + bool(item.get_closest_marker("processes"))

    def expected(item: pytest.Item) -> tuple:
        return (-measured.get(item.path.name, 0.0), -starting[item.path.name], item.path.parent.name != "system")

    items.sort(key=expected)  # stable: within a file the tests keep their order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each file's time (setup, call and teardown of its tests) on the process that schedules: the controller under
    xdist."""
    spent = _durations.setdefault(Path(report.fspath).name, 0.0)
    _durations[Path(report.fspath).name] = spent + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep the file times of a run of the whole suite (`make test`, `make test-fast`: a file the fast set leaves out
    keeps its time of the last whole run); a run of some files or some tests (`-k`) keeps nothing."""
    config = session.config
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if getattr(config, "cache", None) is None or worker or config.option.keyword or not _durations:
        return
    if [Path(arg).resolve() for arg in config.args] == [Path(config.rootpath, "tests").resolve()]:
        kept = config.cache.get(DURATIONS, {})
        config.cache.set(DURATIONS, kept | {name: round(spent, 1) for name, spent in _durations.items()})
        if not config.option.markexpr and session.testsfailed == 0:  # `make test`, green: the clean clone's order
            whole = {name: round(spent) for name, spent in sorted(_durations.items())}
            DURATIONS_FILE.write_text(json.dumps(whole, indent=0) + "\n")


_durations: dict[str, float] = {}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker more than the cores for `make test`, one per core for `make test-fast`. About a tenth
    of the whole suite's time is spent in processes that only wait (SLURM's state polls, a rank's timeout, a sweep
    between two signals), and a worker per core leaves a core idle then; one more fills it (on 2 cores: 585 s
    against 630 s). The tests that start no process never wait: there a third worker only adds its start-up. Each
    worker runs torch on one thread. PYTEST_XDIST_AUTO_NUM_WORKERS, where set, decides instead (pytest-xdist's)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    import psutil

    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return cores if config.option.markexpr == FAST else cores + 1


FAST = "not processes and not slow"  # `make test-fast`: the tests that start no process and run few jobs


@pytest.fixture(scope="session", autouse=True)
def no_process_in_the_fast_set(request):
    """Under `make test-fast`'s `-m`, a test that starts a process anyway fails and says how to mark it: the fast set
    stays the set of tests that start none."""
    if request.config.option.markexpr != FAST:
        yield
        return

    def refuse(*args, **kwargs):
        raise RuntimeError("this test starts a process: mark it @pytest.mark.processes (`make test` runs it, "
                           "`make test-fast` leaves it out)")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", refuse)
        patch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
        yield
