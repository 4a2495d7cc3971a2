"""Each side of a finished compare as an llm-d Benchmark Report v0.2.1, so dashboards that read that format (llm-d
prism, llm-d-benchmark's analysis) can load a layerbench compare beside their own runs.

The format, its validator and its helpers are the `llmd-benchmark-report` package's (PyPI; source
https://github.com/llm-d/llm-d-benchmark). Paths below such as `schema_v0_2.py` are files of that installed package
(site-packages/llmd_benchmark_report/); `schema_v0_2_1.py` and `native_to_br0_2_1.py` only re-export
`schema_v0_2.py` and `native_to_br0_2.py`, which implement the whole 0.2 line at revision 0.2.1.

One report describes one load point: `results.request_performance.aggregate` holds one set of statistics and
`scenario.load.standardized` one concurrency or rate (schema_v0_2.py LoadStandardized, AggregateRequestPerformance).
So a compare of N levels gives 2 x N reports, one per side and level, numbered by the level's `stage` the way the
package's own CLI numbers the points of a multi-point run (cli.py: `<output>_<index>.yaml`):
`benchmark-report-baseline_0.yaml`, `benchmark-report-stack_0.yaml`, ...

What the schema has no field for (the compare's delta, its interval, the verdicts, goodput, steadiness) goes under
`results.observability.layerbench_compare`: Observability is the one results model that accepts keys it does not
define (schema_v0_2.py Observability, model_config extra="allow", "real reports include ad-hoc metric keys")."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.samples import measured
from harness.errors import LayerbenchError
from harness.load.client import RequestRecord
from harness.profile.schema import LoadProfile
from harness.profile.workload import Lognormal, Uniform
from harness.reporting.rebuild import load_compare, recorded_profile
from harness.schemas import SIDES, CompareSummary, Dist, LevelDelta, LevelSummary

PACKAGE = "llmd-benchmark-report"
PREFIX = "benchmark-report"
# percentiles of layerbench's Dist, named as Statistics names them (schema_v0_2.py Statistics: p50 ... p99, max)
PCTS = ("p50", "p90", "p95", "p99")


@dataclass
class _Compare:
    """What every report of one compare is built from."""

    s: CompareSummary
    profile: LoadProfile | None  # as run.json recorded it (None: unreadable)
    meta: dict  # run.json
    samples: dict[tuple[str, float, int], list[RequestRecord]]  # harness.analysis.samples.measured


def export_benchmark_reports(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write one Benchmark Report v0.2.1 per side and level of the compare in run_dir (a compare's results folder;
    or a report folder, whose summary.json is the compare without its windows) into out_dir, each validated by the
    package's own model first. A report that does not validate raises one LayerbenchError with the validator's
    message and nothing is written."""
    c = _read(run_dir)
    texts: dict[str, str] = {}
    for stage, lv in enumerate(c.s.levels):
        for side in SIDES:
            doc = _report(c, side, stage, lv)
            if doc is not None:
                texts[f"{PREFIX}-{side}_{stage}.yaml"] = _validated(doc, f"the {side} at {lv.level_text}")
    if not texts:
        raise LayerbenchError(f"{run_dir}: the compare measured no level on either side; no Benchmark Report to "
                              "export")
    return _write_all(out_dir, texts)


def _read(run_dir: Path) -> _Compare:
    if (run_dir / "compare.json").exists() or not (run_dir / "summary.json").exists():
        s = load_compare(run_dir)  # raises LayerbenchError for a folder that is not a readable compare
    else:  # reports/<run>/summary.json: harness/reporting/report.py writes the summary there without its runs
        try:
            s = CompareSummary.model_validate_json((run_dir / "summary.json").read_text())
        except (OSError, ValueError) as e:
            raise LayerbenchError(f"{run_dir}/summary.json is not a compare's summary: "
                                  f"{str(e).splitlines()[0]}") from None
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        meta = {}
    return _Compare(s, recorded_profile(run_dir), meta if isinstance(meta, dict) else {},
                    measured(run_dir, s.measured_repeats))


def _validated(doc: dict, what: str) -> str:
    """The report as YAML, once the package's model accepts it and reads back what was written."""
    from llmd_benchmark_report import load_benchmark_report, yaml_str_to_benchmark_report

    try:
        text = load_benchmark_report(doc).get_yaml_str()  # core.py: picks BenchmarkReportV02 for version 0.2.1
        yaml_str_to_benchmark_report(text)  # core.py: what import_benchmark_report does with the file
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise LayerbenchError(f"the Benchmark Report for {what} does not validate against {PACKAGE}: {e}") from None
    return text


def _write_all(out_dir: Path, texts: dict[str, str]) -> list[Path]:
    """Every file to a temporary name first, then each renamed into place: none is left half-written."""
    tmps: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            tmps.append(out_dir / f".{name}.tmp")
            tmps[-1].write_text(text)
        for tmp in tmps:
            os.replace(tmp, out_dir / tmp.name[1:-4])
    except OSError as e:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise LayerbenchError(f"cannot write the Benchmark Reports into {out_dir}: {e.strerror or e}") from None
    return [out_dir / name for name in texts]


def _report(c: _Compare, side: str, stage: int, lv: LevelDelta) -> dict | None:
    """One side at one level; None where that side measured nothing there (a side that failed)."""
    windows = _windows(c.s, side, lv)
    if not windows and getattr(lv, f"{side}_tok_s") is None:
        return None
    return {
        "version": "0.2.1",  # schema_v0_2.py VERSION
        "run": _run(c, side, stage, lv),
        "scenario": _some({"stack": _stack(c, side), "load": _load(c, side, stage, lv)}),
        "results": {"request_performance": {"aggregate": _aggregate(c, side, lv, windows)},
                    "observability": _observability(c, side, stage, lv)},
    }


def _windows(s: CompareSummary, side: str, lv: LevelDelta) -> list[LevelSummary]:
    """The side's measured windows of the level that count (harness.analysis.deltas: not stopped early)."""
    run = s.runs.get(side)
    return [w for w in (run.levels if run else []) if w.stats.level == lv.level and w.incomplete is None]


def _uid(s: CompareSummary, side: str, stage: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"layerbench:{s.run_id}:{side}:{stage}"))  # the same on re-export


def _name(s: CompareSummary, side: str) -> str:
    run = s.runs.get(side)
    return run.stack if run else (s.baseline_stack if side == "baseline" else s.stack)


def _model(c: _Compare, side: str) -> str:
    applied = c.s.applied.get(side)
    return (c.s.model.id if c.s.model else None) or (applied.model if applied else None) or (
        c.profile.engine.model if c.profile else "unknown")


def _run(c: _Compare, side: str, stage: int, lv: LevelDelta) -> dict:
    """schema_v0_2.py Run: uid per report; eid per experiment, a UUID5 of its ID as native_to_br0_2.py
    _populate_run_identity makes it; description, which prism shows as the run's label (the package's README). Its
    keywords are left to the submitter (README: never auto-populated)."""
    s = c.s
    run: dict[str, Any] = {"uid": _uid(s, side, stage), "eid": str(uuid.uuid5(uuid.NAMESPACE_URL, s.run_id)),
                           "description": f"{_name(s, side)} ({side}) {lv.level_text}: {_model(c, side)} "
                                          f"[{s.run_id}]"}
    time: dict[str, str] = {}  # schema_v0_2.py RunTime: ISO-8601 times and duration; the whole compare's
    for key, field in (("start", "started"), ("end", "finished")):
        try:  # harness/results.py writes them as %Y-%m-%dT%H:%M:%S%z
            time[key] = datetime.strptime(c.meta[field], "%Y-%m-%dT%H:%M:%S%z").isoformat()
        except (KeyError, TypeError, ValueError):
            pass
    if s.wall_s:
        time["duration"] = f"PT{s.wall_s:.3f}S"
    return {**run, **({"time": time} if time else {})}


def _accelerator(c: _Compare, side: str) -> dict:
    """schema_v0_2_components.py InferenceEngineAccelerator. The GPUs each side was given (the same for both) as this
    host named them; a local compare without GPUs ran on the CPU; a cluster's GPUs are not recorded here, and the
    model is then "" as native_to_br0_2.py leaves an accelerator it could not detect."""
    s, applied = c.s, c.s.applied.get(side)
    gpus = {g["index"]: g["name"] for g in (s.gpu_host or {}).get("gpus", [])}
    model = ", ".join(sorted({gpus.get(i, "") for i in s.devices} - {""})) if s.devices else (
        "cpu" if s.target == "local" else "")
    tp = (applied.tensor_parallel_size if applied else None) or (
        c.profile.engine.tensor_parallel_size if c.profile else 1)
    return {"model": model, "count": len(s.devices), "parallelism": {"tp": tp}}


def _stack(c: _Compare, side: str) -> list[dict]:
    """schema_v0_2.py Component: the engine (schema_v0_2_components.py InferenceEngine) on both sides, and on the
    stack's side the layer in front of it (schema_v0_2_components.py Generic: no schema of its own)."""
    from llmd_benchmark_report.native_to_br0_2 import config_hash  # sha256 of the config's canonical JSON

    s, applied = c.s, c.s.applied.get(side)
    config = {"engine_settings": c.profile.engine.model_dump(mode="json") if c.profile else None,
              "applied": applied.model_dump(mode="json") if applied else None,
              "served_model": s.model.model_dump(mode="json") if s.model else None, "target": s.target,
              "cluster": (s.cluster or {}).get(side), "frontend": s.frontend}
    engine = {"metadata": {"label": f"{side}-engine", "cfg_id": config_hash(config)},
              "standardized": {"kind": "inference_engine", "tool": s.baseline_stack,  # the bare engine's stack
                               "tool_version": s.versions.get(side, ""), "role": "replica", "replicas": 1,
                               "model": {"name": _model(c, side)}, "accelerator": _accelerator(c, side)},
              "native": {"config": config}}
    if side == "baseline" or s.is_aa:
        return [engine]
    layer_config = {"in_request_path": s.in_request_path, "shape": s.shape, "metricless": s.metricless}
    layer = {"metadata": {"label": f"stack-{s.stack}", "cfg_id": config_hash({"options": s.options, **layer_config}),
                          "description": f"{s.stack} in front of the engine"},
             "standardized": {"kind": "generic", "tool": s.stack, "tool_version": ""},  # layerbench records none
             "native": {"args": dict(s.options), "config": layer_config}}
    return [layer, engine]


def _length(asked: Any, sent: list[int]) -> dict:
    """schema_v0_2.py SequenceLength from a profile's length (harness.profile.workload.Length); a dataset's as the
    lengths its requests were drawn at. Distribution has no lognormal: that is `other`, at its mean and cap."""
    if isinstance(asked, Uniform):
        lo, hi = asked.uniform
        return {"distribution": "uniform", "value": (lo + hi) / 2, "min": lo, "max": hi}
    if isinstance(asked, Lognormal):
        return {"distribution": "other", "value": asked.lognormal.mean, "max": asked.lognormal.max}
    if isinstance(asked, int):
        return {"distribution": "fixed", "value": asked}
    if not sent:
        return {"distribution": "other", "value": 0}
    return {"distribution": "other", "value": float(np.mean(sent)), "min": min(sent), "max": max(sent)}


def _records(c: _Compare, side: str, lv: LevelDelta) -> list[RequestRecord]:
    return [r for (label, level, _), recs in c.samples.items() if label == side and level == lv.level for r in recs]


def _load(c: _Compare, side: str, stage: int, lv: LevelDelta) -> dict | None:
    """schema_v0_2.py Load: LoadMetadata, LoadStandardized (tool, source, stage, input_seq_len, output_seq_len,
    concurrency or rate_qps, multi_turn: MultiTurn) and LoadNative (args, config). Prompts are synthetic filler
    (harness/load/prompts.py) unless the profile takes a dataset: LoadSource has no synthetic category, and the
    package gives GuideLLM's synthetic text `random`, anything read from a dataset `sampled` (guidellm_native.py
    source). Shared-prefix groups stay in native.config: LoadPrefix's users per group has no layerbench meaning.
    None when run.json's profile cannot be read (scenario.load is optional)."""
    p = c.profile
    if p is None:
        return None
    recs = _records(c, side, lv)
    native = {"args": {"profile": p.name, "levels": list(p.levels()), "requests_per_level": p.requests_for(lv.level),
                       "repeats": c.s.repeats, "pairs": c.s.pairs, "deployments": c.s.deployments},
              "config": p.model_dump(mode="json", exclude={"engine"})}
    std: dict[str, Any] = {
        "tool": "layerbench", "tool_version": str(c.meta.get("git") or "unknown"),  # the revision that measured
        "source": "sampled" if p.dataset else "random", "stage": stage,
        "input_seq_len": _length(p.input_tokens, [r.input_asked for r in recs if r.input_asked]),
        "output_seq_len": _length(p.output_tokens, [r.output_asked for r in recs if r.output_asked]),
        **({"rate_qps": lv.rate} if lv.rate is not None else {"concurrency": lv.concurrency})}
    if p.sessions is not None:
        std["multi_turn"] = {"enabled": True, "max_turns": {"distribution": "fixed", "value": p.sessions.turns}}
    from llmd_benchmark_report.native_to_br0_2 import config_hash

    return {"metadata": {"cfg_id": config_hash(native), "description": f"{p.name}: {p.shape_text()}",
                         "treatment": f"{side}-{_name(c.s, side)}"},  # schema_v0_2.py LoadMetadata (0.2.1)
            "standardized": std, "native": native}


def _stat(values: list[float], units: str) -> dict | None:
    """schema_v0_2.py Statistics over values (Dist.of's percentiles)."""
    if not values:
        return None
    d = Dist.of(values)
    return {"units": units, "mean": d.mean, "min": float(min(values)), "max": d.max,
            "stddev": float(np.std(values)), **{p: getattr(d, p) for p in PCTS}}


def _over_windows(dists: list[Dist], units: str) -> dict | None:
    """Statistics of a latency over a level's windows as layerbench's report gives them (harness/reporting/
    report_tables.py latency_table, harness.analysis.deltas): each percentile and the mean are the mean over the
    windows of theirs, so p95 is the TTFT p95 the compare judged; max is the largest of the windows'."""
    got = [d for d in dists if d.n and d.mean is not None]
    if not got:
        return None
    out = {"units": units, "mean": float(np.mean([d.mean for d in got]))}
    for p in PCTS:
        vals = [getattr(d, p) for d in got if getattr(d, p) is not None]
        if vals:
            out[p] = float(np.mean(vals))
    maxes = [d.max for d in got if d.max is not None]
    return {**out, **({"max": max(maxes)} if maxes else {})}


def _aggregate(c: _Compare, side: str, lv: LevelDelta, windows: list[LevelSummary]) -> dict:
    """schema_v0_2.py AggregateRequestPerformance: AggregateRequests (total, failures, input_length, output_length),
    AggregateLatency (time_to_first_token, inter_token_latency, time_per_output_token, request_latency) and
    AggregateThroughput (output_token_rate, request_rate). Throughput is the compare's: the mean over the windows of
    the rate it judges (LevelStats.judged_tok_s), with their spread; without windows (a report folder's summary)
    only that."""
    tok_s = getattr(lv, f"{side}_tok_s")
    rates = [w.stats.judged_tok_s for w in windows]
    out_rate = {"units": "tokens/s", "mean": tok_s, **({"min": min(rates), "max": max(rates),
                                                         "stddev": float(np.std(rates))} if rates else {})}
    throughput = {"output_token_rate": out_rate}
    if not windows:
        return {"throughput": throughput}
    throughput["request_rate"] = {"units": "queries/s", "mean": float(np.mean([w.stats.request_rate
                                                                               for w in windows]))}
    recs = _records(c, side, lv)
    requests = {"total": sum(w.stats.sent for w in windows), "failures": sum(w.stats.failed for w in windows),
                # the engine's own usage counts (prompt_tokens, completion_tokens), as harness.analysis.lengths
                "input_length": _stat([r.prompt_tokens for r in recs if r.prompt_tokens is not None], "count"),
                "output_length": _stat([r.output_tokens for r in recs if r.output_tokens is not None], "count")}
    latency = {"time_to_first_token": _over_windows([w.stats.ttft_ms for w in windows], "ms"),
               "inter_token_latency": _over_windows([w.stats.itl_ms for w in windows], "ms/token"),
               "time_per_output_token": _over_windows([w.stats.tpot_ms for w in windows], "ms/token"),
               "request_latency": _over_windows([w.stats.e2e_ms for w in windows], "ms")}
    return {"requests": _some(requests), "latency": _some(latency), "throughput": throughput}


def _some(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _observability(c: _Compare, side: str, stage: int, lv: LevelDelta) -> dict:
    """schema_v0_2.py Observability: the engine's GPU over the level (ResourceMetrics' gpu_utilization, percent;
    power_consumption, Watts) where it was read, and layerbench's compare under an ad-hoc key."""
    out: dict[str, Any] = {"layerbench_compare": _compare_block(c, side, stage, lv)}
    gpu = getattr(lv, f"{side}_gpu")
    agg = _some({"gpu_utilization": {"units": "percent", "mean": gpu["util_pct_mean"]}
                 if gpu.get("util_pct_mean") is not None else None,
                 "power_consumption": {"units": "Watts", "mean": gpu["power_w_mean"]}
                 if gpu.get("power_w_mean") is not None else None})
    if agg:
        out["components"] = [{"component_label": f"{side}-engine", "aggregate": agg}]
    return out


def _compare_block(c: _Compare, side: str, stage: int, lv: LevelDelta) -> dict:
    """What layerbench concluded at the level, the same in both sides' reports but for `side` and `peer_uid`."""
    s = c.s
    sides = {label: {"stack": _name(s, label), "engine_version": s.versions.get(label),
                     "tok_s": getattr(lv, f"{label}_tok_s"), "ttft_p95_ms": getattr(lv, f"{label}_ttft_p95_ms"),
                     "e2e_p95_ms": getattr(lv, f"{label}_e2e_p95_ms"), "goodput": getattr(lv, f"{label}_goodput"),
                     "good_rps": getattr(lv, f"{label}_good_rps"),
                     "not_steady": getattr(lv, f"{label}_not_steady")} for label in SIDES}
    return {
        "run_id": s.run_id, "side": side, "stack": s.stack, "baseline_stack": s.baseline_stack,
        "peer_uid": _uid(s, "stack" if side == "baseline" else "baseline", stage), "level": lv.level_text,
        "status": s.status, "verdict": lv.verdict, "why": lv.why,
        "throughput_delta_pct": lv.delta_pct,  # the stack against the baseline, order-balanced over the pairs
        "throughput_interval_pct": {"lo": lv.ci.lo_pct, "hi": lv.ci.hi_pct, "df": lv.ci.df, "source": lv.ci.source}
        if lv.ci else None,
        # per endpoint (throughput, goodput, ttft_p95): the estimate and its 95% interval are a log ratio of the
        # stack to the baseline (a difference of shares for goodput); p_holm: Holm-adjusted over the compare's levels
        # x endpoints, one weighted family
        "endpoints": {k: v.model_dump(mode="json") for k, v in lv.endpoints.items()},
        "equivalence_margin": s.margin, "ttft_margin": s.ttft_margin, "pairs": lv.pairs, "repeats": s.repeats,
        "deployments": s.deployments, "sides": sides, "incomplete": lv.incomplete,
        "slo": s.slo.model_dump(mode="json") if s.slo else None,  # goodput: the share of requests within it
        "aa_reference": s.aa.run_id if s.aa else None, "version_match": s.version_match,
        "settings_match": s.settings_match,
        "latency_note": "each latency percentile and mean is the mean over the level's measured windows of theirs "
                        "(ms); inter_token_latency is the gap between streamed chunks",
    }
