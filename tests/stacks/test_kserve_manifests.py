"""KServe RawDeployment objects: rendered from manifests/kserve/, valid against the real CRDs (strictly: a
mistyped field is an error), safe by the manifest policy, and the local `raw` process is exactly the predictor
pod's: the runtime's command and args, then the model's args (the baseline's engine flags), its env."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.targets.k8s.crds import validate
from harness.targets.k8s.manifest_policy import check_manifest
from stacks.base import DeploySettings
from stacks.base.engine_env import engine_args, engine_kwargs
from stacks.base.kserve_manifests import pod_process, render
from stacks.kserve import KSERVE_VENV, KServeStack
from stacks.vllm import VllmStack


def objects(**kw):
    s = DeploySettings()
    return render(s, engine_args(s), name="tiny", **kw)


def test_rendered_objects_are_valid_against_the_crds():
    runtime, isvc = objects()
    assert (runtime["kind"], isvc["kind"]) == ("ServingRuntime", "InferenceService")
    assert validate(runtime) == [] and validate(isvc) == []
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"


def test_a_wrong_field_is_rejected():
    runtime, isvc = objects()
    isvc["spec"]["predictor"]["minReplica"] = 1  # the field is minReplicas
    runtime["spec"]["containers"][0]["args"] = "--port=8080"  # a string where the schema wants a list
    assert validate(isvc) == ["InferenceService/tiny: spec.predictor: Additional properties are not allowed "
                              "('minReplica' was unexpected)"]
    assert any("containers.0.args" in e and "not of type 'array'" in e for e in validate(runtime))


def test_a_missing_crd_is_named(tmp_path):
    with pytest.raises(LayerbenchError, match="no CRD for InferenceService serving.kserve.io/v1beta1"):
        validate(objects()[1], tmp_path)


def test_rendered_objects_pass_the_safety_policy():
    assert check_manifest(objects()) == []


def test_the_local_process_is_the_pods():
    runtime, isvc = objects()
    cmd, env = pod_process(runtime, isvc, Path("/models/tiny"), 18123)
    flags = engine_args(DeploySettings())
    assert cmd[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    # the runtime's args first, then the model's (how KServe merges them), with the pod's path and port replaced
    assert cmd[3:7] == ["--port=18123", "--served-model-name=tiny", "--model=/models/tiny", "--no-enable-log-requests"]
    assert cmd[7:-1] == flags and cmd[-1] == "--host=127.0.0.1"
    assert env == {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def test_kserve_stack_is_measured_against_bare_vllm_from_the_same_environment(tmp_path):
    stack = KServeStack(DeploySettings(log_dir=tmp_path))
    base = stack.baseline()
    assert isinstance(base, VllmStack) and type(base) is VllmStack and base.venv == stack.venv
    assert stack.in_request_path is False and stack.options.mode == "raw"


def test_kserve_data_plane_modes_run_the_baselines_engine_settings_from_the_kserve_environment(tmp_path):
    settings = DeploySettings(log_dir=tmp_path, options={"mode": "inprocess"})
    stack = KServeStack(settings)
    assert stack.in_request_path is True and stack.venv == KSERVE_VENV == stack.baseline().venv
    assert stack.endpoint().base_url.endswith(f":{stack.port}/openai")  # KServe's OpenAI routes
    assert stack.metric_endpoints() == {"api": f"http://127.0.0.1:{stack.port}/metrics"}  # at KServe's root
    spec = stack.server_config()["engine"]
    assert spec == {"model": str(settings.model_path), "served_model_name": "tiny",
                    **engine_kwargs(settings, "x")}
    proxy = KServeStack(DeploySettings(log_dir=tmp_path, options={"mode": "proxy"}))
    up = proxy.engine.endpoint().base_url
    assert proxy.server_config(up)["predictor_url"] == up  # the front is told where its engine is
    assert set(proxy.metric_endpoints()) == {"api", "engine"}  # where vllm:* stays: the engine's own port


def test_without_the_sdk_nothing_is_started(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(VllmStack, "deploy", lambda self: started.append(self))
    monkeypatch.setattr(KServeStack, "start", lambda self, *a, **k: started.append(self))
    stack = KServeStack(DeploySettings(log_dir=tmp_path, model_path=tmp_path, options={"mode": "proxy"}))
    stack.venv = tmp_path / "no-venv"
    with pytest.raises(LayerbenchError, match="run `make setup-kserve`"):
        stack.deploy()
    assert started == []  # not even the bare vLLM behind the proxy
