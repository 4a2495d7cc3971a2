"""A small compare against LiteLLM's real proxy (from .venv-litellm) in front of a real bare vLLM, and its
version-matched baseline: the proxy on loopback, its own litellm_* families on its port, every vllm:* family only
on the engine's port behind it."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import assert_gone, assert_version_matched, deployments, pids_of

pytestmark = [pytest.mark.slow, pytest.mark.cost(110)]


def test_litellm_compare_small(tmp_path, small_compare):
    rc, run, s = small_compare("litellm")
    assert rc == 0, s.failures
    assert_version_matched(s, "the engine's startup log behind LiteLLM was not found")
    assert s.in_request_path is True and not s.runs["stack"].exposed_ports
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
        assert lv.stack_goodput is not None and lv.stack_ttft_p95_ms > 0
    md = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert md.startswith(f"# layerbench: litellm vs vllm — {run.name}") and "LiteLLM proxy" in md
    # the audit: what a user of the gateway sees on its port, and what it adds
    seen = {e.name: e for e in s.audit.endpoints if e.label == "stack"}
    base = next(e.vllm_families for e in s.audit.endpoints if e.label == "baseline" and e.name == "api")
    assert seen["api"].vllm_families == 0 and seen["engine"].vllm_families == base > 0
    added = s.audit.layer_families["api"]  # what the gateway adds on its port: its own litellm_* families
    assert any(f.startswith("litellm_") for f in added), added
    meta = json.loads((run / "run.json").read_text())
    assert all(d["upstream"]["stack"] == "vllm" for d in deployments(meta, "stack"))
    assert_gone(pids_of(meta, "stack") + pids_of(meta, "baseline"))
