"""Writes a small trace in Mooncake's format (one JSON object a line: `timestamp` in ms, `input_length`,
`output_length`, `hash_ids` of the prompt's 512-token blocks), made up from a seed, for tests and examples: nothing
in it comes from a published trace.

Its shape, so a layer is judged under what real traffic does to it:
- arrivals: a Poisson stream at --rate, with --bursts bursts of --burst-s seconds at --burst-x times the rate;
- prefixes: each request's first block is one of --groups shared blocks (a few system prompts, picked with Zipf-like
  weights, the first most often), the blocks after it its own;
- lengths: the blocks' tokens, the last block partial (at least an eighth of one), at most --max-input; answers
  uniform in --output.

The same arguments write the same bytes: `python scripts/make_trace.py --out traces/burst-prefix.jsonl` rewrites the
committed trace (tests/load/test_traces.py checks it)."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

BLOCK = 512  # Mooncake's hash_ids are of 512-token blocks


def make(a: argparse.Namespace) -> list[dict]:
    rng = random.Random(a.seed)
    starts = sorted(rng.uniform(0, a.duration_s - a.burst_s) for _ in range(a.bursts))

    def rate_at(t: float) -> float:
        return a.rate * (a.burst_x if any(s <= t < s + a.burst_s for s in starts) else 1.0)

    # thinning (Lewis and Shedler): a Poisson stream at the peak rate, each arrival kept with rate_at(t) / peak
    peak, t, times = a.rate * a.burst_x, 0.0, []
    while True:
        t += rng.expovariate(peak)
        if t >= a.duration_s:
            break
        if rng.random() < rate_at(t) / peak:
            times.append(t)
    weights = [1 / (g + 1) for g in range(a.groups)]
    most = -(-a.max_input // BLOCK)  # blocks in the longest prompt
    next_id, rows = a.groups, []
    for t in times:
        k = rng.randint(1, most)
        n = min(a.max_input, (k - 1) * BLOCK + rng.randint(BLOCK // 8, BLOCK))
        blocks = [rng.choices(range(a.groups), weights)[0], *range(next_id, next_id + k - 1)]
        next_id += k - 1
        rows.append({"timestamp": round(t * 1000), "input_length": n, "output_length": rng.randint(*a.output),
                     "hash_ids": blocks})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the file to write (JSONL, Mooncake's fields)")
    p.add_argument("--seed", type=int, default=37)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=1.5, help="requests per second between bursts")
    p.add_argument("--bursts", type=int, default=3)
    p.add_argument("--burst-s", type=float, default=4.0)
    p.add_argument("--burst-x", type=float, default=5.0, help="a burst's rate, as a multiple of --rate")
    p.add_argument("--groups", type=int, default=6, help="shared first blocks (system prompts)")
    p.add_argument("--max-input", type=int, default=900, help="the longest prompt, in tokens")
    p.add_argument("--output", type=int, nargs=2, default=(16, 96), metavar=("LO", "HI"))
    a = p.parse_args(argv)
    if a.duration_s <= a.burst_s or a.rate <= 0 or a.burst_x < 1 or a.groups < 1 or a.max_input < BLOCK // 8 \
            or not 1 <= a.output[0] <= a.output[1]:
        print("make_trace: --duration-s must exceed --burst-s; --rate > 0, --burst-x >= 1, --groups >= 1, "
              f"--max-input >= {BLOCK // 8}, 1 <= LO <= HI", file=sys.stderr)
        return 2
    rows = make(a)
    Path(a.out).write_text("".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in rows))
    print(f"make_trace: {len(rows)} requests over {a.duration_s:g} s to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
