"""Files written whole or not at all, so that an interrupted job never leaves a half-written file behind, and
folders made or files removed with one line saying why where they cannot be."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path


class WriteError(OSError):
    """A file or folder that could not be written: one line naming it and the reason (`errno` as the cause's), for
    callers to print instead of a traceback. An `OSError`, so that handlers of the cause still catch it."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno  # (without a strerror, str() stays the message alone)


def _cause(error: OSError) -> tuple[int | None, str]:
    """(errno, reason): the system's words for the errno, the same whichever library failed (pyarrow's text reads
    "Error writing bytes to file. Detail: [errno 28] …", sometimes without the errno attribute)."""
    number = error.errno
    if not isinstance(number, int):
        found = re.search(r"\[errno (\d+)\]", str(error), re.IGNORECASE)
        number = int(found.group(1)) if found else None
    return number, os.strerror(number) if number else error.strerror or str(error) or type(error).__name__


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path in `path`'s folder for a writer (a pandas `to_csv`, a `savefig`, …) to fill; on
    success it is synced to disk and renamed over `path` (atomic: readers see the old file or the new one, never
    a part). On any failure the temporary file is removed; an `OSError` (a full disk, a read-only folder) becomes
    one `WriteError` saying which file could not be written and why."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        _sync(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            number, reason = _cause(error)
            raise WriteError(f"cannot write {path}: {reason}", number) from error
        raise


def _sync(path: Path) -> None:
    """Flush the file's data to disk before the rename, so that a crash cannot leave an empty file in its place."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def make_folder(path: Path) -> None:
    """`mkdir -p`, failing with one `WriteError` line (a read-only file system, a file where the folder should be)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        number, reason = _cause(error)
        raise WriteError(f"cannot create folder {path}: {reason}", number) from error


def remove_file(path: Path) -> None:
    """Remove a file, failing with one `WriteError` line (a read-only folder)."""
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as error:
        number, reason = _cause(error)
        raise WriteError(f"cannot remove {path}: {reason}", number) from error


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file in the same folder, fsync it, then rename it over `path` (atomic)."""
    with atomic_path(path) as temporary, open(temporary, "w") as f:
        f.write(text)
