"""The README is a short user's guide whose links all resolve; the docs' links resolve too; the code cites
in-repo documentation, not issue numbers or notes outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_readme_is_at_most_12_kb() -> None:
    assert len((REPO / "README.md").read_bytes()) <= 12 * 1024


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_relative_link_resolves(document: Path) -> None:
    for target in LINK.findall(document.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        assert resolved.exists(), f"{document.name}: {target}"
        if fragment and resolved.suffix == ".md":
            assert fragment in anchors(resolved), f"{document.name}: {target} (no such heading)"


def test_anchor_rule() -> None:
    assert anchor(" The authors' analysis code") == "the-authors-analysis-code"
    assert anchor(" Choosing L by its privacy price") == "choosing-l-by-its-privacy-price"


def test_code_and_docs_cite_in_repo_documentation() -> None:
    tracked = subprocess.run(["git", "ls-files", "src", "workflow", "tests", "benchmarks", "config", "profiles",
                              "docs", "README.md", "Makefile"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    pattern = re.compile(r"\b[Ii]ssue[ -]?\d+|shared/notes|notes/dp-training|reference-method\.md")
    found = [f"{name}:{number}" for name in tracked if not name.endswith("test_docs.py")
             for number, line in enumerate((REPO / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if pattern.search(line)]
    assert found == []
