"""A compare's report written again from what its run folder stored (compare.json, scrapes.jsonl,
requests.jsonl, run.json), without deploying anything: `layerbench render RUN_ID` after layerbench learned to
report more, and how the committed example reports are kept current.

Figures an older layerbench did not keep are recomputed from the stored raw data where it holds them: the
engine's own TTFT/E2E per window from the scrapes (its histograms' _sum/_count), the SLO from the profile the
run recorded."""

from __future__ import annotations

import json
from pathlib import Path

from harness.compare import CompareSummary
from harness.errors import LayerbenchError
from harness.profile import SLO
from harness.results import read_jsonl
from harness.server_metrics import engine_latency
from harness.vllm_metrics import ENGINE_PREFIX


def load_compare(run_dir: Path) -> CompareSummary:
    path = run_dir / "compare.json"
    if not path.exists():
        raise LayerbenchError(f"{run_dir} has no compare.json: not a compare's run folder")
    try:
        s = CompareSummary.model_validate_json(path.read_text())
    except ValueError as e:
        raise LayerbenchError(f"{path} cannot be read by this layerbench: {str(e).splitlines()[0]}") from None
    if s.slo is None:
        s.slo = _recorded_slo(run_dir)
    _engine_latency_from_scrapes(s, read_jsonl(run_dir / "scrapes.jsonl"))
    return s


def _recorded_slo(run_dir: Path) -> SLO | None:
    try:
        return SLO.model_validate(json.loads((run_dir / "run.json").read_text())["profile"]["slo"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def renames_seen(s: CompareSummary) -> tuple[str, ...]:
    """The prefixes the stack put in place of `vllm:`, as its audit found them under the stack's declaration."""
    if s.audit is None:
        return ()
    found = {fa.found_as.removesuffix(fa.name.removeprefix(ENGINE_PREFIX)) for fa in s.audit.families
             if fa.status == "renamed" and fa.found_as}
    return tuple(sorted(found))


def _engine_latency_from_scrapes(s: CompareSummary, scrapes: list[dict]) -> None:
    """Each side's windows are its start..end edge scrapes in order, one per measured level and repeat, the order
    in which its summary lists them."""
    renames = {"baseline": (), "stack": renames_seen(s)}
    for label, run in s.runs.items():
        windows: list[list[dict]] = []
        for sc in scrapes:
            if sc.get("label") != label:
                continue
            if sc.get("phase") == "start" and (not windows or windows[-1][-1].get("phase") == "end"):
                windows.append([])
            if windows:
                windows[-1].append(sc)
        if len(windows) != len(run.levels):
            continue  # an interrupted or resumed run whose windows cannot be matched one to one: leave as stored
        for lv, window in zip(run.levels, windows, strict=True):
            if window and window[0].get("level") == lv.stats.level:
                lv.server.engine_ttft_ms, lv.server.engine_e2e_ms, lv.server.engine_requests = engine_latency(
                    window, renames.get(label, ()))
