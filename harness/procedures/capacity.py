"""Capacity at an SLA: the highest load level at which TTFT p95 and ITL p95 both stay within their bounds
(a single-GPU capacity study's "what one GPU holds"), found on one ready deployment by a coarse sweep (the
profile's levels, then doubling) and a bisection between the last level that met the SLA and the first that
broke it. Also how it broke, told apart as that study did: queueing (TTFT rises while requests wait) or
prefill interference (ITL spikes: new requests' prefill pushes back the running decodes); and the engine's
waiting requests and KV-cache usage at the last level that held, the candidates for a gateway's 429 threshold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from harness.analysis.capacity import judge, probe_of
from harness.measure.run import Run, Windows
from harness.measure.sweep import measure
from harness.profile.schema import LoadProfile, min_requests
from harness.schemas import SLA, CapacityResult, Probe, RunSummary
from stacks.base import Stack

RATE_STEP = 1.1  # open loop: bisection stops when the bracket is this narrow (hi / lo)
GAUGE_POLL_S, GAUGE_SAMPLES = 0.25, 12  # the unmeasured pass that reads the engine's gauges under load


def gauge_profile(profile: LoadProfile) -> LoadProfile | None:
    """The engine's waiting requests and KV usage are gauges, seen only by scrapes under load; but on a small
    host polling vLLM's /metrics during a window moves its TTFT several-fold (the API server renders metrics in
    the process that streams tokens). So with the default `scrape: boundary` each probe's latencies are measured
    unpolled, and the gauges are read in a second, unmeasured pass at the same level right after it, polled
    every GAUGE_POLL_S (or the profile's faster interval) for GAUGE_SAMPLES polls: a loaded vLLM API server
    answers /metrics mostly in the moments its engine is idle, so a couple of samples can all miss the load.
    None: the profile polls during its windows itself (interval) or not at all (none)."""
    if profile.scrape != "boundary":
        return None
    data = profile.model_dump()
    poll = min(profile.scrape_interval_s, GAUGE_POLL_S)
    data.update(scrape="interval", warmup_waves=0, warmup_sweep=False, requests_per_concurrency=0,
                requests=min_requests(), scrape_interval_s=poll, min_duration_s=GAUGE_SAMPLES * poll)
    return LoadProfile.model_validate(data)






def coarse_levels(profile: LoadProfile, ceiling: float) -> list[float]:
    """The profile's levels, then doubling from the highest up to the ceiling."""
    levels = [float(x) for x in profile.levels() if x <= ceiling] or [float(min(profile.levels()))]
    while levels[-1] * 2 <= ceiling:
        levels.append(levels[-1] * 2)
    return levels


def _one_level(profile: LoadProfile, x: float) -> LoadProfile:
    return profile.with_levels([x if profile.open_loop else int(x)])


def search(probe: Callable[[float, Literal["coarse", "bisect"]], Probe], coarse: list[float],
           integer: bool) -> list[Probe]:
    """Coarse levels until one breaks, then bisection between the last that held and the first that broke."""
    probes: list[Probe] = []
    lo = hi = None
    for x in coarse:
        p = probe(x, "coarse")
        probes.append(p)
        if not p.held:
            hi = x
            break
        lo = x
    if lo is None or hi is None:
        return probes
    while (hi - lo > 1) if integer else (hi / lo > RATE_STEP):
        mid = float((lo + hi) // 2) if integer else (lo * hi) ** 0.5
        p = probe(mid, "bisect")
        probes.append(p)
        lo, hi = (mid, hi) if p.held else (lo, mid)
    return probes














def searcher(sla: SLA, ceiling: float, on_result: Callable[[CapacityResult], None], repeats: int = 1):
    """A sweep for `harness.measure.session.deploy_and_measure`: the capacity search on the ready deployment, one
    `measure` call per probe (each probe is a level of the run's summary, written as it is measured), and
    `on_result` with the answer so far after each probe (a run stopped mid-search keeps what it found). With
    repeats > 1 a level holds only if every one of its windows held: on a noisy host one window's p95 can land
    on either side of the bound."""

    def run_search(stack: Stack, run: Run, summary: RunSummary, _at: Windows | None = None) -> RunSummary:
        profile, say = run.profile, run.out.say
        open_loop = profile.open_loop
        kind: Literal["concurrency", "rate"] = "rate" if open_loop else "concurrency"

        def probe(x: float, phase: Literal["coarse", "bisect"]) -> Probe:
            say(f"[bold]{summary.label}[/] capacity probe ({phase}): {'rate' if open_loop else 'c'}={x:g}")
            n = len(summary.levels)
            measure(stack, run.with_profile(_one_level(profile, x)).with_repeats(repeats), summary)
            polled = None
            if gauges is not None:
                say(f"[bold]{summary.label}[/] reading the engine's gauges at {'rate' if open_loop else 'c'}"
                              f"={x:g} (unmeasured, polled)")
                side = summary.model_copy(update={"label": f"{summary.label}-gauges", "levels": []}, deep=True)
                measure(stack, run.with_profile(_one_level(gauges, x)).with_repeats(1), side)
                polled = side.levels[-1] if side.levels else None
            measured = [probe_of(lv, sla, phase, polled, bool(stack.settings.devices)) for lv in summary.levels[n:]]
            worst = next((p for p in measured if not p.held), measured[-1])  # every repeat must hold
            so_far.append(worst)
            on_result(judge(summary.label, stack.kind, kind, sla, so_far))
            return worst

        so_far: list[Probe] = []
        gauges = gauge_profile(profile)
        probes = search(probe, coarse_levels(profile, ceiling), integer=not open_loop)
        on_result(judge(summary.label, stack.kind, kind, sla, probes))
        return summary

    return run_search


