"""Every compare under results/ as one flat pandas table, for `make report`'s cross-run summary and for anyone
who wants the raw figures in a notebook: one row per (run, side, level, repeat), every figure a column.

This module owns the flattening only. It never averages across runs (nor across repeats): a row is one measured
window of one deployment, exactly as the compare recorded it. The compare's own verdict for a level (delta and
its 95% interval, computed by harness/procedures/compare.py from both sides' repeats) is copied onto every row of
that level,
the same for both sides, so a filter on one side keeps it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.reporting.catalog import RunEntry, read_results
from harness.schemas import SIDES, CompareSummary, Dist, LevelDelta, LevelSummary, RunSummary, ServerLevelMetrics

DISTS = ("ttft", "itl", "tpot", "e2e", "dispatch_delay")  # LevelStats.<name>_ms
DIST_STATS = ("mean", "p50", "p90", "p95", "p99", "max")

# Which run and which window a row is; the figures follow (the dynamic families: errors_*, cpu_*, layer_*).
ID_COLUMNS = ["run_id", "compared_stack", "shape", "side", "stack", "profile", "engine_version", "status",
              "compare_status", "side_status", "open_loop", "level", "concurrency", "rate", "repeat", "pair",
              "invocation", "incomplete"]
COUNT_COLUMNS = ["sent", "succeeded", "failed"]
FIGURE_COLUMNS = ["wall_s", "window_s", "output_tokens", "throughput_tok_s", "steady_tok_s", "request_rate",
                  "goodput", "good_rps",
                  *[f"{d}_{s}_ms" for d in DISTS for s in DIST_STATS], "tokens_per_chunk", "steady",
                  "ttft_slow_share", "scheduled_rate", "achieved_rate", "off_schedule"]
# Every scalar of ServerLevelMetrics, whatever figures it gains: scrapes and gaps are named for the server side.
_SERVER_RENAMES = {"scrapes": "server_scrapes", "gaps": "server_gaps"}
SERVER_FIELDS = [f for f in ServerLevelMetrics.model_fields if f not in ("gap_reasons", "layer")]
SERVER_COLUMNS = [_SERVER_RENAMES.get(f, f) for f in SERVER_FIELDS]
CLIENT_COLUMNS = ["cpu_deployment", "client_cpu_cores", "client_loop_lag_p95_ms", "client_saturated",
                  "client_starved"]
DELTA_COLUMNS = ["delta_pct", "ci_lo_pct", "ci_hi_pct", "ci_source", "verdict", "verdict_why",
                 "goodput_verdict", "ttft_p95_verdict"]


def column_name(label: str) -> str:
    """A process label or error class as a column suffix: `Ray Serve proxy` -> `ray_serve_proxy`."""
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_") or "unnamed"


def _dist(prefix: str, d: Dist) -> dict[str, float | None]:
    return {f"{prefix}_{s}_ms": getattr(d, s) for s in DIST_STATS}


def _delta(ld: LevelDelta | None) -> dict[str, Any]:
    if ld is None:  # a level the compare has no delta for (written before its levels were judged)
        return dict.fromkeys(DELTA_COLUMNS)
    ci = ld.ci
    return {"delta_pct": ld.delta_pct, "ci_lo_pct": ci.lo_pct if ci else None, "ci_hi_pct": ci.hi_pct if ci else None,
            "ci_source": ci.source if ci else None, "verdict": ld.verdict, "verdict_why": ld.why,
            "goodput_verdict": getattr(ld.endpoints.get("goodput"), "verdict", None),
            "ttft_p95_verdict": getattr(ld.endpoints.get("ttft_p95"), "verdict", None)}


def level_row(lv: LevelSummary) -> dict[str, Any]:
    """The figures of one measured window, flat (no identity columns)."""
    st, sv, cl = lv.stats, lv.server, lv.client
    row: dict[str, Any] = {"open_loop": st.rate is not None, "level": st.level, "concurrency": st.concurrency,
                           "rate": st.rate, "repeat": st.repeat, "pair": lv.pair, "invocation": lv.invocation,
                           "incomplete": lv.incomplete,
                           # LevelSummary.sent counts requests started (also unrecorded ones of older versions)
                           "sent": lv.sent if lv.sent is not None else st.sent, "succeeded": st.succeeded,
                           "failed": st.failed}
    row |= {f"errors_{column_name(k)}": v for k, v in sorted(st.errors.items())}
    row |= {"wall_s": st.wall_s, "window_s": lv.window_s, "output_tokens": st.output_tokens,
            "throughput_tok_s": st.throughput_tok_s, "steady_tok_s": st.steady_tok_s,
            "request_rate": st.request_rate, "goodput": st.goodput, "good_rps": st.good_rps}
    for d in DISTS:
        row |= _dist(d, getattr(st, f"{d}_ms"))
    row |= {"tokens_per_chunk": st.tokens_per_chunk, "steady": st.steady.steady,
            "ttft_slow_share": st.ttft_modes.slow_share if st.ttft_modes else None,
            "scheduled_rate": st.scheduled_rate, "achieved_rate": st.achieved_rate, "off_schedule": st.off_schedule}
    row |= {col: getattr(sv, f) for f, col in zip(SERVER_FIELDS, SERVER_COLUMNS, strict=True)}
    row |= {f"layer_{column_name(k)}": v for k, v in sorted(sv.layer.items())}
    # cores = CPU seconds / window, as the compare report counts them (compare._cores)
    cores = {f"cpu_{column_name(k)}": (s / lv.window_s if lv.window_s else 0.0)
             for k, s in sorted(lv.process_cpu_s.items())}
    row |= cores
    row |= {"cpu_deployment": sum(cores.values()) if cores else None, "client_cpu_cores": cl.cpu_pct / 100,
            "client_loop_lag_p95_ms": cl.loop_lag_ms.p95, "client_saturated": cl.saturated,
            "client_starved": cl.starved}
    return row


def compare_rows(s: CompareSummary, run_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
    """One dict per (side, level, repeat) of one compare. run_id: the folder's name (default: the compare's own);
    status: run.json's, with the catalog's flags (default: the compare's)."""
    deltas = {ld.level: ld for ld in s.levels}
    rows = []
    for side in SIDES:
        run: RunSummary | None = s.runs.get(side)
        if run is None:  # the side never started (the baseline failed to deploy, say)
            continue
        for lv in run.levels:
            ident = {"run_id": run_id or s.run_id, "compared_stack": s.stack, "shape": s.shape, "side": side,
                     "stack": run.stack, "profile": s.profile,
                     "engine_version": run.engine_version or s.versions.get(side), "status": status or s.status,
                     "compare_status": s.status, "side_status": run.status}
            rows.append(ident | level_row(lv) | _delta(deltas.get(lv.stats.level)))
    return rows


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """A stable column order: the fixed columns in their groups, each dynamic family sorted within its group."""
    seen = {k for r in rows for k in r}

    def family(prefix: str) -> list[str]:
        return sorted(k for k in seen if k.startswith(prefix) and k not in CLIENT_COLUMNS)

    return [*ID_COLUMNS, *COUNT_COLUMNS, *family("errors_"), *FIGURE_COLUMNS, *SERVER_COLUMNS, *family("layer_"),
            *family("cpu_"), *CLIENT_COLUMNS, *DELTA_COLUMNS]


def compare_frame(source: Sequence[RunEntry] | Path) -> pd.DataFrame:
    """Every compare's windows, one row per (run, side, level, repeat); `source` is the catalog's entries or a
    results folder (read with harness.reporting.catalog.read_results, so damaged folders are simply absent here).
    compare.json carries both sides' RunSummary (`runs`), which the catalog reads whole; a compare whose
    compare.json is missing or unreadable has no rows. Error counts a window did not see are 0; a figure a
    window did not have (a process label another stack lacks) stays empty."""
    entries = read_results(source)[0] if isinstance(source, Path) else source
    rows = [r for e in entries if e.compare is not None for r in compare_rows(e.compare, e.run_id, e.status)]
    frame = pd.DataFrame(rows, columns=_columns(rows))
    errors = [c for c in frame.columns if c.startswith("errors_")]
    frame[errors] = frame[errors].fillna(0).astype(int)
    return frame
