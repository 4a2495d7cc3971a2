"""The README is short enough to read and every link in it and in docs/ resolves: a relative file exists, and a
#fragment names a heading of the document it points into (as GitHub makes the anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for h in re.findall(r"^#{1,6} (.*)$", doc.read_text(), re.M):
        out.add(re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-"))
    return out


def test_the_readme_is_at_most_200_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_resolves(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, fragment = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_every_doc_is_reached_from_the_readme_or_another_doc():
    linked = {(d.parent / t.partition("#")[0]).resolve() for d in DOCS for t in LINK.findall(d.read_text())
              if not re.match(r"[a-z]+:", t) and t.partition("#")[0]}
    assert not [d.name for d in DOCS[1:] if d.resolve() not in linked]
