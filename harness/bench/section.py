"""What a section of the harness benchmark is: a callable that measures one thing and returns its Markdown,
its JSON-able data and the targets it judged. `harness.bench.run` runs a list of them; adding a section is one
entry there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import Progress

from harness.bench.figures import Verdict


@dataclass(frozen=True)
class Context:
    """What every section gets: a scratch directory (deployment logs) and the shared progress display."""

    tmp: Path
    progress: Progress


@dataclass
class SectionResult:
    key: str  # the section's key in harness-bench.json
    markdown: list[str]  # the section's lines, starting with its "## " heading
    data: dict  # JSON-able
    verdicts: list[Verdict] = field(default_factory=list)  # also listed together at the top of the report


Section = Callable[[Context], SectionResult]
