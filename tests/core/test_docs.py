"""The documentation: the README stays short and its links resolve, every example file is included into a page,
and `make docs`'s strict build fails on what it promises to catch (a broken link or anchor, a missing included file,
a page left out of the navigation)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def nav_pages() -> list[str]:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return [page for entry in config["nav"] for page in entry.values()]


def test_the_readme_is_short_and_its_links_resolve():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = [m.group(1) for m in LINK.finditer(readme) if "://" not in m.group(1)]
    assert targets and all((REPO / t).exists() for t in targets), [t for t in targets if not (REPO / t).exists()]
    linked_pages = {t.removeprefix("docs/") for t in targets if t.startswith("docs/") and t.endswith(".md")}
    assert linked_pages == set(nav_pages()) - {"index.md"}  # the README's table names every page of the site


def test_every_example_file_is_included_into_a_page():
    """So the pages cannot drift from the files the tests run."""
    pages = "\n".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    included = set(re.findall(r'--8<-- "([^"]+)"', pages))
    examples = {str(p.relative_to(REPO)) for p in (REPO / "docs" / "examples").rglob("*")
                if p.is_file() and p.stat().st_size and "__pycache__" not in p.parts}  # (an empty __init__.py)
    assert examples and examples <= included, sorted(examples - included)


@pytest.fixture
def site(tmp_path):
    """A copy of the site's sources: mkdocs.yml, docs/ and README.md (which a page includes)."""
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def build(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(folder / "site")], cwd=folder,
                          capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
                          timeout=300)


@pytest.mark.processes
def test_the_strict_build_passes_and_fails_on_each_kind_of_defect(site):
    built = build(site)
    assert built.returncode == 0, built.stderr
    page = (site / "site" / "extending" / "index.html").read_text()
    assert "NoisyFineTune" in page and "cross_entropy_epochs" in page  # the example's code is on the page
    assert "--8&lt;--" not in page and "--8<--" not in page  # every include was replaced by the file
    running = site / "docs" / "running.md"
    original = running.read_text()
    defects = {
        "a link to a missing page": (running, original + "\n[gone](no-such-page.md)\n", "no-such-page.md"),
        "a missing anchor": (running, original + "\n[gone](metrics.md#no-such-section)\n", "no-such-section"),
        "a missing included file": (running, original + '\n--8<-- "docs/examples/none.py"\n', "none.py"),
        "a page outside the navigation": (site / "docs" / "orphan.md", "# Orphan\n", "orphan.md"),
    }
    for what, (path, text, named) in defects.items():
        before = path.read_text() if path.exists() else None
        path.write_text(text)
        broken = build(site)
        assert broken.returncode != 0 and named in broken.stderr + broken.stdout, what
        if before is None:
            path.unlink()
        else:
            path.write_text(before)
    assert build(site).returncode == 0
