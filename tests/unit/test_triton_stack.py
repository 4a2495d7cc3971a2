"""The Triton adapter without a server: its model repository carries exactly the baseline's engine settings,
a missing setup or a held port is one clear message before anything starts, the layer's own metrics are
summarised per level as it declares them, and the audit looks at both engine-metric settings."""

from __future__ import annotations

import json
import socket

import pytest

from harness.analysis.audit import audit_from_scrapes
from harness.analysis.server_metrics import summarise
from harness.errors import LayerbenchError
from harness.profile import EngineSettings
from stacks import triton
from stacks.base import DeploySettings
from stacks.engine_env import engine_args
from stacks.procs import ManagedProcess
from stacks.triton import TritonStack
from stacks.vllm import VllmStack


def settings(tmp_path, **options) -> DeploySettings:
    engine = EngineSettings(max_model_len=1024, max_num_seqs=8, dtype="float32", enforce_eager=True,
                            enable_prefix_caching=False)
    return DeploySettings(engine=engine, log_dir=tmp_path, options=options)


def test_repository_carries_the_baselines_engine_settings(tmp_path):
    stack = TritonStack(settings(tmp_path))
    stack.write_repository()
    config = (stack.model_dir / "config.pbtxt").read_text()
    assert "decoupled: true" in config and 'backend: "python"' in config
    for name in ("text_input", "stream", "sampling_parameters", "exclude_input_in_output", "num_output_tokens"):
        assert f'name: "{name}"' in config
    spec = json.loads((stack.model_dir / "1" / "engine.json").read_text())
    flags = engine_args(stack.settings)  # what the bare vLLM baseline is started with
    assert flags[flags.index("--max-model-len") + 1] == str(spec["max_model_len"]) == "1024"
    assert flags[flags.index("--max-num-seqs") + 1] == str(spec["max_num_seqs"]) == "8"
    assert flags[flags.index("--dtype") + 1] == spec["dtype"] == "float32"
    assert ("--enforce-eager" in flags) is spec["enforce_eager"] is True
    assert ("--no-enable-prefix-caching" in flags) is (not spec["enable_prefix_caching"]) is True
    assert spec["report_engine_metrics"] is False
    assert (stack.model_dir / "1" / "model.py").read_text() == triton.MODEL_PY.read_text()


def test_baseline_is_bare_vllm_from_the_triton_environment(tmp_path):
    base = TritonStack(settings(tmp_path, report_engine_metrics=True)).baseline()
    assert isinstance(base, VllmStack) and base.venv == triton.TRITON_VENV and base.settings.options == {}


def test_engine_cli_flags_are_refused(tmp_path):
    s = settings(tmp_path)
    s.engine.extra_args = ["--swap-space", "4"]
    with pytest.raises(LayerbenchError, match="extra_args"):
        TritonStack(s).engine_spec()


def test_missing_setup_says_make_setup_triton(tmp_path, monkeypatch):
    monkeypatch.setattr(triton, "TRITON_VENV", tmp_path / "no-venv")
    started: list[str] = []
    monkeypatch.setattr(ManagedProcess, "start", lambda self: started.append(self.name))
    with pytest.raises(LayerbenchError, match="make setup-triton"):
        TritonStack(settings(tmp_path)).deploy()
    assert started == []


def test_old_glibc_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(triton.os, "confstr", lambda name: "glibc 2.31")
    with pytest.raises(LayerbenchError, match="glibc >= 2.35.*2.31"):
        triton.triton_paths()


def test_a_held_port_is_refused_not_taken(tmp_path, monkeypatch):
    started: list[str] = []
    monkeypatch.setattr(ManagedProcess, "start", lambda self: started.append(self.name))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(LayerbenchError, match=f"port {port} on 127.0.0.1 is already in use"):
            TritonStack(settings(tmp_path, port=port)).deploy()
        assert started == []
        held.getsockname()  # still ours


def test_audit_covers_both_engine_metric_settings(tmp_path):
    default = TritonStack(settings(tmp_path))
    [(label, on)] = default.audit_shapes()
    assert isinstance(on, TritonStack) and on.options.report_engine_metrics is True
    assert "off" in default.observability_note() and "on:" in on.observability_note()
    assert TritonStack(settings(tmp_path, report_engine_metrics=False)).audit_shapes() == []  # the user chose


def nv_scrape(t: float, queue_us: float, success: float, pending: float, exec_us: float) -> dict:
    labels = "model=tiny,version=1"
    samples = {f"nv_inference_queue_duration_us{{{labels}}}": queue_us,
               f"nv_inference_request_success{{{labels}}}": success,
               f"nv_inference_pending_request_count{{{labels}}}": pending,
               f"nv_inference_request_duration_us{{{labels}}}": exec_us}
    return {"t": t, "endpoint": "triton_metrics", "url": "http://127.0.0.1:2/metrics", "ok": True, "label": "stack",
            "families": {k.split("{", 1)[0]: "counter" for k in samples}, "samples": samples, "level": 4}


def test_layer_metrics_per_level(tmp_path):
    declared = TritonStack(settings(tmp_path)).layer_metrics()
    s = summarise([nv_scrape(0, 1000, 10, 0, 5000), nv_scrape(1, 50_000, 110, 3, 25_000)], (), declared)
    assert s.layer == {"queue µs/request": pytest.approx(490.0), "pending peak": 3.0,
                       "execute() µs/request": pytest.approx(200.0)}
    assert summarise([nv_scrape(0, 1000, 10, 0, 5000)], (), ()).layer == {}  # nothing declared, nothing guessed
    # the default policy scrapes only at the window's edges, where the queue is idle: no peak is claimed
    edges = [nv_scrape(0, 1000, 10, 0, 5000) | {"phase": "start"},
             nv_scrape(1, 50_000, 110, 3, 25_000) | {"phase": "end"}]
    at_edges = summarise(edges, (), declared).layer
    assert "pending peak" not in at_edges and at_edges["queue µs/request"] == pytest.approx(490.0)


def test_audit_lists_the_layers_own_families():
    base = {"t": 0, "endpoint": "api", "url": "u", "ok": True, "label": "baseline", "level": None,
            "families": {"vllm:num_requests_running": "gauge", "python_info": "gauge"}, "samples": {}}
    stack = nv_scrape(0, 1, 1, 0, 1) | {"families": {"nv_inference_count": "counter", "python_info": "gauge",
                                                     "vllm:num_requests_running": "gauge"}}
    a = audit_from_scrapes([base, stack], {}, "triton", (), "report_engine_metrics on: ...")
    assert a.layer_families == {"triton_metrics": ["nv_inference_count"]}
    assert a.notes[0].startswith("report_engine_metrics on") and a.counts == {"survives": 1}
