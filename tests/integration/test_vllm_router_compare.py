"""A small compare against vLLM's real router (from .venv-vllm-router) in front of a real bare vLLM, and its
version-matched baseline: both of the router's ports on loopback, its serving port declared without /metrics
(never scraped), its vllm_router_* families on its metrics port, every vllm:* family on the engine's port."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import assert_gone, assert_version_matched, deployments, pids_of

pytestmark = [pytest.mark.slow, pytest.mark.cost(100)]


def test_vllm_router_compare_small(tmp_path, small_compare):
    rc, run, s = small_compare("vllm-router", "--opt", "policy=round_robin")
    assert rc == 0, s.failures
    assert_version_matched(s, "the engine's startup log behind the router was not found")
    assert s.in_request_path is True and not s.runs["stack"].exposed_ports
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
        assert lv.stack_goodput is not None and lv.stack_ttft_p95_ms > 0
    md = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert md.startswith(f"# layerbench: vllm-router vs vllm — {run.name}")
    seen = {e.name: e for e in s.audit.endpoints if e.label == "stack"}
    base = next(e.vllm_families for e in s.audit.endpoints if e.label == "baseline" and e.name == "api")
    assert seen["api"].status.startswith("no /metrics") and seen["api"].ok_scrapes == seen["api"].gaps == 0
    assert seen["engine"].vllm_families == base > 0
    added = s.audit.layer_families["router_metrics"]  # what the router adds: its own families, no vllm:*
    assert added and all(f.startswith("vllm_router_") for f in added), added
    assert seen["router_metrics"].vllm_families == 0
    assert not s.runs["stack"].scrape_gaps
    meta = json.loads((run / "run.json").read_text())
    assert {d["policy"] for d in deployments(meta, "stack")} == {"round_robin"}
    assert_gone(pids_of(meta, "stack") + pids_of(meta, "baseline"))
