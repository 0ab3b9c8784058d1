"""What the compute layer says to a reader, as data: a `Note` is a code and its numbers (and names), never a
sentence. The render layer words each code in one place (`render/words.py`), so a sentence exists once and the
statistics can be tested on their codes and numbers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Note:
    """A warning, caveat or reason that a statistic comes with: its `code` and the `values` its words need. A table
    cell or field that may hold several holds a tuple of notes (empty: nothing to say)."""

    code: str
    values: dict = field(default_factory=dict)
