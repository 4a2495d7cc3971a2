"""The compare report's figure for a replayed trace: requests arriving per second (both sides send the same
schedule) and requests in flight, scheduled send to last token, on each side over the replay. A layer that queues
under a burst shows as a taller, longer in-flight hump than its baseline's at the same arrivals."""

from __future__ import annotations

import numpy as np

from harness.reporting.plots_dist import COLOR, Canvas

STEP_S = 0.05  # in flight is counted every 50 ms


def arrivals(cv: Canvas, lines: dict[str, list[tuple[int, int]]], names: tuple[str, str]) -> None:
    """lines: per side, every measured request's (scheduled send, end) in ns (harness.analysis.samples)."""
    if not lines:
        return
    with cv.figure("arrivals.png", height=4.2, nrows=2, sharex=True) as (_, ax):
        first = next(iter(lines.values()))
        t0 = min(d for d, _ in first)
        due = np.array([(d - t0) / 1e9 for d, _ in first])
        edges = np.arange(0, max(due.max(), 1) + 1, 1.0)
        ax[0, 0].hist(due, bins=edges, color="0.5")
        ax[0, 0].set_ylabel("arrivals a second")
        ax[0, 0].set_title("The replay's arrivals (both sides) and requests in flight on each")
        for side, name in zip(("baseline", "stack"), names, strict=True):
            if side not in lines:
                continue
            start = min(d for d, _ in lines[side])
            spans = np.array([((d - start) / 1e9, (e - start) / 1e9) for d, e in lines[side]])
            grid = np.arange(0, spans[:, 1].max() + STEP_S, STEP_S)
            held = ((spans[:, :1] <= grid) & (grid < spans[:, 1:])).sum(axis=0)
            ax[1, 0].plot(grid, held, color=COLOR[side], lw=1, label=name)
        ax[1, 0].set_ylabel("in flight")
        ax[1, 0].set_xlabel("seconds from the replay's first scheduled send")
        ax[1, 0].legend(loc="upper right")
