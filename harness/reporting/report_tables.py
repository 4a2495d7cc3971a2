"""The compare report's tables, presentation only, as (title, caption, header, rows): `decision_tables` (what an
adopter decides by: capacity, the delta, goodput, the full latency table, where the latency went) and
`detail_tables` (versions, the layer's own metrics, steady state, CPU, observability), which the report puts after
the plots. Markdown and HTML render the same rows."""

from __future__ import annotations

from harness.analysis.capacity import MAX_ERROR_SHARE, of_levels
from harness.analysis.latency_split import COUNT_TOLERANCE, LevelSplit, hidden, mean_of, split
from harness.analysis.prefix_cache import UNIQUE_MAX, hit_rates
from harness.analysis.vllm_metrics import HISTOGRAMS
from harness.reporting.document import Table
from harness.reporting.format import MINOR_CORES, fmt, major_processes, share_pct
from harness.reporting.headline import verdict_table
from harness.reporting.plots import side_names
from harness.schemas import SLA, AuditResult, CapacityResult, CompareSummary, level_text

CPU_HOST_NOTE = (
    "On a CPU host the engine uses every core, so a layer's processes take their CPU from the engine and the "
    "measured cost is inflated; on a GPU host the engine's work runs on the accelerator and the layer does not "
    "compete with it for these cores. Read the CPU breakdown before generalising a CPU-host delta."
)
GPU_HOST_NOTE = (
    "On this GPU host the engine's model runs on the GPU; these cores run vLLM's API server and scheduler, the "
    "layer's processes and the load client."
)


def host_note(s: CompareSummary) -> str:
    return GPU_HOST_NOTE if s.on_gpu else CPU_HOST_NOTE


def _level_head(s: CompareSummary) -> str:
    return "rate (req/s)" if s.open_loop else "c"


def _level(lv) -> str:
    """A level's first cell: its concurrency, or its offered rate in an open loop."""
    return f"{lv.rate:g}" if lv.rate is not None else str(lv.concurrency)


def decision_tables(s: CompareSummary) -> list[Table]:
    """What an adopter decides by, in reading order."""
    b, st = side_names(s)
    lh = _level_head(s)
    out = capacity_table(s)
    aa = s.aa.levels if s.aa else {}
    out.append(verdict_table(s))
    out.append(("Throughput (output tok/s)", f"Mean over {s.pairs} deployment pair(s) of each window's output tok/s "
                "while every slot was decoding (from the moment the window's first c requests all had their first "
                "token to its last request's start: the ramp-up from idle and the drain are left out of the rate; "
                "every request is still recorded). The delta is the pairs' order-balanced estimate; its interval and "
                "verdict are the Verdicts table's." + (" Open loop: both deployments were offered the same requests "
                                                      "per second, so their output tok/s differ only where one fell "
                                                      "behind its arrivals (or by the tail of a short window); read "
                                                      "the latency table." if s.open_loop else "")
                + (f" A/A: the latest bare-vLLM-vs-bare-vLLM compare of this profile ({s.aa.run_id}), "
                   "this host's noise floor." if s.aa else " No A/A compare of this profile yet "
                   "(`make compare STACK=vllm`)."),
                [lh, f"{b}", f"{st}", "delta", "95% interval", "verdict", "A/A delta (± half-width)"]
                + (["measured in"] if s.invocations > 1 else []),
                [[_level(lv), fmt(lv.baseline_tok_s), fmt(lv.stack_tok_s), fmt(lv.delta_pct, "{:+.1f}%"),
                  lv.ci.text() if lv.ci else "—", lv.verdict, _aa_cell(aa.get(lv.level))]
                 + ([", ".join(_invocation(i) for i in lv.invocations) or "—"] if s.invocations > 1 else [])
                 for lv in s.levels]))
    if s.open_loop:
        out.append(open_loop_latency_table(s))
    else:
        out.append(("Latency and goodput", "Goodput: share of all sent requests (failures count) within the SLO"
                    + (f" ({_slo_text(s)})." if s.slo else "."),
                    ["c", f"{b} TTFT p95 ms", f"{b} goodput", f"{b} good req/s", f"{st} TTFT p95 ms",
                     f"{st} goodput", f"{st} good req/s"],
                    [[str(lv.concurrency), fmt(lv.baseline_ttft_p95_ms), share_pct(lv.baseline_goodput),
                      fmt(lv.baseline_good_rps, "{:.2f}"), fmt(lv.stack_ttft_p95_ms), share_pct(lv.stack_goodput),
                      fmt(lv.stack_good_rps, "{:.2f}")] for lv in s.levels]))
    out.append(latency_table(s))
    out += split_table(s)
    return out


def detail_tables(s: CompareSummary) -> list[Table]:
    """For the specialist, after the plots: versions, the layer's metrics, steady state, CPU, observability."""
    b, st = side_names(s)
    lh = _level_head(s)
    out: list[Table] = [("Versions and engine settings", "Both deployments must run the same engine with the same "
                         "settings; the values below are what each one reported applying (/v1/models, startup log).",
                         ["", f"baseline ({b})", f"stack ({st})"],
                         [["vLLM version", s.versions.get("baseline", "—"), s.versions.get("stack", "—")]]
                         + [[field, str(getattr(s.applied.get("baseline"), field, "—")),
                             str(getattr(s.applied.get("stack"), field, "—"))]
                            for field in ("model", "revision", "tensor_parallel_size", "max_model_len",
                                          "kv_cache_tokens", "max_concurrency", "max_concurrency_at_tokens")]
                         + ([["GPUs", _gpus(s), _gpus(s)]] if s.devices else []))]
    out += layer_table(s)
    steady = [[_level(lv), side, "; ".join(getattr(lv, f"{key}_not_steady")) or "steady",
               "; ".join(getattr(lv, f"{key}_modes")) or "—"]
              for lv in s.levels for side, key in ((b, "baseline"), (st, "stack"))
              if getattr(lv, f"{key}_not_steady") or getattr(lv, f"{key}_modes")]
    out.append(("Steady state and TTFT modes", "A level is not steady when the two halves of its full-load window "
                "differ in tok/s or TTFT p50 by more than their noise; bimodal TTFT gives the slow share and how "
                "the slow requests cluster in streaks. Levels not listed were steady and unimodal on both sides.",
                [lh, "deployment", "steady?", "TTFT modes"], steady or [["all", "both", "steady", "unimodal"]]))
    out += gpu_table(s) + prefix_table(s)
    out.append(("Where the CPU went (cores)", host_note(s) + f" Processes under {MINOR_CORES} cores at every "
                "level are summed as 'other'.", ["deployment", "process", *[lv.level_text for lv in s.levels]],
                cpu_rows(s)))
    return out + (audit_tables(s.audit) if s.audit else [])


def prefix_table(s: CompareSummary) -> list[Table]:
    """Each side's prefix-cache hit rate per level, from the engine's own counters; none where neither has them."""
    rates = {label: hit_rates(s.runs.get(label)) for label in ("baseline", "stack")}
    if not any(rates.values()):
        return []
    b, st = side_names(s)
    rows = [[lv.level_text, *(share_pct(rates[label][lv.level]) if lv.level in rates[label] else "—"
                              for label in ("baseline", "stack"))] for lv in s.levels]
    shared = any(r.shared_prefix for r in s.runs.values())
    why = ("The profile's requests share prefixes in groups, so the cache has something to reuse; a layer that "
           "routes by prefix shows a higher rate than its baseline." if shared else "Every prompt begins with a "
           f"block of its own, so above {share_pct(UNIQUE_MAX)} the unique prefix did not hold (a chat template's "
           "shared system prompt, or a layer rewriting prompts).")
    return [("Prefix cache (the engine's counters)", "Prompt tokens the engine served from its prefix cache, over "
             f"its windows at the level (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total). {why}",
             [_level_head(s), f"baseline ({b})", f"stack ({st})"], rows)]


def _gpus(s: CompareSummary) -> str:
    return ", ".join(map(str, s.devices))


def gpu_table(s: CompareSummary) -> list[Table]:
    """GPU telemetry per level and side (NVML; DCGM's Tensor Core activity where dcgmi was present)."""
    if not any(lv.baseline_gpu or lv.stack_gpu for lv in s.levels):
        return [("GPU telemetry", "On this GPU host no GPU figure was read: " + note, [], [])
                for note in {r.gpu_telemetry for r in s.runs.values() if r.gpu_telemetry}]
    b, st = side_names(s)
    note = next((r.gpu_telemetry for r in s.runs.values() if r.gpu_telemetry), "")
    rows = [[_level(lv), name, fmt(g.get("util_pct_mean"), "{:.0f}%"),
             fmt(g["memory_used_mib_max"] / 1024 if g.get("memory_used_mib_max") is not None else None, "{:.1f}"),
             fmt(g.get("power_w_mean"), "{:.0f}"), fmt(g.get("sm_clock_mhz_mean"), "{:.0f}"),
             fmt(100 * g["tensor_active_mean"] if g.get("tensor_active_mean") is not None else None, "{:.0f}%")]
            for lv in s.levels for name, g in ((b, lv.baseline_gpu), (st, lv.stack_gpu))]
    return [("GPU telemetry", f"Over each level's measured window, mean of the repeats, mean over the deployment's "
             f"GPUs (memory: the highest). {note}.", [_level_head(s), "deployment", "GPU util", "memory GiB",
                                                   "power W", "SM MHz", "Tensor active"], rows)]


def _slo_text(s: CompareSummary) -> str:
    slo = s.slo
    if slo is None:
        return ""
    parts = [f"TTFT ≤ {slo.ttft_s * 1e3:g} ms", f"E2E ≤ {slo.e2e_s:g} s"]
    parts += [f"ITL p95 ≤ {slo.itl_p95_s * 1e3:g} ms"] if slo.itl_p95_s else []
    parts += [f"TPOT ≤ {slo.tpot_s * 1e3:g} ms"] if slo.tpot_s else []
    return ", ".join(parts)


def capacities(s: CompareSummary) -> dict[str, CapacityResult]:
    """Each side's capacity at the profile's SLO among the compare's measured levels (TTFT p95 and, where the
    profile bounds it, ITL p95, with under 1% errors, in every repeat)."""
    if s.slo is None:
        return {}
    sla = SLA(ttft_p95_s=s.slo.ttft_s, itl_p95_s=s.slo.itl_p95_s)
    return {label: r for label, run in s.runs.items() if (r := of_levels(label, run.stack, run, sla)) is not None}


def capacity_text(r: CapacityResult, status: str = "complete") -> str:
    """status: how that side's run ended; a side that stopped early did not measure its higher levels."""
    unit, suffix = ("c=", "") if r.kind == "concurrency" else ("", " req/s")
    if r.value == 0:
        return "0 (no measured level held)"
    if r.reached:
        return f"{unit}{r.value:g}{suffix}"
    if status == "complete":
        return f"≥ {unit}{r.value:g}{suffix} (every level held)"
    return f"≥ {unit}{r.value:g}{suffix} (every level it measured held; the run {status} before the rest)"


def slo_text(s: CompareSummary) -> str:
    """The bounds a capacity is judged by."""
    if s.slo is None:
        return ""
    return f"TTFT p95 ≤ {s.slo.ttft_s * 1e3:g} ms" + (
        f" and ITL p95 ≤ {s.slo.itl_p95_s * 1e3:g} ms" if s.slo.itl_p95_s else "")


def capacity_table(s: CompareSummary) -> list[Table]:
    caps = capacities(s)
    if not caps or s.slo is None:
        return []
    names = dict(zip(("baseline", "stack"), side_names(s), strict=True))

    def how(r: CapacityResult) -> str:
        if r.broke_at is None:
            return "—"
        # queueing vs a slower engine is told from the engine's gauges under load: edge scrapes see them idle
        return r.how if s.scrape_policy == "interval" else "— (gauges not polled in the window)"

    rows = [[names.get(label, label), capacity_text(r, s.runs[label].status),
             "—" if r.broke_at is None else level_text(int(r.broke_at) if r.kind == "concurrency" else r.broke_at,
                                                     r.kind == "rate"),
             next(("; ".join(p.why) for p in r.probes if p.level == r.broke_at), "—"),
             how(r), fmt(r.tok_s_at_capacity)]
            for label, r in caps.items()]
    return [("Capacity at the SLO", f"The highest measured level at which {slo_text(s)} held in every repeat "
             f"with under {MAX_ERROR_SHARE:.0%} errors, among this compare's levels, below the first level "
             "that broke; `make capacity` bisects between levels for the exact figure."
             + "".join(f" {names.get(label, label)}: {w}." for label, r in caps.items() for w in r.warnings),
             ["deployment", "capacity", "broke at", "why", "how", "tok/s at capacity"], rows)]


def latency_table(s: CompareSummary) -> Table:
    """p50/p90/p99 of TTFT, ITL, TPOT and E2E, tokens per chunk and errors by class, per level and side (mean of
    each figure over the repeats)."""
    names = dict(zip(("baseline", "stack"), side_names(s), strict=True))
    rows = []
    for c in [lv.level for lv in s.levels]:
        for label in ("baseline", "stack"):
            run = s.runs.get(label)
            here = [lv.stats for lv in (run.levels if run else []) if lv.stats.level == c and lv.incomplete is None]
            if not here:
                continue
            cells = [level_text(c, s.open_loop), names[label]]
            for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
                for p in ("p50", "p90", "p99"):
                    cells.append(fmt(mean_of([getattr(getattr(x, metric), p) for x in here])))
            errors: dict[str, int] = {}
            for x in here:
                for k, v in x.errors.items():
                    errors[k] = errors.get(k, 0) + v
            cells += [fmt(mean_of([x.tokens_per_chunk for x in here]), "{:.2f}"),
                      ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"]
            rows.append(cells)
    pcts = [f"{m} {p}" for m in ("TTFT", "ITL", "TPOT", "E2E") for p in ("p50", "p90", "p99")]
    header = ["level", "deployment", *pcts, "tokens/chunk", "errors (all repeats)"]
    return ("Latency in full (ms)", "Each percentile is the mean of the repeats' percentiles. ITL: gaps between "
            "streamed chunks; TPOT: (E2E − TTFT) / (output tokens − 1); tokens/chunk above 1 means the stream "
            "batches tokens (ITL then reads per chunk, not per token)."
            + (" Open loop: TTFT and E2E count from the scheduled send time." if s.open_loop else ""), header, rows)


def split_table(s: CompareSummary) -> list[Table]:
    """Where the latency went: the engine's own mean TTFT and E2E beside the client's."""
    rows_in = split(s.runs) if s.runs else []
    if not rows_in:
        return []
    b, st = side_names(s)
    rows = [_split_row(r, s.open_loop) for r in rows_in]
    notes = []
    for label, name in (("baseline", b), ("stack", st)):
        if hidden(rows_in, label):
            notes.append(f"{name} does not expose the engine's TTFT and E2E histograms (under `vllm:` or a name its "
                         "stack declares), so its share outside the engine cannot be told apart: the layer hides it.")
    if any(side is not None and side.count_off for r in rows_in for side in (r.baseline, r.stack)):
        notes.append(f"Marked *: in some repeats the engine's histograms counted more than {COUNT_TOLERANCE:.0%} more "
                     "or fewer requests than the client measured (a metrics exporter that lags shifts the engine's "
                     "window); those repeats are left out of both means (`lagging`: all of them were).")
    adds = "A/A difference (noise)" if s.is_aa else "layer adds"
    return [("Where the latency went (mean ms)", "Client: what the load client measured. Engine: the engine's own "
             f"histograms ({', '.join(HISTOGRAMS.values())}: sum/count over the "
             "measured window). Outside = client − engine: the network, the API server and any layer. On the "
             f"baseline ({b}) it is the API server's share; the layer's share is the stack's outside less the "
             "baseline's." + (" " + " ".join(notes) if notes else ""),
             ["level", f"{b} TTFT client", f"{b} engine", f"{b} outside", f"{st} TTFT client", f"{st} engine",
              f"{st} outside", f"{adds} to TTFT", f"{b} E2E outside", f"{st} E2E outside", f"{adds} to E2E"],
             rows)]


def _split_row(r: LevelSplit, open_loop: bool) -> list[str]:
    def side(x, attr: str) -> str:
        if x is None:
            return "—"
        v = getattr(x, attr)
        if v is None and attr.startswith("engine"):
            return "lagging" if x.count_off else "hidden"
        return fmt(v) + ("*" if x.count_off and v is not None and not attr.startswith("client") else "")

    b, s = r.baseline, r.stack
    return [level_text(r.level, open_loop), side(b, "client_ttft_ms"), side(b, "engine_ttft_ms"),
            side(b, "outside_ttft_ms"), side(s, "client_ttft_ms"), side(s, "engine_ttft_ms"),
            side(s, "outside_ttft_ms"), fmt(r.layer_ttft_ms, "{:+.0f}"), side(b, "outside_e2e_ms"),
            side(s, "outside_e2e_ms"), fmt(r.layer_e2e_ms, "{:+.0f}")]


def open_loop_latency_table(s: CompareSummary) -> tuple[str, str, list[str], list[list[str]]]:
    b, st = side_names(s)
    return ("Latency and goodput", "Open loop: requests were sent at the offered rate whatever the deployment did, "
            "and TTFT and E2E count from each request's scheduled send time, so a deployment that falls behind "
            "shows its queue (no coordinated omission). Scheduled: the rate of the arrivals as drawn (a Poisson "
            "draw is off the offered rate by chance; both deployments got the same one); sent: the rate the client "
            "actually kept. Goodput: share of all sent requests (failures count) within the SLO.",
            ["rate (req/s)", "scheduled req/s", f"{b} sent req/s", f"{b} TTFT p95 ms", f"{b} E2E p95 ms",
             f"{b} goodput", f"{st} sent req/s", f"{st} TTFT p95 ms", f"{st} E2E p95 ms", f"{st} goodput"],
            [[_level(lv), fmt(lv.scheduled_rate), fmt(lv.baseline_achieved_rate), fmt(lv.baseline_ttft_p95_ms),
              fmt(lv.baseline_e2e_p95_ms), share_pct(lv.baseline_goodput), fmt(lv.stack_achieved_rate),
              fmt(lv.stack_ttft_p95_ms), fmt(lv.stack_e2e_p95_ms), share_pct(lv.stack_goodput)] for lv in s.levels])


def layer_table(s: CompareSummary) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The layer's own figures per level (mean over repeats), from the metrics its stack declares."""
    run = s.runs.get("stack")
    if run is None or not run.layer_notes:
        return []
    keys = list(run.layer_notes)
    rows = []
    for c in sorted({lv.stats.level for lv in run.levels}):
        here = [lv.server.layer for lv in run.levels if lv.stats.level == c and lv.incomplete is None]
        vals = [[x[k] for x in here if k in x] for k in keys]
        rows.append([f"{c:g}" if run.open_loop else str(c), *[fmt(sum(v) / len(v)) if v else "—" for v in vals]])
    caption = " ".join(f"{k}: {note}." for k, note in run.layer_notes.items())
    return [(f"The layer's own metrics ({s.stack})", caption + " Mean over repeats, from the level's scrapes of the "
             "layer's metric endpoint.", [_level_head(s), *keys], rows)]


def _invocation(i: int) -> str:
    return "first run" if i == 0 else f"resume {i}"


def _aa_cell(v: tuple[float | None, float | None, str] | None) -> str:
    if v is None or v[0] is None:
        return "—"
    return f"{v[0]:+.1f}% (±{v[1]:.1f}%)" if v[1] is not None else f"{v[0]:+.1f}%"


def cpu_rows(s: CompareSummary) -> list[list[str]]:
    """Rows: each process of each deployment (minor ones folded into 'other'), its total, the load client;
    columns: levels. Cores = CPU seconds / level window, mean over repeats."""
    rows = []
    for side in ("baseline", "stack"):
        per_level = [getattr(lv, f"{side}_cpu_cores") for lv in s.levels]
        labels = sorted({k for cores in per_level for k in cores})
        major = sorted(major_processes(per_level))
        minor = [k for k in labels if k not in major]
        for k in major:
            rows.append([side, k, *[fmt(c.get(k), "{:.2f}") for c in per_level]])
        if minor:
            rows.append([side, f"other ({len(minor)} processes)",
                         *[fmt(sum(c.get(k, 0.0) for k in minor), "{:.2f}") for c in per_level]])
        rows.append([side, "**deployment total**", *[fmt(sum(c.values()) if c else None, "{:.2f}") for c in per_level]])
        rows.append([side, "load client", *[fmt(getattr(lv, f"{side}_client_cores"), "{:.2f}") for lv in s.levels]])
    return rows


def audit_tables(a: AuditResult) -> list[tuple[str, str, list[str], list[list[str]]]]:
    endpoints = [[e.label, e.name, e.url, e.status, str(e.families), str(e.vllm_families),
                  ", ".join(f"{k} {v}" for k, v in list(e.prefixes.items())[:6])] for e in a.endpoints]
    families = [[fa.name, fa.status, fa.found_as or "—", fa.key or ""] for fa in a.families]
    live = [[lbl, "; ".join(f"{k}: {v}" + ("" if f.logs_exist.get(k) else " (missing)") for k, v in f.logs.items())
             or "—", str(len(f.listening) - len(f.non_loopback)), ", ".join(f.non_loopback) or "none"]
            for lbl, f in a.live.items()]
    own = [[name, str(len(fams)), ", ".join(fams)] for name, fams in a.layer_families.items() if fams]
    return [
        ("Observability: metric endpoints", "",
         ["deployment", "endpoint", "url", "HTTP", "families", "vllm:*", "prefixes"], endpoints),
        ("Observability: baseline vllm:* families behind the layer",
         "counts: " + ", ".join(f"{k} {v}" for k, v in sorted(a.counts.items())),
         ["family", "status", "found as", "key family"], families),
        ("Observability: logs and listening ports", "",
         ["deployment", "logs", "ports on loopback", "ports beyond loopback (0.0.0.0, ::, host address)"], live),
        *([("Observability: the layer's own families", "Families on the stack's endpoints that the bare vLLM "
            "baseline does not have and that are not the engine's.", ["endpoint", "families", "names"], own)]
          if own else []),
    ]


