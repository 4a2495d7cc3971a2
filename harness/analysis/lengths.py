"""The request lengths a run sent beside those its engine confirmed: what the profile drew for each request
(its prompt length and max_tokens, kept on the record) against the engine's own `usage` (prompt_tokens,
completion_tokens), per side, over its measured requests. A distribution the engine did not confirm (a chat
template adding tokens, a layer truncating answers) is a different workload from the one asked for."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.samples import measured, ttft_of
from harness.schemas import Dist

FIELDS = (("prompt tokens", "input_asked", "prompt_tokens"), ("output tokens", "output_asked", "output_tokens"))


def sent_and_confirmed(run_dir: Path, keep: set[tuple[str, float, int]] | None = None
                       ) -> dict[str, dict[str, tuple[Dist, Dist]]]:
    """label -> "prompt tokens" / "output tokens" -> (sent, confirmed by usage), over the label's measured
    requests. Records written before the asked-for lengths were kept on them have no "sent" figures."""
    values: dict[str, dict[str, tuple[list[int], list[int]]]] = {}
    for (label, _, _), recs in measured(run_dir, keep).items():
        side = values.setdefault(label, {name: ([], []) for name, _, _ in FIELDS})
        for r in recs:
            for name, asked, got in FIELDS:
                if getattr(r, asked):
                    side[name][0].append(getattr(r, asked))
                if getattr(r, got) is not None:
                    side[name][1].append(getattr(r, got))
    return {label: {name: (Dist.of(a), Dist.of(b)) for name, (a, b) in side.items()} for label, side in values.items()}


def contexts(run_dir: Path, keep: set[tuple[str, float, int]] | None = None) -> list[tuple[str, int]]:
    """The p50 and p99 of prompt + output tokens the run sent (both sides send the same requests): the contexts the
    KV cache has to hold for this workload. [] for a run whose records do not keep what was asked."""
    import numpy as np

    sums = [r.input_asked + r.output_asked for recs in measured(run_dir, keep).values() for r in recs
            if r.input_asked and r.output_asked]
    if not sums:
        return []
    p50, p99 = np.percentile(sums, [50, 99])
    return [("p50", int(round(p50))), ("p99", int(round(p99)))]


def by_turn(run_dir: Path, keep: set[tuple[str, float, int]] | None = None) -> dict[str, dict[int, tuple[Dist, Dist]]]:
    """label -> a chat's turn -> (TTFT ms, the engine's prompt_tokens) over its measured requests."""
    ttft: dict[str, dict[int, tuple[list[float], list[int]]]] = {}
    for (label, _, _), recs in measured(run_dir, keep).items():
        for r in recs:
            t = ttft.setdefault(label, {}).setdefault(r.turn, ([], []))
            if (ms := ttft_of(r)) is not None:
                t[0].append(ms)
            if r.prompt_tokens is not None:
                t[1].append(r.prompt_tokens)
    return {label: {k: (Dist.of(a), Dist.of(b)) for k, (a, b) in turns.items()} for label, turns in ttft.items()}
