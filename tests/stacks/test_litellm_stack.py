"""LiteLLM's proxy as a stack: its config sends completions to the bare vLLM behind it through the `openai`
provider, it binds loopback, its own /metrics is audited beside the engine's, its options are typed, and its
k8s form passes the validators."""

from __future__ import annotations

import json

import pytest

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.validate import plan_problems
from stacks.base import DeploySettings, get_stack

RUN = "20261201-101010-compare-litellm-abc123"
PROFILE = load_profile("quick")


def litellm(tmp_path=None, **options):
    kw = {"log_dir": tmp_path} if tmp_path else {}
    return get_stack("litellm")(DeploySettings(engine=PROFILE.engine, options=options, **kw))


def test_the_config_routes_the_served_model_to_the_engines_completions(tmp_path):
    s = litellm(tmp_path)
    (model,) = s.config("http://127.0.0.1:8123")["model_list"]
    assert model["model_name"] == s.settings.served_model_name
    # `openai/<name>`: the prompt reaches vLLM's own /v1/completions as a prompt, not as chat messages
    assert model["litellm_params"]["model"] == f"openai/{s.settings.served_model_name}"
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:8123/v1"
    settings = s.config("http://x")["litellm_settings"]
    assert "prometheus" in settings["callbacks"] and settings["require_auth_for_metrics_endpoint"] is False
    assert settings["num_retries"] == 0  # a failed request is one failure, not a retry out of sight


def test_the_front_binds_loopback_and_reads_its_config_from_the_run(tmp_path, monkeypatch):
    import stacks.litellm as mod

    exe = tmp_path / "venv" / "bin" / "litellm"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.setattr(mod, "LITELLM_VENV", tmp_path / "venv")
    s = litellm(tmp_path, num_workers=2)
    cmd, env = s.front_command("http://127.0.0.1:8123")
    assert cmd[0] == str(exe) and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == str(s.port) and cmd[cmd.index("--num_workers") + 1] == "2"
    config = json.loads(open(cmd[cmd.index("--config") + 1]).read())
    assert config["model_list"][0]["litellm_params"]["api_base"] == "http://127.0.0.1:8123/v1"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # no network at start


def test_a_missing_install_names_the_setup_target(tmp_path, monkeypatch):
    import stacks.litellm as mod

    monkeypatch.setattr(mod, "LITELLM_VENV", tmp_path / "none")
    with pytest.raises(LayerbenchError, match="make setup-litellm"):
        litellm(tmp_path / "logs").front_command("http://127.0.0.1:1")
    assert not (tmp_path / "logs").exists()  # nothing written for a deployment that cannot start


def test_its_metrics_and_the_engines_are_both_audited():
    s = litellm()
    ends = s.metric_endpoints()
    assert ends["api"] == f"{s.endpoint().base_url}/metrics/"  # litellm_* on its own port (/metrics redirects)
    assert ends["engine"] == f"{s.engine.endpoint().base_url}/metrics"  # vllm:* behind it
    assert s.baseline().kind == "vllm" and s.ready_url().endswith("/health/readiness")


@pytest.mark.parametrize(("option", "value"), [("num_workers", 0), ("num_workers", "two"), ("image", "")])
def test_bad_options_are_refused(option, value):
    with pytest.raises(LayerbenchError, match=f"stack litellm: option {option}"):
        litellm(**{option: value})


def test_the_k8s_form_is_the_engine_and_litellm_with_its_config_and_passes_the_validators():
    cs = ClusterSettings(model="Qwen/Qwen2.5-0.5B-Instruct", model_revision="main")
    s = get_stack("litellm")(DeploySettings(engine=PROFILE.engine, target="k8s"))
    p = render_plan(s, PROFILE, cs, RUN, LoadCommand("compare", 1))
    assert [x.stack for x in p.sides] == ["vllm", "litellm"]
    assert plan_problems(p, cs.k8s_version) == []
    side = p.sides[1]
    names = [(o["kind"], o["metadata"]["name"]) for o in side.objects]
    assert names[-3:] == [("ConfigMap", "lb-stack-litellm-abc123-config"), ("Deployment", "lb-stack-litellm-abc123"),
                          ("Service", "lb-stack-litellm-abc123")]
    config = json.loads(side.objects[-3]["data"]["config.yaml"])
    assert config["model_list"][0]["litellm_params"]["api_base"] == (
        "http://lb-stack-vllm-abc123.layerbench.svc.cluster.local:8000/v1")
    pod = side.objects[-2]["spec"]["template"]["spec"]
    (front,) = pod["containers"]
    assert front["image"] == "ghcr.io/berriai/litellm:main-v1.108.7" and "nvidia.com/gpu" not in str(front)
    # the load Job scrapes the gateway's own port and the engine's behind it
    job = json.dumps(side.load_job)
    assert "api=http://lb-stack-litellm-abc123.layerbench.svc.cluster.local:4000/metrics/" in job
    assert "engine=http://lb-stack-vllm-abc123.layerbench.svc.cluster.local:8000/metrics" in job
