"""Files written whole or not at all, so that an interrupted job never leaves a half-written file behind."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file in the same folder, fsync it, then rename it over `path` (atomic)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
