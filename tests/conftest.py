"""Fixtures shared by the tests (helper functions live in helpers.py and fabricate.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import TINY

from unlearnbench.runtime.seeding import configure_determinism


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
