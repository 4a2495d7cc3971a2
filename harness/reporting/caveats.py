"""A report's warnings as a reader meets them, presentation only: each warning has a kind, and the first screen
shows the ones that void a verdict (engine versions or settings that differ, a side that failed) in full and folds
the rest into one line that counts them by kind ("6 warnings: 2 not steady, 2 stretched steps, 1 starved client,
1 socket beyond loopback"). Thirteen bullets, six of them warnings, pushed the decision's chart below a 900-pixel
screen before (the compare examples of 2026-12-01, opened at 1280×900 in Chromium)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

# a kind is named in the singular; these read differently when there are several ("2 not steady" stays)
PLURAL = {"starved client": "starved clients", "saturated client": "saturated clients",
          "stretched step": "stretched steps", "short step": "short steps",
          "socket beyond loopback": "sockets beyond loopback", "level stopped early": "levels stopped early",
          "scrape gap": "scrape gaps", "late schedule": "late schedules", "prefix reused": "prefixes reused"}


@dataclass(frozen=True)
class Caveat:
    """One warning line. kind: what the fold counts it as; voids: it makes a verdict meaningless, so it is never
    folded away."""

    kind: str
    text: str
    voids: bool = False


@dataclass(frozen=True)
class Folded:
    """The warnings folded under one line: summary ("6 warnings: 2 not steady, …") and the lines themselves."""

    summary: str
    items: Sequence[str]


def fold(caveats: Sequence[Caveat]) -> tuple[list[str], Folded | None]:
    """(the voiding warnings, shown in full; the others folded under a count by kind, or None when there are
    none). Kinds are counted in the order they first appear."""
    shown = [c.text for c in caveats if c.voids]
    rest = [c for c in caveats if not c.voids]
    if not rest:
        return shown, None
    counts = Counter(c.kind for c in rest)
    n = len(rest)
    summary = f"{n} warning{'s' if n != 1 else ''}: " + ", ".join(
        f"{k} {PLURAL.get(kind, kind) if k > 1 else kind}" for kind, k in counts.items())
    return shown, Folded(summary, [c.text for c in rest])
