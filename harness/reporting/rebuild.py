"""A compare's report written again from what its run folder stored (compare.json, scrapes.jsonl,
requests.jsonl, run.json), without deploying anything: `layerbench render RUN_ID` after layerbench learned to
report more, and how the committed example reports are kept current.

Figures an older layerbench did not keep are recomputed from the stored raw data where it holds them: the
engine's own TTFT/E2E per window from the scrapes (its histograms' _sum/_count), the SLO and a trace's description
from the profile the run recorded. Figures the run stored are kept as they are."""

from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.rejudge import changed, rejudge_stored
from harness.analysis.server_metrics import engine_latency
from harness.analysis.vllm_metrics import ENGINE_PREFIX
from harness.errors import LayerbenchError
from harness.profile.schema import SLO, LoadProfile
from harness.results import read_jsonl
from harness.schemas import CompareSummary


def load_compare(run_dir: Path) -> CompareSummary:
    """A run folder's compare.json; or a report folder's summary.json (the compare without its windows), its
    verdicts judged again by this layerbench's method from what it stored (harness.analysis.rejudge)."""
    path = run_dir / "compare.json"
    if not path.exists() and (run_dir / "summary.json").exists():
        path = run_dir / "summary.json"
    if not path.exists():
        raise LayerbenchError(f"{run_dir} has no compare.json (a run folder) or summary.json (a report folder): "
                              "not a compare's folder")
    try:
        s = CompareSummary.model_validate_json(path.read_text())
    except ValueError as e:
        raise LayerbenchError(f"{path} cannot be read by this layerbench: {str(e).splitlines()[0]}") from None
    fill_from_stored(s, run_dir)
    if path.name == "summary.json":
        before = s.model_copy(deep=True)
        if rejudge_stored(s):
            s.rejudged = changed(before, s) or ["no level's verdict changed"]
    return s


def fill_from_stored(s: CompareSummary, run_dir: Path) -> None:
    """What an older layerbench did not keep in compare.json, from the rest of the run folder: the SLO, how each
    side ended, the engine's own TTFT/E2E per window (the scrapes are read only when some window lacks them)."""
    if s.slo is None:
        s.slo = _recorded_slo(run_dir)
    if s.replay is None and (profile := recorded_profile(run_dir)) is not None and profile.trace is not None:
        s.replay = profile.replay().describe()  # a trace's compare from before its first screen named the trace
    for label, run in s.runs.items():
        if run.status == "running" and s.status != "running":
            run.status = "failed" if label in s.failures else s.status
    if any(lv.server.engine_requests is None for run in s.runs.values() for lv in run.levels):
        _engine_latency_from_scrapes(s, read_jsonl(run_dir / "scrapes.jsonl"))


def recorded_profile(run_dir: Path) -> LoadProfile | None:
    """The profile the run recorded in run.json; None when it is missing or this layerbench cannot read it."""
    try:
        return LoadProfile.model_validate(json.loads((run_dir / "run.json").read_text())["profile"])
    except (OSError, ValueError, KeyError, TypeError, LayerbenchError):  # LayerbenchError: its trace is gone
        return None


def _recorded_slo(run_dir: Path) -> SLO | None:
    try:
        return SLO.model_validate(json.loads((run_dir / "run.json").read_text())["profile"]["slo"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def renames_seen(s: CompareSummary) -> tuple[str, ...]:
    """The prefixes the stack put in place of `vllm:`: as the compare recorded its declaration, or, for a run
    from before it was recorded, as its audit found them under that declaration."""
    if s.renames is not None:
        return s.renames
    if s.audit is None:
        return ()
    found = {fa.found_as.removesuffix(fa.name.removeprefix(ENGINE_PREFIX)) for fa in s.audit.families
             if fa.status == "renamed" and fa.found_as}
    return tuple(sorted(found))


def _windows(scrapes: list[dict], label: str) -> list[list[dict]]:
    """One side's measured windows: each from its endpoints' start edge scrapes to their end ones, with any
    interval polls between; polls outside a window (between levels) belong to none."""
    windows: list[list[dict]] = []
    open_: set[str] = set()  # endpoints whose window has started and not ended
    for sc in scrapes:
        if sc.get("label") != label:
            continue
        phase, where = sc.get("phase"), str(sc.get("endpoint"))
        if phase == "start":
            if not open_:
                windows.append([])
            open_.add(where)
        if open_:
            windows[-1].append(sc)
        if phase == "end":
            open_.discard(where)
    return windows


def _engine_latency_from_scrapes(s: CompareSummary, scrapes: list[dict]) -> None:
    """Each side's windows, in order, are its measured levels and repeats in the order its summary lists them.
    Only a level whose engine figures were not stored is filled in."""
    renames = {"baseline": (), "stack": renames_seen(s)}
    for label, run in s.runs.items():
        windows = _windows(scrapes, label)
        if len(windows) != len(run.levels):
            continue  # an interrupted or resumed run whose windows cannot be matched one to one: leave as stored
        for lv, window in zip(run.levels, windows, strict=True):
            sv = lv.server
            if sv.engine_ttft_ms is not None or sv.engine_e2e_ms is not None or sv.engine_requests is not None:
                continue
            if window and window[0].get("level") == lv.stats.level:
                sv.engine_ttft_ms, sv.engine_e2e_ms, sv.engine_requests = engine_latency(window, renames[label])
