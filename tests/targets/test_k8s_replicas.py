"""The k8s target with N engine pods a side (engine.replicas, REPLICAS=N): the bare side is N engine Deployments and
Services the load Job spreads over by the local rule, each routing layer fronts every engine (vllm-router's
--worker-urls, LiteLLM's model_list, Ray's num_replicas and a GPU worker per engine), each engine's metrics are read
on their own (<name>@<i>), every object passes the validators, and what cannot be deployed is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.cli.main import build_parser, main
from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.plan import ClusterSettings, K8sPlan, Side
from harness.targets.k8s.preflight import preflight
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.validate import plan_problems
from stacks.base import DeploySettings, get_stack, parse_options
from stacks.base.replicas import build_stack
from stacks.endpoint import EndpointStack
from tests.k8s_emulator import Emulator

RUN = "20261201-101010-compare-x-abc123"
NS = "layerbench"
PROFILE = load_profile("quick")
GPU = "nvidia.com/gpu"


def settings(**kw) -> ClusterSettings:
    return ClusterSettings(**{"model": "Qwen/Qwen2.5-0.5B-Instruct", "model_revision": "main", **kw})


def plan(kind: str, replicas: int = 2, tp: int = 1, spread: str = "round_robin", cs: ClusterSettings | None = None,
         **options) -> K8sPlan:
    """A compare of `kind` with `replicas` engines a side, built as the command line builds it (build_stack)."""
    engine = PROFILE.engine.model_copy(update={"replicas": replicas, "tensor_parallel_size": tp,
                                               "baseline_spread": spread})
    stack = build_stack(get_stack(kind), DeploySettings(engine=engine, target="k8s", options=options))
    return render_plan(stack, PROFILE.model_copy(update={"engine": engine}), cs or settings(), RUN,
                       LoadCommand("compare", 2))


def of_kind(side: Side, kind: str) -> list[dict]:
    return [o for o in side.objects if o["kind"] == kind]


def named(side: Side, kind: str, name: str) -> dict:
    (found,) = [o for o in of_kind(side, kind) if o["metadata"]["name"] == name]
    return found


def load_args(side: Side) -> list[str]:
    return side.load_job["spec"]["template"]["spec"]["containers"][0]["args"]


def opts(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--opt")


def engine_url(label: str, kind: str, i: int) -> str:
    return f"http://lb-{label}-{kind}-abc123-{i}.{NS}.svc.cluster.local:8000"


def gpus_of(pod_spec: dict) -> str:
    return pod_spec["containers"][0]["resources"]["limits"][GPU]


def selects(selector: str, pod_labels: dict[str, str]) -> bool:
    return all(pod_labels.get(k) == v for k, v in (kv.split("=", 1) for kv in selector.split(",")))


# --- every router stack, every validator -----------------------------------------------------------------

@pytest.mark.parametrize("kind", ["vllm", "vllm-router", "smg", "litellm", "ray"])
def test_two_engines_a_side_pass_the_validators_with_unique_names_and_their_gpus(kind):
    p = plan(kind, tp=2)
    assert plan_problems(p, "1.33") == []
    names = [(o["kind"], o["metadata"]["name"]) for s in p.sides for o in [*s.objects, s.load_job]]
    assert len(names) == len(set(names)), names
    assert [s.gpus for s in p.sides] == [4, 4]  # 2 engine pods x tensor_parallel_size 2, both sides


# --- the bare side ----------------------------------------------------------------------------------------

def test_the_bare_side_is_two_engine_deployments_each_with_its_own_gpus_service_and_selector():
    baseline = plan("vllm", tp=2).sides[0]
    deps, svcs = of_kind(baseline, "Deployment"), of_kind(baseline, "Service")
    assert [d["metadata"]["name"] for d in deps] == ["lb-baseline-vllm-abc123-0", "lb-baseline-vllm-abc123-1"]
    assert [s["metadata"]["name"] for s in svcs] == ["lb-baseline-vllm-abc123-0", "lb-baseline-vllm-abc123-1"]
    assert baseline.ready == [("Deployment", "lb-baseline-vllm-abc123-0"), ("Deployment", "lb-baseline-vllm-abc123-1")]
    pods = [d["spec"]["template"] for d in deps]
    for i, (dep, svc, pod) in enumerate(zip(deps, svcs, pods, strict=True)):
        assert dep["spec"]["replicas"] == 1 and gpus_of(pod["spec"]) == "2"
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == "2"
        assert pod["metadata"]["labels"]["layerbench.io/replica"] == str(i)
        # each Deployment and Service selects its own engine's pods, and the side's engine selector every one
        assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"] == pod["metadata"]["labels"]
        assert selects(baseline.engine_selector, pod["metadata"]["labels"])
    assert deps[0]["spec"]["selector"]["matchLabels"] != deps[1]["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("spread", ["round_robin", "hash"])
def test_the_load_job_spreads_over_both_engines_by_the_profiles_rule(spread):
    baseline = plan("vllm", spread=spread).sides[0]
    urls = [engine_url("baseline", "vllm", i) for i in range(2)]
    args = load_args(baseline)
    assert args[args.index("--url") + 1] == urls[0] == baseline.url
    o = opts(args)
    assert o["spread"] == ",".join(urls) and o["spread_by"] == spread
    assert o["metric_endpoints"] == f"api@0={urls[0]}/metrics,api@1={urls[1]}/metrics"
    assert args[args.index("--replicas") + 1] == "1"  # the load deploys no engine; the endpoint stack fronts none
    # the load's own command line makes a client that spreads over both engines, as the local bare side does
    parsed = build_parser().parse_args(args)
    options = {k: v for k, v in parse_options(parsed.opt).items() if k != "tokenizer"}  # the cluster's HF cache
    ep = EndpointStack(DeploySettings(url=parsed.url, options=options)).endpoint()
    assert ep.base_url == urls[0] and ep.spread == urls and ep.spread_by == spread


# --- the layers in front of N engines ---------------------------------------------------------------------

def test_vllm_router_has_every_engine_service_as_a_worker_and_reads_each_engine():
    side = plan("vllm-router").sides[1]
    urls = [engine_url("stack", "vllm", i) for i in range(2)]
    router = named(side, "Deployment", "lb-stack-vllm-router-abc123")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--worker-urls")
    assert args[at + 1:at + 3] == urls and args[at + 3].startswith("--")  # one flag, both workers (nargs="*")
    assert router["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].get(GPU) is None
    assert [gpus_of(named(side, "Deployment", u.split("//")[1].split(".")[0])["spec"]["template"]["spec"])
            for u in urls] == ["1", "1"]
    endpoints = opts(load_args(side))["metric_endpoints"]
    assert f"engine@0={urls[0]}/metrics" in endpoints and f"engine@1={urls[1]}/metrics" in endpoints
    assert "router_metrics=" in endpoints and "spread" not in opts(load_args(side))  # the router picks the engine
    assert side.url == f"http://lb-stack-vllm-router-abc123.{NS}.svc.cluster.local:8080"


# vllm-project/router's Dockerfile.router (as published: vllm/vllm-router, .buildkite/publish-release-images.sh):
# no ENTRYPOINT, and CMD ["vllm-router", "--host", "0.0.0.0", "--port", "8080"]
ROUTER_IMAGE_ENTRYPOINT: list[str] = []
ROUTER_IMAGE_CMD = ["vllm-router", "--host", "0.0.0.0", "--port", "8080"]


def container_argv(c: dict, entrypoint: list[str], cmd: list[str]) -> list[str]:
    """What a container runs (kubernetes.io, define-command-argument-container): `command` replaces the image's
    ENTRYPOINT, `args` its CMD, and an image's CMD is dropped once `command` is set."""
    first = c["command"] if "command" in c else entrypoint
    rest = c["args"] if "args" in c else (cmd if "command" not in c else [])
    return [*first, *rest]


def test_the_router_pod_runs_the_router_binary_with_the_local_stacks_arguments():
    side = plan("vllm-router").sides[1]
    (c,) = named(side, "Deployment", "lb-stack-vllm-router-abc123")["spec"]["template"]["spec"]["containers"]
    argv = container_argv(c, ROUTER_IMAGE_ENTRYPOINT, ROUTER_IMAGE_CMD)
    assert argv[0] == "vllm-router" and argv[1:] == c["args"] and argv[1] == "--host", argv


# kubernetes.io, persistent volumes' access modes: ReadWriteOnce "can be mounted as read-write by a single node",
# ReadWriteOncePod by a single pod in the whole cluster. Pods on two nodes sharing an RWO claim: Multi-Attach
RWOP_PODS = 1


@pytest.mark.parametrize("replicas", [1, 2])
def test_only_the_gpu_workers_mount_the_hf_cache_claim(replicas):
    """Ray's head (no GPU, placed on any node) never mounts the cache claim: with a ReadWriteOnce claim on another
    node than the engine's, or any ReadWriteOncePod claim, it would never start."""
    side = plan("ray", replicas=replicas).sides[1]
    (svc,) = [o for o in side.objects if o["kind"] == "RayService"]
    cluster = svc["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    claiming = [p for p in pods if any((v.get("persistentVolumeClaim") or {}).get("claimName") == "hf-cache"
                                       for v in p["spec"]["volumes"])]
    assert all("nvidia.com/gpu" in p["spec"]["containers"][0]["resources"]["limits"] for p in claiming), claiming
    assert len(claiming) == replicas  # a worker group per engine, each at cs.replicas = 1 pod: RWOP holds per engine
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert not any(m["name"] == "hf-cache" for m in head["containers"][0]["volumeMounts"])
    assert any(m["mountPath"] == "/dev/shm" for m in head["containers"][0]["volumeMounts"])


def test_smg_has_every_engine_service_as_a_worker_and_the_local_stacks_arguments():
    side = plan("smg", policy="round_robin").sides[1]
    urls = [engine_url("stack", "vllm", i) for i in range(2)]
    (c,) = named(side, "Deployment", "lb-stack-smg-abc123")["spec"]["template"]["spec"]["containers"]
    # the image's `smg` script with the local stack's `launch ...`: the same gateway whatever the image's entrypoint
    assert c["command"] == ["smg"] and c["args"][0] == "launch" and c["image"] == "lightseekorg/smg:1.13.0"
    args = c["args"]
    at = args.index("--worker-urls")
    assert args[at + 1:at + 3] == urls and args[at + 3].startswith("--")
    assert args[args.index("--policy") + 1] == "round_robin" and args[args.index("--host") + 1] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(args[args.index("--port") + 1]),
                     "metrics": int(args[args.index("--prometheus-port") + 1])}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readiness"
    endpoints = opts(load_args(side))["metric_endpoints"]
    assert f"engine@1={urls[1]}/metrics" in endpoints and f"smg_metrics=http://lb-stack-smg-abc123.{NS}" in endpoints
    assert side.url == f"http://lb-stack-smg-abc123.{NS}.svc.cluster.local:{ports['http']}"


def test_litellm_has_one_model_list_entry_per_engine_under_the_served_name():
    side = plan("litellm", routing_strategy="least-busy").sides[1]
    config = json.loads(named(side, "ConfigMap", "lb-stack-litellm-abc123-config")["data"]["config.yaml"])
    urls = [engine_url("stack", "vllm", i) for i in range(2)]
    assert [m["litellm_params"]["api_base"] for m in config["model_list"]] == [f"{u}/v1" for u in urls]
    # the name the engines serve (--served-model-name), which the load reads from LiteLLM's /v1/models
    assert {m["model_name"] for m in config["model_list"]} == {"qwen2.5-0.5b-instruct"}
    assert {m["litellm_params"]["model"] for m in config["model_list"]} == {"openai/qwen2.5-0.5b-instruct"}
    assert config["router_settings"] == {"routing_strategy": "least-busy"}
    endpoints = opts(load_args(side))["metric_endpoints"]
    assert f"engine@0={urls[0]}/metrics" in endpoints and f"engine@1={urls[1]}/metrics" in endpoints


def test_ray_runs_two_llmserver_replicas_each_on_a_gpu_worker_of_its_own():
    side = plan("ray", tp=2, request_router="prefix_aware").sides[1]
    (svc,) = of_kind(side, "RayService")
    (app,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    deployment = app["args"]["llm_configs"][0]["deployment_config"]
    assert deployment["num_replicas"] == 2
    assert deployment["request_router_config"]["request_router_class"] == \
        "ray.serve.llm.request_router.PrefixCacheAffinityRouter"
    groups = svc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["gpu-0", "gpu-1"]
    assert all(g["replicas"] == g["minReplicas"] == g["maxReplicas"] == 1 for g in groups)
    assert [gpus_of(g["template"]["spec"]) for g in groups] == ["2", "2"]
    metrics = sorted(of_kind(side, "Service"), key=lambda s: s["metadata"]["name"])
    assert [m["metadata"]["name"] for m in metrics] == [f"lb-stack-ray-abc123-metrics-{i}" for i in range(2)]
    for m, g in zip(metrics, groups, strict=True):  # each metrics Service selects its own worker's pod only
        pod_labels = g["template"]["metadata"]["labels"]
        assert selects(",".join(f"{k}={v}" for k, v in m["spec"]["selector"].items()), pod_labels)
        assert selects(side.engine_selector, pod_labels)
    assert metrics[0]["spec"]["selector"] != metrics[1]["spec"]["selector"]
    endpoints = opts(load_args(side))["metric_endpoints"]
    assert endpoints.count("ray_metrics@") == 2 and "metrics-0." in endpoints and "metrics-1." in endpoints


def test_power_of_two_is_serves_default_router_and_sets_none():
    (svc,) = of_kind(plan("ray").sides[1], "RayService")
    (app,) = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"]
    assert "request_router_config" not in app["args"]["llm_configs"][0]["deployment_config"]


# --- one engine is as it was --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["vllm-router", "ray"])
def test_one_engine_keeps_its_names_labels_and_metric_endpoints(kind):
    p = plan(kind, replicas=1)
    baseline, stack = p.sides
    assert [d["metadata"]["name"] for d in of_kind(baseline, "Deployment")] == ["lb-baseline-vllm-abc123"]
    assert all("layerbench.io/replica" not in json.dumps(o) for s in p.sides for o in s.objects)
    assert "--replicas" not in load_args(baseline) and "spread" not in opts(load_args(baseline))
    assert opts(load_args(baseline))["metric_endpoints"] == \
        f"api=http://lb-baseline-vllm-abc123.{NS}.svc.cluster.local:8000/metrics"
    assert "@" not in opts(load_args(stack))["metric_endpoints"]


# --- refused ------------------------------------------------------------------------------------------------

def test_cluster_replicas_and_engine_replicas_together_are_refused():
    with pytest.raises(LayerbenchError, match="set the cluster config's replicas to 1"):
        plan("vllm", cs=settings(replicas=2))


@pytest.mark.parametrize(("nodes", "tp", "fits"), [
    ({"gpu-1": 1}, 1, False), ({"gpu-1": 1, "gpu-2": 1}, 1, True),
    ({"gpu-1": 3}, 2, False),  # 3 GPUs hold one pod of 2: a pod's GPUs are on one node
    ({"gpu-1": 4}, 2, True)])
def test_replicas_times_tp_above_the_clusters_gpu_nodes_is_refused(nodes, tp, fits):
    cs = settings(gpus=tp, check_driver=False)
    with Emulator(gpu_nodes=nodes) as emu, Cluster(NS, "replicas-test", emu.api_client(), poll_s=0.002,
                                                   request_timeout_s=5) as c:
        if fits:
            assert preflight(c, cs, ["vllm"], [], gpus_per_side=2 * tp) == []
        else:
            with pytest.raises(LayerbenchError, match=rf"a side runs 2 engine pods of {tp} nvidia.com/gpu each "
                                                      rf"\({2 * tp} in all\), and the schedulable GPU nodes hold 1"):
                preflight(c, cs, ["vllm"], [], gpus_per_side=2 * tp)


@pytest.mark.parametrize(("args", "message"), [
    (["--stack", "vllm-router", "--target", "docker"],
     "engine.replicas 2: the docker target deploys one engine a side (its docker run commands start one engine "
     "container per side); run N engines a side on the k8s target"),
    (["--stack", "envoy", "--target", "k8s"], "stack envoy has no k8s form: the k8s target deploys "),
])
def test_what_the_target_cannot_deploy_is_refused(tmp_path, capsys, args, message):
    rc = main(["compare", *args, "--dry-run", "--replicas", "2", "--results-dir", str(tmp_path)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and message in err, err
    if "envoy" in args:
        assert "litellm" in err and "ray" in err and "vllm-router" in err  # the stacks that have a k8s form


def test_compare_dry_run_with_two_replicas_writes_valid_manifests(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("harness.targets.k8s.runner.run_plan", lambda *a, **k: pytest.fail("a dry run applies nothing"))
    rc = main(["compare", "--stack", "vllm-router", "--target", "k8s", "--dry-run", "--replicas", "2",
               "--results-dir", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    (run,) = tmp_path.iterdir()
    docs = list(yaml.safe_load_all((run / "manifests" / "baseline-vllm.yaml").read_text()))
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"] == [
        f"lb-baseline-vllm-{run.name.rsplit('-', 1)[-1]}-{i}" for i in range(2)]
