"""Each stack's docker form: the `docker run` of its server (the official image, its own network namespace, no
published port, bound to loopback where it can be), where it serves and when it is ready. An adapter names its
form as `docker_form = "harness.targets.k8s.docker_forms:<name>"` (stacks.base.target_form resolves it); the docker
target
(harness/targets/k8s/docker.py) adds the load client beside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.errors import LayerbenchError
from harness.host import gpus as host_info
from harness.targets.k8s.common import ROOT_HF_HOME, engine_env, model_ref, served_name
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render_kserve import HF_RUNTIME_HOME, OPENAI_PREFIX, hf_objects, kserve_mode, raw_objects
from harness.targets.k8s.render_ray import RAY_HF_HOME, SERVE_PORT, serve_config
from harness.targets.k8s.render_triton import HTTP_PORT, repository_files, server_args
from harness.targets.k8s.render_vllm import VLLM_PORT, vllm_image, vllm_server_args
from stacks.base import Stack
from stacks.base.kserve_manifests import POD_PORT, pod_process


@dataclass
class DockerForm:
    run: list[str]  # docker run ... of the server
    image: str  # the server's image: what follows it in `run` is the container's own command line
    url: str
    ready: str  # a URL that answers 2xx once the server serves
    ready_body: str = ""  # a JSON body to POST to it ("": GET)
    metrics: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    protocol: str = "openai"


def gpu_devices(stack: Stack, cs: ClusterSettings) -> list[int]:
    """The GPUs (nvidia-smi's indices) a side's server gets: GPUS= / the profile's engine.gpus as named, else the
    first cs.gpus this host's CUDA_VISIBLE_DEVICES leaves (harness.host.gpus.devices_for, which also refuses an index
    the host lacks); rendered away from the GPU host, the named ones or 0..cs.gpus-1."""
    if not cs.gpus:
        return []
    named = stack.settings.engine.gpus
    host = host_info.host_gpus()
    if host is not None:
        return host_info.devices_for(host, named, cs.gpus)
    if named and len(named) != cs.gpus:
        raise LayerbenchError(f"GPUS names {len(named)} GPU(s) ({','.join(map(str, named))}) but each engine takes "
                              f"{cs.gpus}: name {cs.gpus}")
    return list(named) if named else list(range(cs.gpus))


def gpus_option(devices: list[int]) -> list[str]:
    """docker run's GPU request for exactly these devices. `--gpus N` would take GPUs 0..N-1 whatever GPUS= says;
    `device=2,3` names them, and as the CLI reads --gpus as one CSV record (docker/cli opts/gpus.go) a list is
    quoted inside the value ('"device=2,3"' in a shell, as docs.docker.com's resource-constraints page writes it;
    here no shell strips quotes, so the argument itself carries the double quotes)."""
    return ["--gpus", f'"device={",".join(map(str, devices))}"'] if devices else []


@dataclass(frozen=True)
class Container:
    """A server's container: its image and the command line after it (run by `entrypoint` where named, else by the
    image's own), where the HF cache is mounted in it, its environment beside engine_env's, and its other mounts
    (`docker run -v` values)."""

    image: str
    args: list[str]
    hf_home: str
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: str | None = None
    mounts: tuple[str, ...] = ()


def server(name: str, cs: ClusterSettings, container: Container, devices: list[int] | None = None) -> list[str]:
    """`docker run` of a side's server named `name`, on `devices` (None: the first cs.gpus)."""
    image, args, hf_home, env = container.image, container.args, container.hf_home, container.env
    entrypoint, mounts = container.entrypoint, container.mounts
    cmd = ["docker", "run", "-d", "--name", name, "--label", "app.kubernetes.io/managed-by=layerbench",
           "--security-opt", "no-new-privileges", "--cap-drop", "ALL", "--shm-size", cs.shm_size.replace("i", "")]
    cmd += gpus_option(devices if devices is not None else list(range(cs.gpus or 0)))
    cmd += ["-v", f"$HF_CACHE:{hf_home}:ro", *[x for m in mounts for x in ("-v", m)]]
    for key, value in {**engine_env(hf_home), **env}.items():
        cmd += ["-e", f"{key}={value}"]
    if cs.hf_token_secret:  # passed from the invoking shell's environment when it has one
        cmd += ["-e", "HF_TOKEN"]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    return [*cmd, image, *args]


def _api(url: str) -> dict[str, str]:
    return {"api": f"{url.split('/openai')[0]}/metrics"}


def vllm(stack: Stack, cs: ClusterSettings, name: str, label: str, files: dict[str, str]) -> DockerForm:
    image = vllm_image(cs)
    run = server(name, cs, Container(image, ["-m", "vllm.entrypoints.openai.api_server",
                                             *vllm_server_args(stack, cs, ROOT_HF_HOME, "127.0.0.1")],
                                     ROOT_HF_HOME, stack.image_engine_env, entrypoint="python3"),
                 gpu_devices(stack, cs))  # the layer image's engine settings too (Stack.image_engine_env)
    url = f"http://127.0.0.1:{VLLM_PORT}"
    return DockerForm(run=run, image=image, url=url, ready=f"{url}/health", metrics=_api(url))


def kserve(stack: Stack, cs: ClusterSettings, name: str, label: str, files: dict[str, str]) -> DockerForm:
    mode = kserve_mode(stack)
    if mode == "raw":  # the runtime container's command in the vLLM image
        ref = model_ref(cs, ROOT_HF_HOME)  # the model from the HF cache where the pod has /mnt/models
        runtime, isvc = raw_objects(stack, cs.model_copy(update={"kserve_storage": "hf"}), name)
        cmd, env = pod_process(runtime, isvc, Path(ref.model), POD_PORT)
        cmd += [f"--revision={ref.revision}"] if ref.revision else []
        image = vllm_image(cs)
        url = f"http://127.0.0.1:{POD_PORT}"
        run = server(name, cs, Container(image, cmd[1:], ROOT_HF_HOME, env, entrypoint=cmd[0]), gpu_devices(stack, cs))
        return DockerForm(run=run, image=image,
                          url=url, ready=f"{url}/health", metrics=_api(url))
    if mode == "proxy":
        raise LayerbenchError("stack kserve: mode proxy has no docker form (it needs a second server container "
                              "beside the engine); use --target k8s or local")
    # KServe's Hugging Face runtime (its server binds 0.0.0.0, inside its own namespace)
    runtime, isvc = hf_objects(stack, cs, name)
    container = runtime["spec"]["containers"][0]
    args = [a.replace("{{.Name}}", name) for a in container["args"]] + isvc["spec"]["predictor"]["model"]["args"]
    url = f"http://127.0.0.1:{POD_PORT}{OPENAI_PREFIX}"
    run = server(name, cs, Container(cs.kserve_hf_image, args, HF_RUNTIME_HOME), gpu_devices(stack, cs))
    return DockerForm(run=run, image=cs.kserve_hf_image,
                      url=url, ready=f"http://127.0.0.1:{POD_PORT}/v1/models/{name}", metrics=_api(url))


# Ray's metrics agent port in the container. Ray itself picks a random free one unless told (RayParams
# metrics_export_port defaults to None, ray/_private/parameter.py and node.py's _get_cached_port, Ray 2.60.0);
# 8080 is KubeRay's default, which it passes as --metrics-export-port (ray-operator utils/constant.go
# DefaultMetricsPort, common/pod.go), so the docker form passes the same
RAY_METRICS_PORT = 8080


def ray(stack: Stack, cs: ClusterSettings, name: str, label: str, files: dict[str, str]) -> DockerForm:
    """`ray start --head` with the metrics port the scrape reads, then `serve run` deploys the app on it."""
    config = {"http_options": {"host": "127.0.0.1", "port": SERVE_PORT}, **serve_config(stack, cs)}
    files[f"{label}-ray-serve.yaml"] = yaml.safe_dump(config, sort_keys=False)
    # `serve run` alone would start Ray itself, with a random metrics port (above): nothing to scrape
    start = (f"ray start --head --metrics-export-port={RAY_METRICS_PORT} --disable-usage-stats "
             "&& exec serve run --address=auto /home/ray/serve.yaml")
    run = server(name, cs, Container(cs.ray_image, ["-c", start], RAY_HF_HOME, {"RAY_USAGE_STATS_ENABLED": "0"},
                                     entrypoint="bash",
                                     mounts=(f"$RUN_DIR/{label}-ray-serve.yaml:/home/ray/serve.yaml:ro",)),
                 gpu_devices(stack, cs))
    url = f"http://127.0.0.1:{SERVE_PORT}"
    # the ingress answers before the engine replica is up: ready means a real completion goes through; Ray's
    # metrics agent is in the container's network namespace, as the local stack reads it
    return DockerForm(run=run, image=cs.ray_image, url=url, ready=f"{url}/v1/completions",
                      ready_body=f'{{"model": "{served_name(cs)}", "prompt": "ready", "max_tokens": 1}}',
                      metrics={"ray_metrics": f"http://127.0.0.1:{RAY_METRICS_PORT}/metrics"}, aliases=("ray_vllm_",))


def triton(stack: Stack, cs: ClusterSettings, name: str, label: str, files: dict[str, str]) -> DockerForm:
    """The model repository the local stack writes, mounted writable (the model writes applied.json)."""
    for path, text in repository_files(stack, cs).items():
        files[f"{label}-triton-repo/{path}"] = text
    run = server(name, cs, Container(cs.triton_image, ["tritonserver", *server_args("/models", "127.0.0.1")],
                                     ROOT_HF_HOME, {"LC_ALL": "C.UTF-8"},
                                     mounts=(f"$RUN_DIR/{label}-triton-repo:/models",)),
                 gpu_devices(stack, cs))
    url = f"http://127.0.0.1:{HTTP_PORT}"
    return DockerForm(run=run, image=cs.triton_image, url=url, ready=f"{url}/v2/models/{served_name(cs)}/ready",
                      metrics={"triton_metrics": f"http://127.0.0.1:{HTTP_PORT + 2}/metrics"},  # as render_triton
                      protocol="triton")
