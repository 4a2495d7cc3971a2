"""A small compare of KServe RawDeployment's request path (the vLLM ServingRuntime's predictor process, run
locally as the pod would run it) against bare vLLM from the same environment. Slow: two vLLM start-ups. The
in-process compare is the session's one of that mode, its model pinned to a commit and read offline
(tests/integration/conftest.py: kserve_inprocess_pinned), checked for the model by the last test."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.targets.k8s.crds import validate
from tests.integration.conftest import assert_gone, assert_version_matched, check_pinned_offline, deployments, pids_of

pytestmark = [pytest.mark.slow, pytest.mark.cost(300)]


def test_kserve_raw_compare_small(tmp_path, small_compare):
    rc, run, s = small_compare("kserve")
    assert rc == 0, s.failures
    assert s.versions["baseline"] == s.versions["stack"] == "0.32.0" and s.settings_match, s.settings_mismatches
    assert s.in_request_path is False and s.shape == "raw mode"
    md = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert md.startswith(f"# layerbench: kserve (raw mode) vs vllm — {run.name}")
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
    # the pod's process: the runtime's flags as rendered, the model path and port substituted, on loopback
    meta = json.loads((run / "run.json").read_text())
    stack = deployments(meta, "stack")[0]
    manifests = list(yaml.safe_load_all(open(stack["manifests"])))
    assert [m["kind"] for m in manifests] == ["ServingRuntime", "InferenceService"]
    assert [e for m in manifests for e in validate(m)] == []
    assert not s.runs["stack"].exposed_ports
    # every vllm:* family of the baseline is on the predictor's own /metrics, as the study found
    assert set(s.audit.counts) == {"survives"}, s.audit.counts
    assert_gone(pids_of(meta, "stack"))


@pytest.mark.parametrize("mode", ["inprocess", "proxy"])
def test_kserve_data_plane_compare_small(request, tmp_path, small_compare, mode):
    """KServe's own server in the request path: ModelServer with vLLM in its process, or its OpenAI proxy in
    front of bare vLLM. Bound to loopback, version-matched, and the audit says where vllm:* went."""
    if mode == "inprocess":  # the compare the pinned-model test below checks too
        c, _ = request.getfixturevalue("kserve_inprocess_pinned")
        rc, run, s, report = c.rc, c.run, c.summary, c.report
    else:
        rc, run, s = small_compare("kserve", "--opt", f"mode={mode}")
        report = tmp_path / "reports" / run.name
    assert rc == 0, s.failures
    assert_version_matched(s, "vLLM's startup log not found where the KServe stack said it is")
    assert s.in_request_path is True and s.shape == f"{mode} mode"
    md = (report / "report.md").read_text()
    assert md.startswith(f"# layerbench: kserve ({mode} mode) vs vllm — {run.name}")
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
    # KServe's REST server is on 127.0.0.1 (the SDK hard-codes 0.0.0.0) and its gRPC server is off
    assert not s.runs["stack"].exposed_ports
    meta = json.loads((run / "run.json").read_text())
    stack = deployments(meta, "stack")[0]
    assert stack["mode"] == mode and (stack["upstream"] if mode == "proxy" else True)
    # where vllm:* went: in-process, the engine's registry is KServe's, so KServe's own /metrics has every
    # family; behind the proxy, only the engine's port has them
    base = next(e.vllm_families for e in s.audit.endpoints if e.label == "baseline" and e.name == "api")
    seen = {e.name: e.vllm_families for e in s.audit.endpoints if e.label == "stack"}
    assert base > 0 and seen == ({"api": base} if mode == "inprocess" else {"api": 0, "engine": base}), seen
    assert set(s.audit.counts) == {"survives"}, s.audit.counts
    assert_gone(pids_of(meta, "stack"))


def test_a_commit_pinned_model_is_served_offline_on_both_sides(kserve_inprocess_pinned):
    """KServe's in-process server starts the engine itself: it must hand it the commit (an engine that read the repo
    id alone would find no refs/main and fail to start). The compare is the in-process mode's above."""
    check_pinned_offline(*kserve_inprocess_pinned)
