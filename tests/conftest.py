"""Fixtures shared by the tests (helper functions live in helpers.py and fabricate.py), the schedule of the files,
and `make test-fast`'s guard."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess

import pytest
import torch
from helpers import TINY

from unlearnbench.runtime.seeding import configure_determinism

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One worker per core (`make test`): a second thread, here or in a job that leaves runtime.threads unset (the
    # demo), would oversubscribe the cores, and OpenMP threads that wait for a busy core run several times slower.
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def tiny() -> list[str]:
    """A digits setting that trains in about a second per model and still learns."""
    return list(TINY)


@pytest.fixture(scope="module")
def one_thread():
    """Float32 on one CPU thread with the deterministic switches, as a job sets them (runs built by hand in a test do
    not set them); a module uses it with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    configure_determinism(True, 1, "high")
    yield
    torch.set_num_threads(threads)


# The files that take longest, longest first: pytest-xdist (`--dist loadfile --no-loadscope-reorder`, as `make test`
# runs it) hands whole files to the workers in collection order, so starting the long ones first lets the workers
# end together instead of one of them running a long file alone at the end. Only the schedule depends on it.
LONGEST_FIRST = ("test_slurm.py", "test_launcher.py", "test_cli.py", "test_ranks.py", "test_api.py",
                 "test_interrupts.py", "test_job_faults.py", "test_outcomes.py", "test_seed_study.py",
                 "test_report_sweep.py", "test_docs_examples.py", "test_examples.py", "test_methods_ddp.py",
                 "test_methods_all.py", "test_job.py", "test_numerics.py", "test_ltr.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


FAST = "not processes"  # `make test-fast`: the tests that start no process


@pytest.fixture(scope="session", autouse=True)
def no_process_in_the_fast_set(request):
    """Under `-m "not processes"`, a test that starts a process anyway fails and says how to mark it: the fast set
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
