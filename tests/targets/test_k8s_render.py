"""The k8s target's rendering: per stack the objects a side applies (the official images on a GPU, the same
engine settings on both sides), what gates the load, the in-cluster address, the load Job, and that every
rendered object passes the three validators (Kubernetes schemas, CRDs, safety policy)."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.common import gpu_engine_args
from harness.targets.k8s.plan import ClusterSettings, K8sPlan
from harness.targets.k8s.render import render_plan, write_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.validate import plan_problems
from stacks.base import DeploySettings, get_stack

RUN = "20261201-101010-compare-ray-abc123"


def settings(**kw) -> ClusterSettings:
    """These tests' cluster: a small model on a branch revision (resolved offline from the cache's refs)."""
    return ClusterSettings(**{"model": "Qwen/Qwen2.5-0.5B-Instruct", "model_revision": "main", **kw})

COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
PROFILE = load_profile("quick")


def stack(kind: str, **options):
    return get_stack(kind)(DeploySettings(engine=PROFILE.engine, target="k8s", options=options))


def plan(kind: str, cs: ClusterSettings | None = None, command: str = "compare", **options) -> K8sPlan:
    return render_plan(stack(kind, **options), PROFILE, cs or settings(), RUN, LoadCommand(command, 2))


def by_kind(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def containers(pod_spec: dict) -> dict[str, dict]:
    return {c["name"]: c for c in pod_spec.get("initContainers", []) + pod_spec["containers"]}


# --- every stack, every validator -----------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "options"), [("vllm", {}), ("ray", {}), ("triton", {}), ("kserve", {}),
                                               ("kserve", {"mode": "inprocess"}), ("kserve", {"mode": "proxy"})])
@pytest.mark.parametrize("cs", [settings(), settings(
    runtime_class="nvidia", hf_token_secret="hf-token", model_revision=COMMIT, kserve_storage="pvc",
    results_pvc="results", gpus=2)], ids=["defaults", "everything-set"])
def test_every_rendered_object_passes_the_validators(kind, options, cs):
    p = plan(kind, cs, **options)
    assert [s.label for s in p.sides] == ["baseline", "stack"]
    assert [s.stack for s in p.sides] == ["vllm", kind]
    assert plan_problems(p, cs.k8s_version) == []


def test_run_deploys_the_stack_alone_and_names_are_unique_per_side():
    assert [s.label for s in plan("ray", command="run").sides] == ["stack"]
    aa = plan("vllm")  # A/A: the same stack on both sides must not collide
    names = [(o["kind"], o["metadata"]["name"]) for s in aa.sides for o in [*s.objects, s.load_job]]
    assert len(names) == len(set(names))
    assert {s.engine_selector for s in aa.sides} == {
        f"app.kubernetes.io/managed-by=layerbench,layerbench.io/run={RUN},layerbench.io/side={side},"
        "layerbench.io/role=engine" for side in ("baseline", "stack")}


# --- bare vLLM -----------------------------------------------------------------------------------------

def test_bare_vllm_deployment():
    cs = settings(runtime_class="nvidia", hf_token_secret="hf-token", model_revision=COMMIT)
    side = plan("vllm", cs).sides[0]
    dep, svc = by_kind(side.objects, "Deployment"), by_kind(side.objects, "Service")
    pod = dep["spec"]["template"]["spec"]
    c = containers(pod)["vllm"]
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert c["image"] == "vllm/vllm-openai:v0.32.0"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    snapshot = f"/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}"
    assert c["args"][:2] == ["--model", snapshot] and "--revision" not in c["args"]
    assert c["args"][-len(gpu_engine_args(stack("vllm").settings)):] == gpu_engine_args(stack("vllm").settings)
    assert "--gpu-memory-utilization" in c["args"]  # a GPU flag, whatever this host has
    # the whole cache is mounted (snapshot files are symlinks into ../../blobs), read-only
    assert {"name": "hf-cache", "mountPath": "/root/.cache/huggingface", "readOnly": True} in c["volumeMounts"]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}} in pod["volumes"]
    assert c["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and not c["securityContext"]["privileged"]
    assert "hostNetwork" not in pod and pod["runtimeClassName"] == "nvidia"
    token = next(e for e in c["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "HF_TOKEN", "optional": True}
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"] == pod_labels(dep)
    assert side.ready == [("Deployment", "lb-baseline-vllm-abc123")]
    assert side.url == "http://lb-baseline-vllm-abc123.layerbench.svc.cluster.local:8000"


def pod_labels(dep: dict) -> dict:
    return dep["spec"]["template"]["metadata"]["labels"]


def test_a_branch_revision_is_resolved_offline_from_the_cache():
    c = containers(by_kind(plan("vllm").sides[0].objects, "Deployment")["spec"]["template"]["spec"])["vllm"]
    assert c["args"][:4] == ["--model", "Qwen/Qwen2.5-0.5B-Instruct", "--revision", "main"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"]
    assert "runtimeClassName" not in by_kind(plan("vllm").sides[0].objects, "Deployment")["spec"]["template"]["spec"]


def test_no_gpu_leaves_no_gpu_resource():
    c = containers(by_kind(plan("vllm", settings(gpus=0)).sides[0].objects,
                           "Deployment")["spec"]["template"]["spec"])["vllm"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]


# --- Ray -----------------------------------------------------------------------------------------------

def test_rayservice_has_the_local_serve_shape():
    side = plan("ray", ingress_replicas=3, max_ongoing_requests=64, stream_batching_interval_ms=0).sides[1]
    svc = by_kind(side.objects, "RayService")
    assert svc["apiVersion"] == "ray.io/v1"
    app = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app" and app["route_prefix"] == "/"
    (llm,) = app["args"]["llm_configs"]
    assert app["args"]["ingress_deployment_config"] == {"num_replicas": 3, "max_ongoing_requests": 64}
    assert llm["deployment_config"] == {"num_replicas": 1, "max_ongoing_requests": 64}
    assert llm["experimental_configs"] == {"stream_batching_interval_ms": 0.0}
    e = PROFILE.engine
    assert llm["engine_kwargs"] == {"max_model_len": e.max_model_len, "max_num_seqs": e.max_num_seqs,
                                    "dtype": e.dtype, "enforce_eager": e.enforce_eager,
                                    "tensor_parallel_size": e.tensor_parallel_size,
                                    "enable_prefix_caching": e.enable_prefix_caching,
                                    "gpu_memory_utilization": e.gpu_memory_utilization, "revision": "main"}
    cluster = svc["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.60.0"
    head = containers(cluster["headGroupSpec"]["template"]["spec"])["ray-head"]
    (group,) = cluster["workerGroupSpecs"]
    worker = containers(group["template"]["spec"])["ray-worker"]
    assert head["image"] == worker["image"] == "rayproject/ray-llm:2.60.0-py312-cu130"
    assert "nvidia.com/gpu" not in head["resources"]["limits"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert {"name": "serve", "containerPort": 8000, "protocol": "TCP"} in head["ports"]
    assert side.url == "http://lb-stack-ray-abc123-serve-svc.layerbench.svc.cluster.local:8000"
    assert side.ready == [("RayService", "lb-stack-ray-abc123")]
    assert "layerbench.io/role=engine" in side.engine_selector  # the GPU worker's pods
    assert group["template"]["metadata"]["labels"]["layerbench.io/role"] == "engine"


def test_rays_baseline_deployment_gets_the_engine_settings_rays_image_sets():
    """rayproject/ray-llm sets VLLM_USE_FLASHINFER_SAMPLER=0 (ray-project/ray docker/ray-llm/Dockerfile), the bare
    vllm/vllm-openai baseline does not: the baseline's pod gets it, so the sides differ by the layer."""
    base = plan("ray").sides[0]
    (dep,) = [o for o in base.objects if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0", env
    (dep,) = [o for o in plan("vllm").sides[0].objects if o["kind"] == "Deployment"]
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]
                                                ["env"]}


def test_extra_vllm_flags_cannot_reach_ray():
    s = get_stack("ray")(DeploySettings(engine=PROFILE.engine.model_copy(update={"extra_args": ["--x"]})))
    with pytest.raises(LayerbenchError, match="extra_args"):
        render_plan(s, PROFILE, settings(), RUN, LoadCommand("compare"))


# --- Triton --------------------------------------------------------------------------------------------

def test_triton_serves_nvidias_vllm_backend_from_a_configmap_repository():
    side = plan("triton").sides[1]
    repo = next(o for o in side.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-model"))
    dep = by_kind(side.objects, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    source = next(v for v in pod["volumes"] if v["name"] == "model-source")["configMap"]
    assert source["name"] == repo["metadata"]["name"]
    model = "qwen2.5-0.5b-instruct"
    assert {i["key"]: i["path"] for i in source["items"]} == {
        "config.pbtxt": f"{model}/config.pbtxt", "model.json": f"{model}/1/model.json"}  # no model.py of ours
    config = repo["data"]["config.pbtxt"]
    assert f'name: "{model}"' in config and 'backend: "vllm"' in config and "REPORT_CUSTOM_METRICS" not in config
    spec = json.loads(repo["data"]["model.json"])
    e = PROFILE.engine
    assert spec["model"] == "Qwen/Qwen2.5-0.5B-Instruct" and spec["revision"] == "main"
    assert (spec["max_model_len"], spec["max_num_seqs"], spec["dtype"]) == (e.max_model_len, e.max_num_seqs, e.dtype)
    assert spec["gpu_memory_utilization"] == e.gpu_memory_utilization and "report_engine_metrics" not in spec
    c = containers(pod)
    assert c["tritonserver"]["image"] == "nvcr.io/nvidia/tritonserver:25.12-vllm-python-py3"
    assert "--model-repository=/models" in c["tritonserver"]["args"]
    assert c["tritonserver"]["readinessProbe"]["httpGet"]["path"] == f"/v2/models/{model}/ready"
    assert "cp -rL /model-source/. /models/" in c["model-repository"]["command"][-1]  # the model writes beside itself
    assert (side.protocol, side.url) == ("triton", "http://lb-stack-triton-abc123.layerbench.svc.cluster.local:8000")
    args = side.load_job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-8:-4] == ["--opt", "protocol=triton", "--opt", f"model={model}"]
    # the load reads Triton's own metrics port, as the local stack does, and not the serving port: Triton serves
    # metrics on 8002 only (triton-inference-server/server docs/user_guide/metrics.md), :8000/metrics is a 404
    svc = f"http://{side.url.split('//')[1].split(':')[0]}"
    assert args[-4:-2] == ["--opt", f"metric_endpoints=triton_metrics={svc}:8002/metrics"]


def test_triton_engine_metrics_option_reaches_the_engine_spec():
    side = plan("triton", report_engine_metrics=True).sides[1]
    repo = next(o for o in side.objects if o["metadata"]["name"].endswith("-model"))
    assert "REPORT_CUSTOM_METRICS" in repo["data"]["config.pbtxt"]  # NVIDIA's backend's switch for vllm:* metrics


# --- KServe --------------------------------------------------------------------------------------------

def test_kserve_raw_is_the_vllm_runtime_on_a_gpu():
    side = plan("kserve").sides[1]
    runtime, isvc = by_kind(side.objects, "ServingRuntime"), by_kind(side.objects, "InferenceService")
    c = runtime["spec"]["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.32.0"
    assert c["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--no-enable-log-requests" in c["args"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    model = isvc["spec"]["predictor"]["model"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    assert model["storageUri"] == "hf://Qwen/Qwen2.5-0.5B-Instruct" and model["runtime"] == runtime["metadata"]["name"]
    assert model["args"] == gpu_engine_args(stack("kserve").settings)  # the baseline's flags, nothing else
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert isvc["metadata"]["namespace"] == runtime["metadata"]["namespace"] == "layerbench"
    assert side.url == "http://lb-stack-kserve-abc123-predictor.layerbench.svc.cluster.local:80"
    assert side.engine_selector == "serving.kserve.io/inferenceservice=lb-stack-kserve-abc123"
    assert side.ready == [("InferenceService", "lb-stack-kserve-abc123")]


def test_kserve_raw_from_the_cache_pvc():
    cs = settings(kserve_storage="pvc", model_revision=COMMIT)
    model = by_kind(plan("kserve", cs).sides[1].objects, "InferenceService")["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://hf-cache/hub"
    # the runtime's --model=/mnt/models comes first; the model's args come after it, and the last one wins
    assert model["args"][-1] == f"--model=/mnt/models/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}"
    assert model["env"] == [{"name": "HF_HUB_CACHE", "value": "/mnt/models"}]


def test_kserve_raw_downloads_the_pinned_revision():
    isvc = by_kind(plan("kserve", settings(model_revision=COMMIT)).sides[1].objects, "InferenceService")
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == f"hf://Qwen/Qwen2.5-0.5B-Instruct:{COMMIT}"


def test_kserve_inprocess_is_the_hugging_face_runtime():
    side = plan("kserve", mode="inprocess").sides[1]
    runtime, isvc = by_kind(side.objects, "ServingRuntime"), by_kind(side.objects, "InferenceService")
    c = runtime["spec"]["containers"][0]
    assert c["image"] == "kserve/huggingfaceserver:v0.21.0-gpu" and "--model_name={{.Name}}" in c["args"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "huggingface"}
    assert model["args"][:3] == ["--model_id=Qwen/Qwen2.5-0.5B-Instruct", "--model_revision=main", "--backend=vllm"]
    assert model["args"][3:] == gpu_engine_args(stack("kserve").settings)
    assert {"name": "hf-cache", "mountPath": "/mnt/hf-cache", "readOnly": True} in c["volumeMounts"]
    assert side.url.endswith("-predictor.layerbench.svc.cluster.local:80/openai")  # KServe's OpenAI routes


def test_kserve_proxy_is_kserves_proxy_model_in_front_of_a_bare_vllm():
    side = plan("kserve", mode="proxy").sides[1]
    kinds = [(o["kind"], o["metadata"]["name"]) for o in side.objects if o["kind"] != "ConfigMap"]
    assert kinds == [("Deployment", "lb-stack-vllm-abc123"), ("Service", "lb-stack-vllm-abc123"),
                     ("Deployment", "lb-stack-kserve-abc123"), ("Service", "lb-stack-kserve-abc123")]
    assert side.ready == [("Deployment", "lb-stack-vllm-abc123"), ("Deployment", "lb-stack-kserve-abc123")]
    server = next(o for o in side.objects if o["metadata"]["name"] == "lb-stack-kserve-abc123-server")
    config = json.loads(server["data"]["config.json"])
    assert config["mode"] == "proxy" and config["host"] == "0.0.0.0"  # inside the pod's own network namespace
    assert config["predictor_url"] == "http://lb-stack-vllm-abc123.layerbench.svc.cluster.local:8000"
    assert "def proxy_model" in server["data"]["kserve_server.py"]  # the very script the local mode runs
    proxy = containers(by_kind([o for o in side.objects if o["metadata"]["name"] == "lb-stack-kserve-abc123"],
                               "Deployment")["spec"]["template"]["spec"])["kserve-proxy"]
    assert proxy["image"] == "kserve/huggingfaceserver:v0.21.0-gpu" and "nvidia.com/gpu" not in str(proxy["resources"])
    engine = containers(by_kind(side.objects[:3], "Deployment")["spec"]["template"]["spec"])["vllm"]
    assert engine["args"][engine["args"].index("--max-model-len") + 1] == str(PROFILE.engine.max_model_len)
    assert side.url.endswith("lb-stack-kserve-abc123.layerbench.svc.cluster.local:8080/openai")
    assert side.engine_selector.endswith("layerbench.io/role=engine")  # the version is read from the engine


@pytest.mark.parametrize("kind", ["endpoint", "sim", "sim-proxy"])
def test_stacks_without_a_cluster_form_are_refused(kind):
    s = get_stack(kind)(DeploySettings(url="http://127.0.0.1:1"))
    with pytest.raises(LayerbenchError, match=f"stack {kind} has no k8s form"):
        render_plan(s, PROFILE, settings(), RUN, LoadCommand("compare"))


# --- the load Job -------------------------------------------------------------------------------------

def test_load_job_drives_the_service_by_cluster_dns():
    side = plan("ray").sides[0]
    job = side.load_job
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert job["apiVersion"] == "batch/v1" and job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert c["args"][:5] == ["run", "--stack", "endpoint", "--url", side.url]
    assert "port-forward" not in json.dumps(job) and ".svc.cluster.local" in side.url
    assert c["args"][c["args"].index("--repeats") + 1] == "2"
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["allowPrivilegeEscalation"] is False
    assert "hostNetwork" not in pod and set(c["resources"]["limits"]) == {"cpu", "memory"}
    # its results come back through its log, also when the run failed
    assert "python -m harness.targets.k8s.jobresults pack /results" in c["command"][2]
    profile_cm = next(o for o in side.objects if o["metadata"]["name"] == pod["volumes"][0]["configMap"]["name"])
    assert yaml.safe_load(profile_cm["data"]["profile.yaml"]) == PROFILE.model_dump(mode="json")


def test_audit_loads_with_the_audit_command():
    args = plan("vllm", command="audit").sides[1].load_job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "audit" and "--repeats" not in args


def test_write_plan_writes_one_file_per_side_and_the_plan(tmp_path):
    p = plan("ray")
    paths = write_plan(p, tmp_path / "manifests")
    assert [x.name for x in paths] == ["baseline-vllm.yaml", "stack-ray.yaml", "plan.json"]
    docs = list(yaml.safe_load_all(paths[1].read_text()))
    assert docs == [*p.sides[1].objects, p.sides[1].load_job]  # what is written is what would be applied
    assert "&id" not in paths[1].read_text()  # no YAML aliases
    assert K8sPlan.model_validate_json(paths[2].read_text()) == p
