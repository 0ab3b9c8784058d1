"""The names of a job folder's files, which the job writes and the report reads; and the generated blocks of the
README's and the docs' pages. Writing a file whole or not at all is the runtime's (runtime/files.py)."""

from __future__ import annotations

from pathlib import Path

from unlearnbench.runtime.errors import UserError, invalid

RESULT = "result.json"  # a job's records and outcome (DESIGN.md's results contract)
EXAMPLES = "examples.parquet"  # its per-example outputs, beside RESULT (metrics/examples.py)
# The folders an experiment tracker keeps below a sweep (track/): MLflow's local artifact store and W&B's offline
# runs. They hold copies of jobs' RESULT files, which are not jobs of the sweep: the report's reader skips them.
TRACKER_STORES = frozenset({"mlartifacts", "wandb"})


class SchemaError(UserError, ValueError):
    """A file of a contract (result.json, its catalogue, examples.parquet) that parses but does not hold what the
    contract says: the message names the field and what is wrong with it; the reader's caller names the file. Its
    own kind of UserError because the report tells such a file ("invalid") from one it cannot read ("unreadable");
    a ValueError as well, as JSON's and Parquet's own errors for a file cut short are, so that a reader's callers
    catch a damaged file in one clause."""


def missing_blocks(folder: Path, blocks: dict[str, tuple[str, str]], script: str) -> UserError | None:
    """Where a page of `folder` (the `--docs-dir` of the docs-writing `script`) lacks its generated block, `blocks`
    naming each page's (begin, end) markers: the refusal that says so, else None. A script checks before its sweeps
    (minutes, an hour), not after them."""
    for name, (begin, end) in blocks.items():
        try:
            replace_block((folder / name).read_text(encoding="utf-8"), begin, end, "")
        except (OSError, UserError) as error:
            return invalid("--docs-dir", script, f"a folder holding {name} with one {begin} … {end} block",
                           f"{folder} ({error})")
    return None


def replace_block(text: str, begin: str, end: str, new: str) -> str:
    """`text` with the block from the `begin` marker to the `end` marker (both included) replaced by `new`, for the
    README's and the docs' generated tables; a UserError unless each marker occurs exactly once, in that order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise UserError(f"the text must hold exactly one {begin} … {end} block")
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[:start] + new + text[stop:]
