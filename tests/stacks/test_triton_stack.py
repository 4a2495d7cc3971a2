"""The Triton adapter without a server: its model repository carries exactly the baseline's engine settings,
a missing setup or a held port is one clear message before anything starts, the layer's own metrics are
summarised per level as it declares them, and the audit looks at both engine-metric settings. Which model serves
(layerbench's, or a user's copy of NVIDIA's vLLM backend through TRITON_VLLM_MODEL) is named in the report, and
the study of NVIDIA's backend is set beside a run only when NVIDIA's backend served it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from harness.analysis.audit import audit_from_scrapes
from harness.analysis.server_metrics import summarise
from harness.errors import LayerbenchError
from harness.load.triton_client import TritonStreamClient
from harness.profile.loading import load_profile
from harness.profile.models import STUDY_MODEL
from harness.profile.schema import EngineSettings
from harness.reporting.report import _published
from harness.targets.remote_run import Where, skeleton
from stacks import triton
from stacks.base import DeploySettings, triton_repo
from stacks.base.engine_env import engine_args
from stacks.base.procs import ManagedProcess
from stacks.triton import TritonStack
from stacks.vllm import VllmStack


@pytest.fixture(autouse=True)
def _no_user_model(monkeypatch):
    monkeypatch.delenv("TRITON_VLLM_MODEL", raising=False)


def settings(tmp_path, target: str = "local", **options) -> DeploySettings:
    engine = EngineSettings(max_model_len=1024, max_num_seqs=8, dtype="float32", enforce_eager=True,
                            enable_prefix_caching=False)
    return DeploySettings(engine=engine, log_dir=tmp_path, options=options, target=target)


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


def nvidia_copy(tmp_path, utils: bool = True):
    """A stand-in for a copy of NVIDIA's backend's src/ folder: model.py importing its utils package."""
    src = tmp_path / "vllm_backend" / "src"
    (src / "utils").mkdir(parents=True)
    (src / "model.py").write_text("from utils.metrics import VllmStatLoggerFactory\n\nclass TritonPythonModel: ...\n")
    if utils:
        (src / "utils" / "metrics.py").write_text("class VllmStatLoggerFactory: ...\n")
        (src / "utils" / "__pycache__").mkdir()
    else:
        (src / "utils").rmdir()
    return src / "model.py"


def test_our_model_is_named_and_not_held_to_the_study(tmp_path):
    stack = TritonStack(settings(tmp_path))
    assert stack.shape() == "layerbench's Python model modelled on NVIDIA's vLLM backend"
    assert stack.published() is None  # the study measured NVIDIA's backend, not ours
    assert stack.describe()["model_py"] == str(triton.MODEL_PY)


def test_a_copy_of_nvidias_backend_is_served_from_its_own_layout(tmp_path, monkeypatch):
    model_py = nvidia_copy(tmp_path)
    monkeypatch.setenv("TRITON_VLLM_MODEL", str(model_py))
    stack = TritonStack(settings(tmp_path / "logs", report_engine_metrics=True))
    stack.write_repository()
    version = stack.model_dir / "1"
    assert (version / "model.py").read_text() == model_py.read_text()
    assert (version / "utils" / "metrics.py").exists() and not (version / "utils" / "__pycache__").exists()
    assert not (version / "engine.json").exists()
    engine = json.loads((version / "model.json").read_text())  # NVIDIA's engine-args file, as in its samples
    assert "report_engine_metrics" not in engine
    assert {k: v for k, v in stack.engine_spec().items() if k != "report_engine_metrics"} == engine
    config = (stack.model_dir / "config.pbtxt").read_text()
    # the Python backend loads the copy in the version directory; the model completes its own inputs/outputs
    assert 'backend: "python"' in config and "input [" not in config and "kind: KIND_CPU" in config
    assert 'key: "REPORT_CUSTOM_METRICS"' in config and 'string_value: "true"' in config
    assert stack.shape() == f"NVIDIA's vLLM backend ({model_py})"
    assert stack.describe()["model_py"] == str(model_py.resolve())
    assert "REPORT_CUSTOM_METRICS" in stack.observability_note()
    p = stack.published()
    assert p is not None and p.source == "The single-GPU study of Triton's vLLM backend"
    off = TritonStack(settings(tmp_path / "off"))
    assert "REPORT_CUSTOM_METRICS" not in off.config_pbtxt()


@pytest.mark.parametrize("where", ["missing.py", "a-folder"])
def test_a_user_model_that_is_not_a_file_is_refused_before_anything_deploys(tmp_path, monkeypatch, where):
    (tmp_path / "a-folder").mkdir()
    monkeypatch.setenv("TRITON_VLLM_MODEL", str(tmp_path / where))
    started: list[str] = []
    monkeypatch.setattr(ManagedProcess, "start", lambda self: started.append(self.name))
    with pytest.raises(LayerbenchError, match=f"TRITON_VLLM_MODEL={tmp_path / where} is not a file") as e:
        TritonStack(settings(tmp_path))
    assert "unset TRITON_VLLM_MODEL" in str(e.value)
    assert started == [] and not list(tmp_path.glob("triton-repo-*"))


def test_a_copy_without_its_utils_package_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_VLLM_MODEL", str(nvidia_copy(tmp_path, utils=False)))
    with pytest.raises(LayerbenchError, match="utils.*missing: copy the backend's src/ folder whole"):
        TritonStack(settings(tmp_path))


@pytest.mark.parametrize("target", ["docker", "k8s"])
def test_remote_targets_serve_the_images_backend_and_carry_the_study(tmp_path, monkeypatch, target):
    stack = TritonStack(settings(tmp_path, target=target))
    assert stack.shape() == "NVIDIA's vLLM backend (the Triton image's)"
    summary = skeleton(stack, load_profile("default"), "r1", 1, Where(target, *STUDY_MODEL))
    assert summary.shape == stack.shape()  # the report's title and headline name it
    assert summary.published is not None
    [line] = _published(summary)
    assert line.startswith("- The single-GPU study of Triton's vLLM backend measured -12.6% at c=64")
    monkeypatch.setenv("TRITON_VLLM_MODEL", str(nvidia_copy(tmp_path)))
    with pytest.raises(LayerbenchError, match=f"the {target} target serves the vLLM backend in NVIDIA's"):
        TritonStack(settings(tmp_path, target=target))


def test_a_local_run_of_our_model_carries_no_study(tmp_path):
    summary = skeleton(TritonStack(settings(tmp_path)), load_profile("default"), "r1", 1, Where("local", *STUDY_MODEL))
    assert summary.published is None and _published(summary) == []
    assert summary.shape == triton_repo.OURS


def test_the_client_asks_for_the_counts_nvidias_backend_sends_only_on_request():
    body = TritonStreamClient("http://127.0.0.1:1", "tiny", max_tokens=4).body("hi")
    assert body["return_num_input_tokens"] is True and body["return_num_output_tokens"] is True
    config = TritonStack(settings(Path("/nonexistent"))).config_pbtxt()  # ours declares them, and always counts
    assert 'name: "return_num_output_tokens"' in config and 'name: "return_num_input_tokens"' in config


@pytest.mark.parametrize("target", ["docker", "k8s"])
def test_the_remote_forms_serve_the_backend_the_report_names(tmp_path, target):
    # the report says NVIDIA's image serves its own vLLM backend there (and sets the study beside the run): the
    # rendered repository must name that backend and ship no model.py of ours
    from harness.targets.k8s.plan import ClusterSettings
    from harness.targets.k8s.render_triton import repository_files

    stack = TritonStack(settings(tmp_path, target=target))
    cs = ClusterSettings(model="Qwen/Qwen2.5-0.5B-Instruct", model_revision="7ae557604adf67be50417f59c2c2f167def9a775")
    files = repository_files(stack, cs)
    [config] = [text for path, text in files.items() if path.endswith("config.pbtxt")]
    assert stack.model.nvidia and 'backend: "vllm"' in config, config
    assert not any(path.endswith("model.py") for path in files)
