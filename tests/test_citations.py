"""What users see cites upstream sources (a project, version and file, or a URL), never a file
they do not have: the team's research notes, its design page, or a path of the machine doctor was
written on. Every text doctor prints comes from its packages' code and data, so those are read."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("doctor", "checks", "launch", "probes", "matching", "knowledge", "trainer", "supervisor")
NOT_OURS = re.compile(r"(?<![\w.])(?:research/|research\.md|DESIGN\.md|\.\./shared|/work/)")
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*")
               if p.suffix in (".py", ".toml", ".json", ".yaml") and "__pycache__" not in p.parts)


def test_the_packages_are_read():
    assert len(FILES) > 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_a_file_users_do_not_have(path):
    hits = [f"{i}: {ln.strip()[:100]}" for i, ln in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if NOT_OURS.search(ln)]
    assert not hits, hits
