"""`make bench-harness`: layerbench's own error, measured and published (reports/harness/).

Three clients take turns against the same reference engine in the same run: layerbench's client, a minimal
raw-socket floor (harness/bench/floor.py) and `vllm bench serve` from the engine environment. This module only
runs the sections in order and writes what they return; each section module owns its measurement and its
Markdown (see harness/bench/section.py). Adding a section is one entry in SECTIONS."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from harness.bench import accuracy, capacity, cpu_per_event, gpulike, observer, resolution, scale, verdicts
from harness.bench.render import page
from harness.bench.section import Context, Section
from harness.errors import LayerbenchError

OUT_DIR = Path("reports/harness")
SECTIONS: tuple[Section, ...] = (accuracy.section, resolution.section, capacity.section, cpu_per_event.section,
                                 scale.section, observer.section, gpulike.section, verdicts.section)


def section_named(name: str) -> Section:
    """A section by its module's name (`--only gpulike`)."""
    by_name = {s.__module__.rsplit(".", 1)[-1]: s for s in SECTIONS}
    if name not in by_name:
        raise LayerbenchError(f"unknown bench-harness section {name!r}: sections are {', '.join(by_name)}")
    return by_name[name]
INTRO = [
    "Three clients take turns against the same reference engine (`stacks/refengine/`, of exactly known timing): "
    "layerbench's own streaming client, a minimal raw-socket *floor* client written for this benchmark, and "
    "`vllm bench serve` from the engine environment. In the accuracy section layerbench's Triton client "
    "(`layerbench triton`, Triton's `generate_stream`, which the reference engine also speaks) takes its turn too, "
    "judged against the same floor.",
]


def main(out_dir: Path = OUT_DIR, console: Console | None = None,
         sections: Sequence[Section] = SECTIONS) -> Path:
    console = console or Console()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        ctx = Context(Path(tmp), progress)
        results = [section(ctx) for section in sections]
    md = page(results, time.monotonic() - t0, INTRO)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "harness-bench.md"
    path.write_text(md)
    (out_dir / "harness-bench.json").write_text(json.dumps({
        "targets": [v.to_json() for r in results for v in r.verdicts],
        **{r.key: r.data for r in results},
    }, indent=2))
    console.print(md)
    return path
