"""A small compare against the real local Ray Serve LLM and its bare vLLM baseline (same engine venv).
Slow: Ray Serve takes 1.5-3 minutes to come up on this CPU host. The compare is the session's one of Ray, its
model pinned to a commit and read offline (tests/integration/conftest.py: ray_pinned), which
the pinned-model test at the end checks for the model; the rest does not depend on where the model came from."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import assert_gone, assert_version_matched, check_pinned_offline, pids_of

pytestmark = [pytest.mark.slow, pytest.mark.cost(170)]


def test_ray_compare_small(ray_pinned):
    c, _ = ray_pinned
    rc, run, s = c.rc, c.run, c.summary
    assert rc == 0, s.failures
    assert_version_matched(s, "engine log not found inside Ray's session logs")
    # Ray runs in its single-machine mode: only the Serve replicas' inter-deployment gRPC servers (one per
    # replica: 2 OpenAiIngress + 1 LLMServer; Ray has no setting for them) listen beyond loopback, not GCS,
    # raylet, workers or agents
    exposed = s.runs["stack"].exposed_ports
    core = ("gcs_server", "raylet", "dashboard", "runtimeenv", "telemetry", "monitor", "servecontrol", "proxyactor")
    assert len(exposed) <= 3 and not [e for e in exposed if any(c in e.lower() for c in core)], exposed
    # tables filled for every level
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
        assert lv.stack_goodput is not None and lv.stack_ttft_p95_ms > 0
        assert lv.stack_cpu_cores, "no CPU breakdown for the Ray deployment"
    report = c.report
    md = (report / "report.md").read_text()
    for needle in ("Throughput (output tok/s)", "| 4 |", "Where the CPU went", "vllm:num_requests_running",
                   "0.32.0"):
        assert needle in md, needle
    assert (report / "report.html").stat().st_size > 0 and (report / "delta.png").stat().st_size > 0
    # the audit: Serve's API port has no /metrics; the engine's families come back as ray_vllm_* on Ray's port
    api = next(e for e in s.audit.endpoints if e.label == "stack" and e.name == "api")
    assert api.status.startswith("no /metrics") and api.ok_scrapes == api.gaps == 0
    assert not s.runs["stack"].scrape_gaps  # nothing scraped that the stack says has no /metrics
    renamed = [fa for fa in s.audit.families if fa.status == "renamed"]
    if renamed:
        assert all(fa.found_as.startswith("ray_vllm") for fa in renamed)
    else:  # absent: the report must say so
        assert any("lost" in n for n in s.audit.notes)
    assert not any(fa.status == "survives" for fa in s.audit.families)  # no vllm:* name reaches the user
    # nothing of Ray is left running
    meta = json.loads((run / "run.json").read_text())
    pids = pids_of(meta, "stack")
    assert_gone(pids)


def test_a_commit_pinned_model_is_served_offline_on_both_sides(ray_pinned):
    """Ray Serve LLM starts the engine itself: it must hand it the commit (an engine or layer that read the repo id
    alone would find no refs/main and fail to start). The compare is test_ray_compare_small's."""
    check_pinned_offline(*ray_pinned)
