"""The names of a job folder's files, which the job writes and the report reads; and the generated blocks of the
README's and the docs' pages. Writing a file whole or not at all is the runtime's (runtime/files.py)."""

from __future__ import annotations

from pathlib import Path

RESULT = "result.json"  # a job's records and outcome (DESIGN.md's results contract)
EXAMPLES = "examples.parquet"  # its per-example outputs, beside RESULT (metrics/examples.py)


def missing_blocks(folder: Path, blocks: dict[str, tuple[str, str]]) -> str | None:
    """Where a page of `folder` (a docs-writing script's `--docs-dir`) lacks its generated block, `blocks` naming
    each page's (begin, end) markers: the one line that says so, else None. A script checks before its sweeps
    (minutes, an hour), not after them."""
    for name, (begin, end) in blocks.items():
        try:
            replace_block((folder / name).read_text(encoding="utf-8"), begin, end, "")
        except (OSError, ValueError) as error:
            return f"the '--docs-dir' folder must hold {name} with one {begin} … {end} block; got {folder} ({error})"
    return None


def replace_block(text: str, begin: str, end: str, new: str) -> str:
    """`text` with the block from the `begin` marker to the `end` marker (both included) replaced by `new`, for the
    README's and the docs' generated tables; a `ValueError` unless each marker occurs exactly once, in that order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"the text must hold exactly one {begin} … {end} block")
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[:start] + new + text[stop:]
