"""KServe, local target. Two different things carry the name, so the stack has three modes (`--opt mode=`):

- raw (default; the study's setup): KServe RawDeployment with a vLLM ServingRuntime. The ServingRuntime and
  InferenceService are rendered exactly as the k8s target would apply them (kept with the run's logs), and the
  predictor pod's process (the runtime container's command, args and env, with the model path and port the
  pod would get) runs here on 127.0.0.1. That is the request path RawDeployment creates, minus the cluster
  network: KServe itself is not in it. The study measured −2.2% at c=64 for it, within noise, every
  `vllm:*` family kept.
- inprocess: KServe's own data plane, `kserve.ModelServer` with an OpenAIGenerativeModel of ours running
  vLLM's async engine in the same process (the design of KServe's Hugging Face runtime): every request goes
  through KServe's REST server and OpenAI layer. The engine's `vllm:*` families are in that process's
  registry, served by KServe's `/metrics`.
- proxy: KServe's OpenAIProxyModel in front of a bare vLLM server: only KServe's code is added to the path;
  `vllm:*` stays on the engine's own port.

Baselines: bare vLLM from the same environment with the same settings (raw: the engine environment; the
other modes: the KServe environment, which is the engine environment's vLLM with the kserve SDK beside it,
see scripts/setup_kserve.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import psutil
import yaml
from pydantic import Field
from rich.console import Console

from harness.errors import LayerbenchError
from harness.schemas import AppliedConfig
from stacks.base import PROJECT_ROOT, REGISTRY, DeploySettings, Endpoint, Stack, StackOptions, register
from stacks.base.engine_env import (
    check_model_files,
    engine_args,
    engine_env,
    engine_kwargs,
    engine_python,
    installed_vllm_version,
    model_kwargs,
    model_ref,
    settings_from_args,
    settings_from_kwargs,
)
from stacks.base.engine_frontend import effective_env, runs_frontend
from stacks.base.fronted import FrontedEngineStack
from stacks.base.kserve_manifests import pod_process, render
from stacks.base.procs import running
from stacks.vllm import VllmStack

KSERVE_VENV = PROJECT_ROOT / ".venv-kserve"
SERVER = PROJECT_ROOT / "scripts" / "kserve_server.py"
ROUTE_PREFIX = "/openai"  # KServe's OpenAI routes: /openai/v1/completions, /openai/v1/models

MODES = {
    "raw": "RawDeployment: the vLLM ServingRuntime's own server; KServe only in the control plane",
    "inprocess": "KServe's ModelServer with vLLM's engine in its process (the Hugging Face runtime's design)",
    "proxy": "KServe's OpenAIProxyModel in front of bare vLLM: only KServe's code added to the path",
}


class KServeOptions(StackOptions):
    mode: Literal["raw", "inprocess", "proxy"] = Field(
        "raw", description="raw: the predictor pod's vLLM process as RawDeployment runs it (KServe not in the "
        "request path); inprocess: KServe's ModelServer running vLLM in-process; proxy: KServe's "
        "OpenAIProxyModel in front of bare vLLM")


@register
class KServeStack(FrontedEngineStack, VllmStack):
    kind = "kserve"
    docker_form = "harness.targets.k8s.docker_forms:kserve"
    k8s_form = "harness.targets.k8s.render_kserve:render_kserve"
    k8s_crds = (("serving.kserve.io", "InferenceService", "v1beta1"),
                ("serving.kserve.io", "ServingRuntime", "v1alpha1"))
    in_request_path = False  # raw mode; the instance says True for the modes where KServe serves the request
    description = "KServe: RawDeployment's predictor process (raw), or KServe's own data plane (inprocess, proxy)"
    server_name = "KServe"
    replaces_frontend = ("vLLM's OpenAI API server, in inprocess mode: requests enter through KServe's ModelServer "
                         "(its REST server and OpenAI routes), which runs vLLM's engine in its own process")
    Options = KServeOptions
    options: KServeOptions

    def __init__(self, settings: DeploySettings):
        super().__init__(settings)
        self.mode = self.options.mode
        self.in_request_path = self.mode != "raw"  # type: ignore[misc]
        if self.mode != "raw":
            self.venv = self.engine_venv = KSERVE_VENV
        self.manifests: list[dict] = []
        self.engine_procs: list[psutil.Process] = []  # inprocess: vLLM's engine processes, watched once ready

    def engine_behind(self, settings: DeploySettings | None = None) -> Stack | None:
        """proxy: the bare vLLM the proxy forwards to, from KServe's environment; the other modes serve the
        engine themselves."""
        if self.options.mode != "proxy":
            return None
        return REGISTRY["vllm"]((settings or self.settings).model_copy(update={"options": {}}), venv=KSERVE_VENV)

    @property
    def config_path(self) -> Path:
        return self.settings.log_dir / f"kserve-{self.port}.json"

    @property
    def applied_path(self) -> Path:
        return self.settings.log_dir / f"kserve-{self.port}-applied.json"

    # --- deploy ---
    def deploy(self) -> None:
        check_model_files(self.settings)
        self.check_ports()
        if self.mode == "raw":
            self._deploy_raw()
        else:
            self._server_ready_to_start()  # refused before the engine behind the proxy is started
            if self.engine is not None:
                super().deploy()
            else:
                self.start(*self.front_command(""))

    def raw_process(self) -> tuple[list[str], dict[str, str]]:
        """The predictor pod's command line and env, as RawDeployment's ServingRuntime renders them."""
        self.manifests = render(self.settings, engine_args(self.settings), name=self.settings.served_model_name)
        return pod_process(*self.manifests, self.settings.model_path, self.port)

    def engine_plan(self) -> dict | None:
        if self.engine is not None:  # proxy: the engine is the bare vLLM behind it
            return super().engine_plan()
        if self.mode == "raw":
            plan = settings_from_args(self.raw_process()[0])
            if plan["model"] == str(self.settings.model_path):  # the pod's /mnt/models: the resolved snapshot
                model, revision = model_ref(self.settings)
                plan.update(model=model, revision=revision)
        else:
            plan = settings_from_kwargs(self.server_config()["engine"])
        return {**plan, "devices": list(self.settings.devices)}

    def _deploy_raw(self) -> None:
        cmd, env = self.raw_process()
        out = self.settings.log_dir / "manifests"
        out.mkdir(parents=True, exist_ok=True)
        (out / "kserve-raw.yaml").write_text(yaml.safe_dump_all(self.manifests, sort_keys=False))
        if cmd[0] not in ("python", "python3"):
            raise LayerbenchError(f"the ServingRuntime's command {cmd[0]!r} is not vLLM's Python server")
        self.start([str(engine_python(self.venv)), *cmd[1:]], {**engine_env(self.settings, self.engine_cache), **env})

    def _server_ready_to_start(self) -> None:
        if not (self.venv / "bin" / "python").exists():
            raise LayerbenchError(f"KServe's SDK is not installed ({self.venv} missing): run `make setup-kserve`")

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        """KServe's server (scripts/kserve_server.py) with its config: in front of `upstream` (proxy), or running
        the engine in its own process (inprocess)."""
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.server_config(upstream), indent=2))
        return ([str(engine_python(self.venv)), str(SERVER), str(self.config_path)],
                engine_env(self.settings, self.engine_cache))

    def server_config(self, upstream: str = "") -> dict:
        """What scripts/kserve_server.py runs: the mode, the port, and the engine (in-process: the baseline's
        settings as AsyncEngineArgs; proxy: the bare vLLM's address)."""
        cfg = {"mode": self.mode, "name": self.settings.served_model_name, "host": "127.0.0.1", "port": self.port,
               "applied": str(self.applied_path)}
        if self.mode == "proxy":
            return {**cfg, "predictor_url": upstream, "read_timeout_s": 30.0}
        s = self.settings
        spec = {**model_kwargs(s), "served_model_name": s.served_model_name,
                **engine_kwargs(s, "the in-process engine's arguments")}
        return {**cfg, "engine": spec}

    def ready_url(self) -> str:
        # the model's own route: 503 until its engine has started (in-process) or its upstream is healthy
        return f"{self.endpoint().base_url}/v1/models/{self.settings.served_model_name}"

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        if self.mode == "raw":
            return VllmStack.wait_ready(self, timeout, console)
        waited = super().wait_ready(timeout, console)
        self.engine_procs = [p for p in self.proc.tree() if _title(p).startswith("VLLM::")] if self.proc else []
        return waited

    def dead(self) -> str | None:
        """KServe's server outlives vLLM's engine processes (in-process) and its upstream (proxy), answering
        every request with an error: those are watched as well."""
        if reason := super().dead():
            return reason
        for p in self.engine_procs:
            if not running(p):
                return f"vLLM's {_title(p)} (pid {p.pid}) inside KServe exited; see {self.log_path}"
        return None

    # --- where things are ---
    def endpoint(self) -> Endpoint:
        base = f"http://127.0.0.1:{self.port}"
        return Endpoint(base_url=base if self.mode == "raw" else base + ROUTE_PREFIX,
                        model=self.settings.served_model_name)

    def metric_endpoints(self) -> dict[str, str]:
        # KServe serves /metrics at its root, not under its OpenAI routes
        return {**super().metric_endpoints(), "api": f"http://127.0.0.1:{self.port}/metrics"}

    def shape(self) -> str:
        return f"{self.mode} mode"

    def observability_note(self) -> str | None:
        return {"raw": None,
                "inprocess": "vLLM runs inside KServe's process: its stat loggers register the vllm:* families in "
                             "that process's Prometheus registry, which KServe's /metrics serves on its REST port",
                "proxy": "KServe's /metrics has only its process's own figures: the vllm:* families stay on the "
                         "bare vLLM's port behind the proxy, which a user of the KServe endpoint does not scrape",
                }[self.mode]

    def log_locations(self) -> dict[str, Path]:
        return {**super().log_locations(), **({} if self.engine is not None else {"engine": self.log_path})}

    # --- what runs ---
    def applied_file(self) -> dict:
        try:
            return json.loads(self.applied_path.read_text())
        except (OSError, ValueError):
            return {}

    def verify_config(self) -> AppliedConfig:
        cfg = super().verify_config()  # proxy: the bare vLLM's; else KV cache and concurrency from vLLM's log lines
        if self.mode == "inprocess":
            cfg.max_model_len = self.applied_file().get("max_model_len")  # KServe's model list does not carry it
        return cfg

    def engine_version(self) -> str:
        if self.mode == "inprocess":
            return self.applied_file().get("vllm_version") or installed_vllm_version(self.venv)
        return super().engine_version()

    def frontend(self) -> str | None:
        """raw: what the ServingRuntime's command line runs; proxy: the bare vLLM's; inprocess: none of vLLM's."""
        if self.mode == "raw":
            cmd, env = self.raw_process()
            return runs_frontend(cmd, effective_env({**engine_env(self.settings, self.engine_cache), **env}))
        return super().frontend() if self.mode == "proxy" else None

    def frontend_replaced(self) -> str | None:
        return self.replaces_frontend if self.mode == "inprocess" else None

    def describe(self) -> dict:
        extra = {"manifests": str(self.settings.log_dir / "manifests" / "kserve-raw.yaml")} if self.mode == "raw" \
            else {"server_config": str(self.config_path)}
        return {**super().describe(), "mode": self.mode, "mode_means": MODES[self.mode], **extra}


def _title(p: psutil.Process) -> str:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return ""
    return cmd[0] if cmd else ""
