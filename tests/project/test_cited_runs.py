"""Every run a user-facing doc cites is one the user can open: each run id (YYYYMMDD-HHMMSS) in the README,
docs/concepts.md and docs/examples.md names a report committed under reports/. A figure whose run was overwritten,
or never committed, fails here instead of reaching a reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/concepts.md", "docs/examples.md"]
RUN_ID = re.compile(r"\b20\d{6}-\d{6}\b")


def cited(doc: str) -> set[str]:
    return set(RUN_ID.findall((ROOT / doc).read_text()))


def committed() -> set[str]:
    """Run ids anywhere in a path under reports/ (a run's folder, or a file named after it)."""
    return {m for p in (ROOT / "reports").rglob("*") for m in RUN_ID.findall(str(p.relative_to(ROOT)))}


@pytest.mark.parametrize("doc", DOCS)
def test_each_cited_run_is_committed_under_reports(doc):
    missing = sorted(cited(doc) - committed())
    assert not missing, f"{doc} cites runs with no committed report under reports/: {missing}"


def test_the_check_sees_the_citations():
    """The pattern finds what the docs cite, so an empty set cannot pass the check above vacuously."""
    assert cited("docs/examples.md"), "docs/examples.md cites no run id: the pattern no longer matches"
