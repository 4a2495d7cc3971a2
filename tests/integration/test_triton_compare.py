"""A small compare against the real local Triton (2.51, layerbench's Python-backend model modelled on NVIDIA's
vLLM backend) and its bare vLLM baseline from the same environment. Slow: each side takes about a minute to come
up on this CPU host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results import read_jsonl
from stacks.base.procs import holders
from tests.integration.conftest import OUTPUT_TOKENS, assert_gone, assert_version_matched, deployments, pids_of

pytestmark = [pytest.mark.slow, pytest.mark.cost(105)]


def shm() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()}


def orphans(names: set[str]) -> set[str]:
    """Those of `names` still in /dev/shm that no live process holds (stacks.base.procs.Holders: mapped, open, or by
    inode, as a semaphore is): left behind. (Other vLLM servers on the host, such as other tests', create psm_* and
    sem.mp-* files of their own while this compare runs.)"""
    paths = {n: Path("/dev/shm") / n for n in names}
    held = holders()
    return {n for n, p in paths.items() if p.exists() and not held.hold(p)}


def test_triton_compare_small(tmp_path, small_compare):
    shm_before = shm()
    rc, run, s = small_compare("triton")
    assert rc == 0, s.failures
    assert_version_matched(s, "vLLM's startup lines not found in Triton's log")
    assert not s.runs["stack"].exposed_ports  # HTTP, gRPC and metrics on 127.0.0.1
    # tokens counted by the server: every Triton request reports exactly the tokens asked for (ignore_eos)
    requests = [r for r in read_jsonl(run / "requests.jsonl") if r["label"] == "stack" and r["phase"] == "measure"]
    assert requests and all(r["ok"] for r in requests), [r["error_detail"] for r in requests if not r["ok"]][:3]
    assert {r["output_tokens"] for r in requests} == {OUTPUT_TOKENS}
    assert all(r["prompt_tokens"] for r in requests)
    # the tables are filled for every level, and the layer's own queue is read from Triton's metrics
    for lv in s.levels:
        assert lv.baseline_tok_s > 0 and lv.stack_tok_s > 0 and lv.delta_pct is not None
        assert lv.stack_goodput is not None and lv.stack_ttft_p95_ms > 0
        assert any("tritonserver" in k for k in lv.stack_cpu_cores), lv.stack_cpu_cores
        assert any("triton_python_backend_stub" in k for k in lv.stack_cpu_cores), lv.stack_cpu_cores
    assert all("queue µs/request" in lv.server.layer for lv in s.runs["stack"].levels)
    # the report names the model that served, and holds it to no study of NVIDIA's backend
    assert s.shape == "layerbench's Python model modelled on NVIDIA's vLLM backend" and s.published is None
    report = tmp_path / "reports" / run.name
    md = (report / "report.md").read_text()
    assert f"triton ({s.shape})" in md and "single-GPU study" not in md
    for needle in ("Throughput (output tok/s)", "| 4 |", "Where the CPU went", "The layer's own metrics (triton)",
                   "nv_inference_queue_duration_us", "report_engine_metrics off"):
        assert needle in md, needle
    # the audit: no /metrics on the HTTP port, Triton's nv_* families on its metrics port, no vllm:* (default off)
    by_name = {e.name: e for e in s.audit.endpoints if e.label == "stack"}
    assert by_name["api"].status.startswith("no /metrics") and by_name["triton_metrics"].status == "200"
    assert by_name["triton_metrics"].prefixes.get("nv_", 0) >= 10
    assert {"nv_inference_queue_duration_us", "nv_inference_pending_request_count"} <= set(
        s.audit.layer_families["triton_metrics"])
    assert s.audit.counts.get("lost", 0) > 0 and not s.audit.counts.get("survives")
    # nothing of Triton is left: no process of the deployment, no /dev/shm file it created
    meta = json.loads((run / "run.json").read_text())
    for d in deployments(meta, "stack"):
        assert d["triton_model"] == s.shape and d["model_py"].endswith("scripts/triton_vllm_model.py")
        [applied_json] = Path(d["model_repository"]).glob("*/1/applied.json")
        applied = json.loads(applied_json.read_text())
        assert applied["response_thread"] is True  # the model that ran sends from its response thread
        assert applied["engine_builder"] == "build_async_engine_client_from_engine_args"
    pids = pids_of(meta, "stack")
    assert all(len(d["pids"]) >= 3 for d in deployments(meta, "stack"))  # server, Python stub, engine
    assert_gone(pids)
    left = orphans({n for n in shm() - shm_before if n.startswith(("triton", "psm_", "sem.mp-"))})
    assert not left, left
