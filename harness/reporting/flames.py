"""Sampled stacks as pictures: an SVG flame graph per side and level, each process a tower of its own, outermost
frame at the bottom, width its share of the samples (the speedscope JSON beside the collapsed stacks in the results
is harness.analysis.profiles.speedscope's)."""

from __future__ import annotations

import html
import zlib
from collections import Counter
from pathlib import Path

from harness.analysis.profiles import parse_collapsed
from harness.schemas import level_text
from harness.schemas.profiles import ProfiledLevel

WIDTH, ROW = 1200, 16
MIN_LABEL_PX = 40


def side_stacks(level: ProfiledLevel, run_dir: Path) -> dict[str, Counter[tuple[str, ...]]]:
    """Each profiled process's stacks (its label and pid as the name), from its collapsed file in the run."""
    out = {}
    for p in level.processes:
        if p.collapsed and (run_dir / p.collapsed).exists():
            out[f"{p.label} ({p.pid})"] = parse_collapsed((run_dir / p.collapsed).read_text(errors="replace"))
    return out


def flame_svg(processes: dict[str, Counter[tuple[str, ...]]], title: str) -> str:
    """Every process's stacks under one root per process, widths in samples across the whole side."""
    merged: Counter[tuple[str, ...]] = Counter()
    for proc, stacks in processes.items():
        for stack, n in stacks.items():
            merged[(proc, *stack)] += n
    total = sum(merged.values())
    rects: list[str] = []
    depth = [0]

    def draw(prefix: tuple[str, ...], stacks: list[tuple[tuple[str, ...], int]], x: float) -> None:
        children: dict[str, list[tuple[tuple[str, ...], int]]] = {}
        for stack, n in stacks:
            if len(stack) > len(prefix):
                children.setdefault(stack[len(prefix)], []).append((stack, n))
        for frame in sorted(children):
            group = children[frame]
            n = sum(c for _, c in group)
            w = WIDTH * n / total
            level = len(prefix)
            depth[0] = max(depth[0], level + 1)
            rects.append(_rect(x, level, w, frame, n, total))
            draw((*prefix, frame), group, x)
            x += w

    if total:
        draw((), list(merged.items()), 0.0)
    height = (depth[0] + 2) * ROW
    body = "\n".join(rects)
    # rows count up from the root; the flip puts the root at the bottom
    head = f'<text x="4" y="12">{html.escape(title)} ({total} samples)</text>'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'font-family="monospace" font-size="11">\n{head}\n'
            f'<g transform="translate(0,{height}) scale(1,-1)">\n{body}\n</g>\n</svg>\n')


def _rect(x: float, level: int, w: float, frame: str, n: int, total: int) -> str:
    y = (level + 1) * ROW
    hue = 20 + zlib.crc32(frame.encode()) % 40  # the same colour for a function in every render
    label = html.escape(frame if len(frame) * 7 < w else frame[: max(0, int(w / 7) - 2)] + "…") \
        if w >= MIN_LABEL_PX else ""
    text = (f'<text x="{x + 2:.1f}" y="{-(y + 4)}" transform="scale(1,-1)">{label}</text>' if label else "")
    return (f'<g><title>{html.escape(frame)}: {n} samples, {100 * n / total:.1f}%</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" height="{ROW - 1}" '
            f'fill="hsl({hue},80%,60%)"/>{text}</g>')


def write_flames(runs: dict, run_dir: Path, out_dir: Path, open_loop: bool) -> list[list[str]]:
    """An SVG per side and profiled level into the report's folder; a row per file (side, level, file, samples)."""
    rows = []
    for label, run in runs.items():
        for level in run.profiled:
            stacks = side_stacks(level, run_dir)
            if not stacks:
                continue
            where = level_text(level.level, open_loop)
            name = f"flame-{label}-{where.replace('=', '').replace(' ', '').replace('/', '')}.svg"
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / name).write_text(flame_svg(stacks, f"{label} at {where}"))
            rows.append([label, where, name, str(sum(sum(s.values()) for s in stacks.values()))])
    return rows
