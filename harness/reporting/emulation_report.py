"""How a compare report shows the GPU-like engine (engine.model: gpu-like), presentation only: the first line
says the step was emulated and what it cost, a warning names each level whose step this host stretched, and a
table sets the configured step beside the measured one with the worker's and EngineCore's CPU."""

from __future__ import annotations

from harness.analysis.emulation import TOLERANCE, StepCheck, step_checks
from harness.reporting.document import Table
from harness.reporting.format import fmt
from harness.reporting.plots import side_names
from harness.schemas import CompareSummary, level_text


def _names(s: CompareSummary) -> dict[str, str]:
    return dict(zip(("baseline", "stack"), side_names(s), strict=True))


def step_line(s: CompareSummary) -> list[str]:
    """The report's first line for an emulated engine: what one step was set to cost, what it measured."""
    step = s.emulated_step
    if step is None:
        return []
    every = step_checks(s)
    checks = [c for c in every if c.measured_ms is not None]
    kept = [c for c in checks if c.kept]
    lagged = sum(1 for c in every if c.measured_ms is None and c.lagged)
    client = sum(1 for c in every if c.source == "client")
    low = min(checks, key=lambda c: (c.level, c.side != "baseline"), default=None)
    measured = (f"; measured {fmt(low.measured_ms, '{:.1f}')} ms per decode step at "
                f"{level_text(low.level, s.open_loop)} ({_names(s)[low.side]}) against "
                f"{fmt(low.configured_ms, '{:.1f}')} ms configured, and within {TOLERANCE:.0%} at {len(kept)} of "
                f"{len(checks)} side-levels") if low else "; the engine's step histograms were not visible"
    if lagged:
        measured += f" (not checked at {lagged}: every window there counted other requests, the exporter lagged)"
    if client:
        measured += (f" ({client} from the client's TPOT: the engine's step histograms were hidden or lagged "
                     "there)")
    return [f"**engine step emulated (gpu-like{f': {step.like}' if step.like else ''})**: {step.text()}, "
            f"a sleeping model step in real vLLM{measured}"]


def step_warnings(s: CompareSummary) -> list[str]:
    return [text for _, text in step_items(s)]


def step_items(s: CompareSummary) -> list[tuple[str, str]]:
    """Each level whose emulated step this host stretched (or the pacing undershot), with its kind."""
    names = _names(s)
    return [(f"{'stretched' if c.stretched else 'short'} step",
             f"**emulated step {'stretched' if c.stretched else 'short'}** ({names[c.side]} at "
             f"{level_text(c.level, s.open_loop)}): {fmt(c.measured_ms, '{:.1f}')} ms per step against "
             f"{fmt(c.configured_ms, '{:.1f}')} ms configured ({c.off_pct:+.0f}%): "
             + ("this host's own work per step did not fit, so this level measures the host, not the emulated GPU"
                if c.stretched else "the pacing undershot the configured step"))
            for c in step_checks(s) if c.kept is False]


def _row(c: StepCheck, names: dict[str, str], open_loop: bool) -> list[str]:
    return [level_text(c.level, open_loop), names[c.side], f"{c.windows - c.lagged} of {c.windows}",
            fmt(c.tokens_per_step), fmt(c.configured_ms),
            fmt(c.measured_ms), "client TPOT" if c.source == "client" else "engine", fmt(c.off_pct, "{:+.0f}%"),
            {True: "kept", False: "**stretched**" if c.stretched else "**short**", None: "—"}[c.kept],
            fmt(c.worker_cores, "{:.2f}"), fmt(c.engine_core_cores, "{:.2f}")]


def step_table(s: CompareSummary) -> list[Table]:
    checks = step_checks(s)
    if not checks or s.emulated_step is None:
        return []
    names = _names(s)
    return [("The emulated engine step", f"Configured: {s.emulated_step.text()}, for the mix of each window "
             "(steps: vllm:iteration_tokens_total's count; generated and prompt tokens: "
             "vllm:generation_tokens_total and vllm:prompt_tokens_total). Measured: the engine's mean inter-token "
             f"latency (vllm:inter_token_latency_seconds), its step while decoding. Kept: within {TOLERANCE:.0%}. "
             "Worker and EngineCore: cores during the level (the worker sleeps out each step, as one waiting on "
             "its GPU). Windows: those whose engine counters counted the client's requests (within 10%); a lagging "
             "exporter's (Ray's metrics agent) are left out. Where the engine's step is hidden (Triton) or every "
             "window lagged, the client's TPOT p50 is measured against the step configured for the bare engine's mix "
             "at the same level; a level neither reads is unchecked and gets no verdict.",
             ["level", "deployment", "windows", "tokens per step", "configured ms", "measured ms", "from", "off",
              "step", "worker cores", "EngineCore cores"],
             [_row(c, names, s.open_loop) for c in checks])]
