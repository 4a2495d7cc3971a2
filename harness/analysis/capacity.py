"""Capacity at an SLA, judged from measured levels: whether a level held (TTFT p95, ITL p95 and errors within their
bounds), the highest that held, how the first that broke broke (queueing, prefill interference, a slow first token,
errors: told apart as a single-GPU capacity study did), and whether the held levels were fragile. Pure: the search
that measures the levels is harness/procedures/capacity.py."""

from __future__ import annotations

from typing import Literal

from harness.schemas import SLA, CapacityResult, LevelSummary, Probe, RunSummary

MAX_ERROR_SHARE = 0.01  # a level whose requests fail more often than this does not hold the SLA either


def probe_of(lv: LevelSummary, sla: SLA, phase: Literal["coarse", "bisect"],
             gauges: LevelSummary | None = None, on_gpu: bool = False) -> Probe:
    """The SLA verdict from the measured level; the engine's gauges from `gauges` (the polled pass) if given."""
    s = lv.stats
    seen = (gauges or lv).server
    why = []
    errors = s.failed / s.sent if s.sent else 1.0
    if s.ttft_ms.p95 is None or s.ttft_ms.p95 > sla.ttft_p95_s * 1e3:
        why.append(f"TTFT p95 {_ms(s.ttft_ms.p95, sla.ttft_p95_s * 1e3)} > {sla.ttft_p95_s * 1e3:g} ms")
    if sla.itl_p95_s is not None and (s.itl_ms.p95 is None or s.itl_ms.p95 > sla.itl_p95_s * 1e3):
        why.append(f"ITL p95 {_ms(s.itl_ms.p95, sla.itl_p95_s * 1e3)} > {sla.itl_p95_s * 1e3:g} ms")
    if errors > MAX_ERROR_SHARE:
        why.append(f"{100 * errors:.0f}% of requests failed ({', '.join(f'{k} {v}' for k, v in s.errors.items())})")
    bound = lv.client.saturated
    if bound:  # whatever the figures say, they are the client's: the level neither holds nor breaks the engine
        why.insert(0, "client-bound: the load client ran out of CPU here (raise client_procs or client_cpus)")
    return Probe(level=float(lv.stats.level), phase=phase, held=not why, why=why, client_bound=bound,
                 ttft_p95_ms=s.ttft_ms.p95,
                 itl_p95_ms=s.itl_ms.p95, tok_s=s.throughput_tok_s, goodput=s.goodput, error_share=errors,
                 waiting_max=seen.waiting_max, running_max=seen.running_max, kv_cache_usage_max=seen.kv_cache_usage_max,
                 on_gpu=on_gpu)


def _ms(v: float | None, bound: float | None = None) -> str:
    """Whole ms, or tenths where whole ms would print a value over `bound` as equal to it ("500 ms > 500 ms")."""
    if v is None:
        return "—"
    return f"{v:.1f} ms" if bound is not None and v > bound and round(v) <= bound else f"{v:.0f} ms"


def judge(label: str, stack: str, kind: Literal["concurrency", "rate"], sla: SLA, probes: list[Probe],
          below_first_break: bool = False) -> CapacityResult:
    """The capacity, how it broke and the 429-threshold candidates, from the search's probes. below_first_break:
    a level that held above one that broke does not count (a compare's fixed levels: a deployment holds a load
    only if it held every lower one too); the bisection instead searches around the highest level that held."""
    r = CapacityResult(label=label, stack=stack, kind=kind, sla=sla, probes=probes)
    held = sorted((p for p in probes if p.held), key=lambda p: p.level)
    broke = sorted((p for p in probes if not p.held), key=lambda p: p.level)
    unit = "c=" if kind == "concurrency" else ""
    suffix = "" if kind == "concurrency" else " req/s"
    if not probes:
        r.message = "nothing was measured"
        return r
    if not held:
        low = broke[0]
        r.max_concurrency, r.max_rate = (0, None) if kind == "concurrency" else (None, 0.0)
        r.broke_at = low.level
        r.message = (f"capacity 0: no level met the SLA ({sla.text()}); the lowest, {unit}{low.level:g}{suffix}, had "
                     f"TTFT p95 {_ms(low.ttft_p95_ms)}, ITL p95 {_ms(low.itl_p95_ms)}, {100 * low.error_share:.0f}% "
                     "errors")
        r.how, r.how_text = _how(None, low, sla, kind == "concurrency")
        return r
    r.warnings = _fragile(held, broke, sla, unit, suffix)
    if below_first_break and broke and held[0].level > broke[0].level:  # the lowest level broke
        out = judge(label, stack, kind, sla, [p for p in probes if p.level <= broke[0].level])
        out.probes, out.warnings = probes, r.warnings
        return out
    if below_first_break and broke:
        held = [p for p in held if p.level < broke[0].level]
    best = held[-1]
    r.max_concurrency, r.max_rate = (int(best.level), None) if kind == "concurrency" else (None, best.level)
    r.tok_s_at_capacity = best.tok_s
    r.waiting_before_break, r.kv_usage_before_break = best.waiting_max, best.kv_cache_usage_max
    r.running_before_break = best.running_max
    above = [p for p in broke if p.level > best.level]
    if not above:
        r.reached = False
        r.message = (f"every level held up to {unit}{best.level:g}{suffix}, the search's ceiling: the capacity is at "
                     "least that (raise the ceiling with --max-level)")
        return r
    first = above[0]
    if first.client_bound:  # the search stopped at the client's limit, not the engine's
        r.reached = False
        r.message = (f"at least {unit}{best.level:g}{suffix} at {sla.text()}: at {unit}{first.level:g}{suffix} the "
                     "load client ran out of CPU (client-bound), so the engine's limit was not reached there; raise "
                     "client_procs or client_cpus and measure again")
        return r
    r.broke_at = first.level
    r.how, r.how_text = _how(best, first, sla, kind == "concurrency")
    r.message = (f"capacity {unit}{best.level:g}{suffix} at {sla.text()}: it broke at {unit}{first.level:g}{suffix} "
                 f"({'; '.join(first.why)}), by {r.how}")
    return r


def of_levels(label: str, stack: str, run: RunSummary, sla: SLA) -> CapacityResult | None:
    """The capacity among a run's measured levels (a compare's, no bisection): a level holds only if every
    repeat held, and it is judged by its worst repeat."""
    by_level: dict[float, list[Probe]] = {}
    for lv in run.levels:
        if lv.incomplete is None:
            by_level.setdefault(float(lv.stats.level), []).append(probe_of(lv, sla, "coarse", on_gpu=bool(run.devices)))
    if not by_level:
        return None
    probes = [next((p for p in ps if not p.held), max(ps, key=lambda p: p.ttft_p95_ms or 0.0))
              for ps in by_level.values()]
    return judge(label, stack, "rate" if run.open_loop else "concurrency", sla, probes, below_first_break=True)


NEAR = 0.9  # a level that held within 10% of a bound held narrowly


FALL = 2 / 3  # a held level whose TTFT p95 is below 2/3 of a lower level's: the windows are noise, not load


def _fragile(held: list[Probe], broke: list[Probe], sla: SLA, unit: str, suffix: str) -> list[str]:
    """The bisection assumes latency rises with load; say where the probes contradict it or the answer is close."""
    out = []
    inverted = [(h, b) for b in broke for h in held if h.level > b.level]
    if inverted:
        h, b = inverted[0]
        out.append(f"{unit}{h.level:g}{suffix} held although {unit}{b.level:g}{suffix} broke: on this host the "
                   "latency does not rise steadily with load, so another run can answer differently (REPEATS=3 "
                   "judges each level on three windows)")
    falls = [(a, b) for i, a in enumerate(held) for b in held[i + 1:]
             if a.ttft_p95_ms and b.ttft_p95_ms and b.ttft_p95_ms < FALL * a.ttft_p95_ms]
    if falls and not inverted:
        a, b = falls[0]
        out.append(f"TTFT p95 fell as load rose ({unit}{a.level:g}{suffix} {_ms(a.ttft_p95_ms)}, {unit}{b.level:g}"
                   f"{suffix} {_ms(b.ttft_p95_ms)}): one window per level is noisy here, so another run can answer "
                   "differently (REPEATS=3 judges each level on three windows)")
    near = [h for h in held if (h.ttft_p95_ms or 0) > NEAR * sla.ttft_p95_s * 1e3
            or (sla.itl_p95_s and (h.itl_p95_ms or 0) > NEAR * sla.itl_p95_s * 1e3)]
    if near:
        out.append("held within 10% of a bound: " + ", ".join(
            f"{unit}{h.level:g}{suffix} (TTFT p95 {_ms(h.ttft_p95_ms)}, ITL p95 {_ms(h.itl_p95_ms)})" for h in near))
    return out


How = Literal["queueing", "prefill interference", "slow first token", "errors"]


def _how(before: Probe | None, at: Probe, sla: SLA, closed_loop: bool = True) -> tuple[How, str]:
    """Prefill interference when ITL is what broke (decodes stalled by new prefills); when TTFT broke, queueing
    if requests waited in the engine, or (closed loop) fewer requests than the level ran in the engine at once,
    the rest held in front of it, in the layer; a slow first token when every request ran and none waited; and
    queueing inferred from TTFT alone when the engine's gauges did not see the load. The larger overshoot of
    its bound decides when both broke."""
    ttft_over = (at.ttft_p95_ms or 0) / (sla.ttft_p95_s * 1e3)
    itl_over = (at.itl_p95_ms or 0) / (sla.itl_p95_s * 1e3) if sla.itl_p95_s else 0.0
    was = (f"from {_ms(before.ttft_p95_ms)} / {_ms(before.itl_p95_ms)} at {before.level:g} "
           if before else "")
    moved = f"TTFT p95 / ITL p95 went {was}to {_ms(at.ttft_p95_ms)} / {_ms(at.itl_p95_ms)} at {at.level:g}"
    if max(ttft_over, itl_over) <= 1.0 and at.error_share > MAX_ERROR_SHARE:
        return "errors", f"requests failed ({100 * at.error_share:.0f}%) before latency broke; {moved}"
    waiting, running = at.waiting_max, at.running_max
    queued = f"; up to {waiting:.0f} requests waited in the engine" if waiting else ""
    if itl_over > ttft_over:
        return "prefill interference", (f"{moved}: the gaps between tokens spiked, as when new requests' prefill "
                                        f"pushes back the running decodes{queued}")
    if waiting:
        return "queueing", f"{moved}: the first token waited, as when requests queue for the engine{queued}"
    if closed_loop and running and running < at.level:
        return "queueing", (f"{moved}: at most {running:.0f} of the {at.level:g} requests ran in the engine at "
                            "once and none waited there: the rest were held in front of it, in the layer")
    if waiting == 0 and running:
        host = "" if at.on_gpu else " (on a CPU host the engine shares its cores with the server and the client)"
        return "slow first token", (f"{moved} with every request running and none waiting in the engine: prefill "
                                    f"and the engine's steps slowed under the load{host}, not a queue")
    return "queueing", (f"{moved}: the first token waited; the engine's gauges did not see the load, so the queue "
                        "is inferred from TTFT alone")
