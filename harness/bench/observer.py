"""Observer effect: does reading an engine's metrics move what layerbench measures?

Real vLLM (the engine environment, the quick profile's engine settings: eager float32) is deployed once,
and the conditions take turns in place, ROUNDS times, at c=1, 4 and 16 (the quick profile's levels):
- none: no scraping at all (the reference);
- boundary: the default policy, /metrics read just before and just after each window;
- interval: the same plus a 2 s poll during the window (seed 000's method, the old default);
- boundary at client nice 0: the default without the client's raised priority (what the priority buys).
An effect is *within noise* when the condition's mean differs from the no-scrape mean by no more than the
no-scrape rounds' own spread (max - min). Its `policies` sentences (in harness-bench.json) are quoted by
compare reports for the policy they used."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import Progress

from harness.analysis.stats import level_stats
from harness.bench.figures import Verdict
from harness.bench.section import Context, SectionResult
from harness.host import placement
from harness.load import eventloop
from harness.load.client import RequestRecord, StreamClient
from harness.load.prompts import PromptGenerator
from harness.load.runner import Hooks, LevelPlan, Sender, run_level
from harness.load.scraper import Scraper
from harness.profile.loading import load_profile
from harness.profile.schema import LoadProfile
from harness.reporting.format import markdown_table
from harness.results import new_run_id
from stacks.base import DeploySettings, Stack

LEVELS = (1, 4, 16)
ROUNDS = 3
CONDITIONS = ("none", "boundary", "interval", "boundary, client nice 0")
INTERVAL_S = 2.0
# Longer windows than the quick profile's 30 requests: with 30, TTFT p95 is the second-slowest request and,
# with slow streaks of ~10 at c=1, a coin toss.
WINDOW_REQUESTS, WINDOW_PER_SLOT, WINDOW_MIN_S = 60, 15, 6.0
METRICS = (("ttft_p50", "TTFT p50 ms"), ("ttft_p95", "TTFT p95 ms"), ("tok_s", "tok/s"), ("lag_p95", "loop lag p95 ms"))


@dataclass(frozen=True)
class Setup:
    """What every window shares: the deployed engine, the quick profile, the client and its prompts, a scratch
    folder for the scrapes, and the client's usual nice value."""

    stack: Stack
    profile: LoadProfile
    client: StreamClient
    gen: PromptGenerator
    tmp: Path
    client_nice: int


def _window(setup: Setup, cond: str, c: int, rnd: int) -> dict:
    stack, profile, client, gen, client_nice = setup.stack, setup.profile, setup.client, setup.gen, setup.client_nice
    policy = "none" if cond == "none" else "interval" if cond == "interval" else "boundary"
    nice = 0 if "nice 0" in cond else client_nice
    placement.set_client_nice(nice)  # the scraper spawned below inherits it
    scraper = Scraper(stack.metric_endpoints(), INTERVAL_S, setup.tmp / "scrapes.jsonl", policy=policy)
    try:
        with scraper:
            scraper.level = c
            plan = LevelPlan(c, max(WINDOW_REQUESTS, WINDOW_PER_SLOT * c), repeat=rnd,
                             warmup_waves=profile.warmup_waves, min_duration_s=WINDOW_MIN_S)
            run = eventloop.run(run_level(Sender(client, gen), plan,
                                          Hooks(on_measure_start=lambda: scraper.mark(c, "start"))))
            scraper.mark(c, "end")
            scrapes = scraper.new_scrapes()
    finally:
        placement.set_client_nice(client_nice)
    stats = level_stats([RequestRecord.from_json(r) for r in run.records], c, profile.slo)
    return {"condition": cond, "concurrency": c, "round": rnd, "ttft_p50": stats.ttft_ms.p50,
            "ttft_p95": stats.ttft_ms.p95, "tok_s": stats.throughput_tok_s, "lag_p95": run.client.loop_lag_ms.p95,
            "scrapes_in_window": sum(s["phase"] is None for s in scrapes),
            "scrape_ms": [s["dur_ms"] for s in scrapes if s.get("dur_ms") is not None],
            "client_cpu_pct": run.client.cpu_pct, "failed": stats.failed}


def measure(progress: Progress) -> list[dict]:
    from stacks.vllm import VllmStack

    profile = load_profile("quick")
    client_nice = os.getpriority(os.PRIO_PROCESS, 0)
    if client_nice > -5:
        try:
            client_nice = placement.set_client_nice(-5)
        except PermissionError:
            pass  # then "nice 0" below is the same as the default, and the table says so
    task = progress.add_task("observer effect: deploying vLLM", total=len(LEVELS) * ROUNDS * len(CONDITIONS))
    out = []
    with tempfile.TemporaryDirectory() as tmp, VllmStack(DeploySettings(engine=profile.engine,
                                                                        log_dir=Path(tmp))) as stack:
        stack.deploy()
        stack.wait_ready(600)
        ep = stack.endpoint()
        client = StreamClient(ep.base_url, ep.model, max_tokens=profile.output_tokens, timeout_s=120)
        gen = PromptGenerator(new_run_id("observer"), "observer", profile.input_tokens,
                              stack.settings.model_path / "tokenizer.json")
        setup = Setup(stack, profile, client, gen, Path(tmp), client_nice)
        for c in LEVELS:
            for rnd in range(ROUNDS):
                # rotate the order each round so drift within a round hits every condition alike
                order = CONDITIONS[rnd % len(CONDITIONS):] + CONDITIONS[:rnd % len(CONDITIONS)]
                for cond in order:
                    progress.update(task, description=f"observer effect c={c} round {rnd + 1} {cond}")
                    out.append(_window(setup, cond, c, rnd))
                    progress.advance(task)
    return out


def _agg(rows: list[dict], cond: str, c: int, key: str) -> list[float]:
    return [r[key] for r in rows if r["condition"] == cond and r["concurrency"] == c and r[key] is not None]


def effects(rows: list[dict]) -> list[dict]:
    """Per level and condition: mean, min, max of each metric, and the effect against no scraping."""
    out = []
    for c in LEVELS:
        ref = {k: _agg(rows, "none", c, k) for k, _ in METRICS}
        for cond in CONDITIONS:
            e = {"concurrency": c, "condition": cond}
            for key, _ in METRICS:
                v = _agg(rows, cond, c, key)
                e[key] = (float(np.mean(v)), float(min(v)), float(max(v))) if v else None
                if cond != "none" and v and ref[key]:
                    spread = max(ref[key]) - min(ref[key])
                    eff = float(np.mean(v) - np.mean(ref[key]))
                    e[f"{key}_effect"] = (eff, spread, abs(eff) <= spread)
            out.append(e)
    return out


def verdicts(eff: list[dict]) -> list[Verdict]:
    """The default policy's effect at c=1 and c=4 must stay within the no-scrape rounds' own spread."""
    out = []
    for c in (1, 4):
        e = next(x for x in eff if x["concurrency"] == c and x["condition"] == "boundary")
        for key, name in (("ttft_p50", "p50"), ("ttft_p95", "p95")):
            v = e.get(f"{key}_effect")
            out.append(Verdict(f"default scrape policy moves TTFT {name} at c={c} by no more than the no-scrape "
                               "rounds' spread", None if v is None else v[2],
                               "no data" if v is None else f"effect {v[0]:+.1f} ms, spread {v[1]:.1f} ms"))
    return out


def section(ctx: Context) -> SectionResult:
    t0 = time.monotonic()
    rows = measure(ctx.progress)
    md, data = render(rows, time.monotonic() - t0)
    return SectionResult("observer_effect", md, data, verdicts(data["effects"]))


def render(rows: list[dict], wall_s: float) -> tuple[list[str], dict]:
    eff = effects(rows)

    def cell(e: dict, key: str) -> str:
        v = e.get(key)
        return "—" if v is None else f"{v[0]:.1f} ({v[1]:.1f}…{v[2]:.1f})"

    def effect(e: dict, key: str) -> str:
        v = e.get(f"{key}_effect")
        return "—" if v is None else f"{v[0]:+.1f} ({'within' if v[2] else 'OUTSIDE'} ±{v[1]:.1f})"

    table = [[str(e["concurrency"]), e["condition"], *[cell(e, k) for k, _ in METRICS],
              effect(e, "ttft_p50"), effect(e, "ttft_p95"), effect(e, "tok_s")] for e in eff]
    scrape_ms = [x for r in rows for x in r["scrape_ms"]]
    policies = {}
    for cond, policy in (("boundary", "boundary"), ("interval", "interval")):
        parts = []
        for c in LEVELS:
            e = next(x for x in eff if x["concurrency"] == c and x["condition"] == cond)
            if e.get("ttft_p50_effect"):
                p50, p95 = e["ttft_p50_effect"], e["ttft_p95_effect"]
                parts.append(f"c={c} TTFT p50 {p50[0]:+.1f} ms / p95 {p95[0]:+.1f} ms vs no scraping "
                             f"(no-scrape spread {p50[1]:.1f} / {p95[1]:.1f} ms)")
        policies[policy] = (f"measured by `make bench-harness` on {time.strftime('%Y-%m-%d')} with real vLLM: "
                            + "; ".join(parts))
    md = [
        "## Observer effect: does scraping vLLM's /metrics move the figures?",
        "",
        f"Real vLLM (quick profile's engine and tokens: eager float32, 32 output tokens; windows of "
        f"max({WINDOW_REQUESTS}, {WINDOW_PER_SLOT}·c) requests and ≥ {WINDOW_MIN_S:.0f} s), one deployment; the "
        "conditions take turns "
        f"in place, {ROUNDS} rounds per level, order rotated each round. Cells: mean (min…max) over rounds. "
        "*Effect* = condition mean − no-scrape mean, judged against the no-scrape rounds' own spread "
        f"(max − min). `interval` polls every {INTERVAL_S:.0f} s during the window; `boundary` (the default) "
        "reads before and after it only. The last condition drops the client's raised priority (nice −5).",
        "",
        markdown_table(["c", "condition", *[h for _, h in METRICS], "TTFT p50 effect ms", "TTFT p95 effect ms",
                        "tok/s effect"], table),
        "",
        f"- A `/metrics` response took {np.percentile(scrape_ms, 50):.1f} ms p50, {max(scrape_ms):.0f} ms at worst "
        f"({len(scrape_ms)} scrapes)." if scrape_ms else "- no scrapes were made",
        f"- Section wall time {wall_s:.0f} s.",
    ]
    return md, {"rows": rows, "effects": eff, "policies": policies}
