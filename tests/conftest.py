"""Fixtures shared by the tests (helper functions live in helpers.py and fabricate.py)."""

from __future__ import annotations

import pytest
from helpers import TINY


@pytest.fixture
def tiny() -> list[str]:
    """A digits setting that trains in about a second per model and still learns."""
    return list(TINY)
