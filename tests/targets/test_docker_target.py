"""The docker target as rendered text: `docker run` lines of the official images, one side after the other,
each server in its own network namespace without published ports and the load client joining it; the same
engine settings on both sides; commands that would leave a namespace or gain privileges are refused."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.host import gpus
from harness.profile.loading import load_profile
from harness.targets.k8s.common import gpu_engine_args
from harness.targets.k8s.docker import command_problems, render_docker, script, write_docker
from harness.targets.k8s.plan import ClusterSettings
from stacks.base import DeploySettings, get_stack

RUN = "20261201-101010-compare-ray-abc123"


def settings(**kw) -> ClusterSettings:
    """These tests' cluster: a small model on a branch revision (resolved offline from the cache's refs)."""
    return ClusterSettings(**{"model": "Qwen/Qwen2.5-0.5B-Instruct", "model_revision": "main", **kw})

PROFILE = load_profile("quick")
CS = settings()
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"


@pytest.fixture(autouse=True)
def rendered_away_from_the_gpu_host(monkeypatch):
    """No GPU host here unless a test says so (another test may have left a fake one cached)."""
    monkeypatch.setattr(gpus, "host_gpus", lambda: None)


def render(kind: str, command: str = "compare", cs: ClusterSettings = CS, **options):
    s = get_stack(kind)(DeploySettings(engine=PROFILE.engine, target="docker", options=options))
    return render_docker(s, PROFILE, cs, RUN, command, repeats=2)


def image_args(argv: list[str], image: str) -> list[str]:
    return argv[argv.index(image) + 1:]


@pytest.mark.parametrize(("kind", "options", "image", "baseline"), [
    ("vllm", {}, "vllm/vllm-openai:v0.32.0", "0.32.0"), ("ray", {}, CS.ray_image, "0.29.0"),
    ("triton", {}, CS.triton_image, "0.11.1"), ("kserve", {}, "vllm/vllm-openai:v0.32.0", "0.32.0"),
    ("kserve", {"mode": "inprocess"}, CS.kserve_hf_image, "0.24.0")])
def test_every_stack_renders_valid_commands(kind, options, image, baseline):
    """The baseline runs the vLLM its stack's image bundles (Ray 2.60: 0.29.0, KServe 0.21's runtime: 0.24.0,
    Triton 25.12: NVIDIA's build of 0.11.1); each server gets the first GPU by its index."""
    plan = render(kind, **options)
    assert [(s.label, s.stack) for s in plan.sides] == [("baseline", "vllm"), ("stack", kind)]
    assert command_problems(plan, CS) == []
    base, side = plan.sides
    assert base.image == f"vllm/vllm-openai:v{baseline}" and side.image == image
    for s in plan.sides:
        assert s.load[s.load.index("--network") + 1] == f"container:{s.server}"
        assert not any(a == "host" or a.endswith("=host") for a in s.run + s.load)  # no host network, pid, ipc
        assert "-p" not in s.run and "--publish" not in s.run and "--privileged" not in s.run
        assert s.run[s.run.index("--gpus") + 1] == '"device=0"'
    text = script(plan, CS, f"compare --stack {kind}")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0  # the script parses
    assert text.index(base.server) < text.index(side.server)  # the baseline first, one GPU


def test_bare_vllm_and_the_kserve_raw_runtime_get_the_same_engine_flags():
    plan = render("kserve")
    flags = gpu_engine_args(get_stack("kserve")(DeploySettings(engine=PROFILE.engine)).settings)
    base = image_args(plan.sides[0].run, plan.sides[0].image)
    raw = image_args(plan.sides[1].run, plan.sides[1].image)
    assert base[:2] == ["-m", "vllm.entrypoints.openai.api_server"] and raw[:2] == base[:2]
    assert plan.sides[0].run[plan.sides[0].run.index("--entrypoint") + 1] == "python3"
    assert " ".join(flags) in " ".join(base) and " ".join(flags) in " ".join(raw)
    # the runtime's own args, the pod's model directory replaced by the cache, bound to loopback
    assert "--no-enable-log-requests" in raw and "--model=Qwen/Qwen2.5-0.5B-Instruct" in raw
    assert "--host=127.0.0.1" in raw and "--port=8080" in raw and "--revision=main" in raw
    assert "-e" in plan.sides[1].run and "HF_HUB_OFFLINE=1" in plan.sides[1].run


def test_ray_serve_config_and_readiness():
    plan = render("ray", ingress_replicas=1)
    config = yaml.safe_load(plan.files["stack-ray-serve.yaml"])
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8000}
    assert config["applications"][0]["args"]["ingress_deployment_config"]["num_replicas"] == 1
    side = plan.sides[1]
    # Ray 2.60 picks a random metrics port unless told (RayParams.metrics_export_port defaults to None): the
    # container starts Ray on the port the scrape reads, then deploys on that Ray
    assert side.run[side.run.index("--entrypoint") + 1] == "bash"
    (script,) = image_args(side.run, side.image)[1:]
    port = next(int(t.split("=", 1)[1]) for t in script.split() if t.startswith("--metrics-export-port="))
    assert script.startswith("ray start --head ") and script.endswith("exec serve run --address=auto "
                                                                      "/home/ray/serve.yaml"), script
    endpoints = next(a for a in side.load if a.startswith("metric_endpoints="))
    assert f"ray_metrics=http://127.0.0.1:{port}/metrics" in endpoints, endpoints
    url, body = side.ready
    assert url.endswith("/v1/completions") and '"max_tokens": 1' in body  # a completion, not just the ingress


# rayproject/ray-llm's image (ray-project/ray docker/ray-llm/Dockerfile): `ENV VLLM_USE_FLASHINFER_SAMPLER=0`;
# vllm/vllm-openai's sets no such variable
RAY_LLM_IMAGE_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


def test_rays_baseline_runs_its_engine_with_the_engine_settings_rays_image_sets():
    base, layer = render("ray").sides
    for key, value in RAY_LLM_IMAGE_ENV.items():
        assert f"{key}={value}" in base.run, base.run  # set on the bare vLLM; Ray's own image sets it already
    other, _ = render("vllm").sides
    assert not any(a.startswith("VLLM_USE_FLASHINFER_SAMPLER=") for a in other.run)  # A/A: neither side


def test_triton_mounts_its_model_repository_and_loads_through_generate_stream():
    plan = render("triton")
    assert set(plan.files) == {"profile.yaml", "stack-triton-repo/qwen2.5-0.5b-instruct/config.pbtxt",
                               "stack-triton-repo/qwen2.5-0.5b-instruct/1/model.json"}
    side = plan.sides[1]
    assert "$RUN_DIR/stack-triton-repo:/models" in side.run
    assert "--http-address=127.0.0.1" in side.run
    assert side.load[-8:-4] == ["--opt", "protocol=triton", "--opt", "model=qwen2.5-0.5b-instruct"]
    # Triton's own port only, as locally: the serving port has no /metrics (Triton's docs/user_guide/metrics.md)
    assert side.load[-3] == "metric_endpoints=triton_metrics=http://127.0.0.1:8002/metrics"


def test_kserve_inprocess_loads_through_kserves_openai_routes():
    side = render("kserve", mode="inprocess").sides[1]
    assert side.load[side.load.index("--url") + 1] == "http://127.0.0.1:8080/openai"
    assert "--backend=vllm" in side.run and "--model_id=Qwen/Qwen2.5-0.5B-Instruct" in side.run


def test_kserve_inprocess_serves_a_commit_from_its_snapshot_directory():
    """Offline, KServe's vLLM check reads the config by repo id without a revision (refs/main), which a cache
    filled at a commit lacks: the runtime gets the snapshot directory inside the mounted cache."""
    side = render("kserve", cs=settings(model_revision=COMMIT), mode="inprocess").sides[1]
    args = image_args(side.run, side.image)
    snapshot = f"/mnt/hf-cache/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}"
    assert f"--model_dir={snapshot}" in args and args.index(f"--model_dir={snapshot}") < args.index("--backend=vllm")
    assert not [a for a in args if a.startswith(("--model_id", "--model_revision"))]
    assert "$HF_CACHE:/mnt/hf-cache:ro" in side.run  # the whole cache: the snapshot's symlinks resolve


@pytest.mark.parametrize("kind", ["vllm", "ray", "triton", "kserve"])
def test_each_server_gets_exactly_the_gpus_named(kind):
    """GPUS=2,3 (engine.gpus) with tensor parallelism 2: docker's device list names them, quoted as one CSV
    value (`--gpus 2` would take GPUs 0 and 1)."""
    engine = PROFILE.engine.model_copy(update={"gpus": [2, 3], "tensor_parallel_size": 2})
    s = get_stack(kind)(DeploySettings(engine=engine, target="docker"))
    plan = render_docker(s, PROFILE.model_copy(update={"engine": engine}), CS, RUN, "compare", repeats=1)
    for side in plan.sides:
        assert side.run[side.run.index("--gpus") + 1] == '"device=2,3"'
    start = f"docker run -d --name {plan.sides[1].server}"
    argv = shlex.split(next(x for x in script(plan, CS, "t").splitlines() if x.startswith(start)))
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'  # what bash hands docker


def test_on_the_gpu_host_the_devices_are_checked_against_it(monkeypatch):
    host = gpus.GpuHost(gpus=tuple(gpus.Gpu(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 81559) for i in range(4)),
                        driver="580.95.05", cuda="13.0", cuda_visible_devices="1,3")
    monkeypatch.setattr(gpus, "host_gpus", lambda: host)
    plan = render("vllm", command="run")  # no GPUS=: the first one CUDA_VISIBLE_DEVICES leaves
    assert plan.sides[0].run[plan.sides[0].run.index("--gpus") + 1] == '"device=1"'
    engine = PROFILE.engine.model_copy(update={"gpus": [7]})
    s = get_stack("vllm")(DeploySettings(engine=engine, target="docker"))
    with pytest.raises(LayerbenchError, match="GPUS names GPU 7, which does not exist"):
        render_docker(s, PROFILE, CS, RUN, "run")


@pytest.mark.parametrize(("where", "flag", "problem"), [
    ("run", ["--network", "host"], "server: --network host is not allowed"),
    ("run", ["--privileged"], "server: --privileged is not allowed"),
    ("run", ["-p", "8000:8000"], "server: -p is not allowed"),
    ("load", ["--pid=host"], "load client: --pid host is not allowed"),
    ("load", ["--network", "host"], "load client: --network host is not allowed"),
])
def test_a_command_leaving_its_namespace_is_refused(where, flag, problem):
    plan = render("vllm", command="run")
    argv = getattr(plan.sides[0], where)
    argv[2:2] = flag  # right after `docker run`
    assert any(p.endswith(problem) for p in command_problems(plan, CS)), command_problems(plan, CS)


def test_a_load_client_outside_the_servers_namespace_is_refused():
    plan = render("vllm", command="run")
    side = plan.sides[0]
    i = side.load.index("--network")
    del side.load[i:i + 2]
    assert command_problems(plan, CS) == [f"stack (vllm) load client: it must join the server's network namespace "
                                          f"(--network container:{side.server})"]


def test_write_docker_writes_the_script_and_its_files(tmp_path):
    plan = render("triton")
    paths = write_docker(plan, CS, "compare --stack triton", tmp_path)
    assert paths[0] == tmp_path / "commands.sh" and paths[0].stat().st_mode & 0o111
    text = paths[0].read_text()
    assert "set -euo pipefail" in text and "--network container:lb-stack-triton-abc123" in text
    assert (tmp_path / "stack-triton-repo/qwen2.5-0.5b-instruct/1/model.json").exists()
    assert load_profile(str(tmp_path / "profile.yaml")) == PROFILE  # the load uses the run's profile
    run_line = next(line for line in text.splitlines() if line.startswith("docker run -d --name lb-stack-triton"))
    assert shlex.split(run_line)[:4] == ["docker", "run", "-d", "--name"]


def test_cli_docker_dry_run_writes_the_commands(tmp_path, capsys):
    assert main(["compare", "--stack", "ray", "--target", "docker", "--dry-run", "--results-dir", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    assert (run / "docker" / "commands.sh").exists() and (run / "docker" / "stack-ray-serve.yaml").exists()
    assert str(run / "docker" / "commands.sh") in capsys.readouterr().out
    assert not (run / "run.json").exists()  # nothing ran


def test_cli_docker_without_a_daemon_writes_the_commands_and_says_how_to_run_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert main(["compare", "--stack", "vllm", "--target", "docker", "--results-dir", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    (run,) = tmp_path.iterdir()
    assert "no docker daemon answers `docker info` here" in out and f"make report RUN={run.name}" in out
    assert (run / "docker" / "commands.sh").exists() and (run / "compare-plan.json").exists()
    assert not (run / "compare.json").exists()  # nothing was measured
