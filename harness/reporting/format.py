"""Formatting helpers every report and table shares: numbers and shares as text, Markdown tables, which processes a
CPU table names, the scrape policy in words."""

from __future__ import annotations

from collections.abc import Iterable

MINOR_CORES = 0.05  # a process under this many cores at every level is summed as 'other' (CPU table and plot)


def major_processes(per_level: Iterable[dict[str, float]]) -> set[str]:
    """The processes that used MINOR_CORES or more at some level (the others are summed as 'other')."""
    return {k for cores in per_level for k, v in cores.items() if (v or 0.0) >= MINOR_CORES}


def share_pct(v: float | None) -> str:
    """A share (0..1, e.g. goodput) as a whole percentage."""
    return "—" if v is None else f"{100 * v:.0f}%"


def fmt(v: float | None, pattern: str = "{:.1f}") -> str:
    return "—" if v is None else pattern.format(v)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def scrape_policy_text(policy: str) -> str:
    return {"boundary": "policy boundary: read before and after each measured window, never during it",
            "interval": "policy interval: also polled during the measured windows, whose figures include the "
                        "scrapes' cost",
            "none": "policy none: not scraped"}.get(policy, policy)
