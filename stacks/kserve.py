"""KServe RawDeployment, local target (`raw` mode): the vLLM ServingRuntime and InferenceService are rendered
exactly as the k8s target would apply them (kept with the run's logs), and the predictor pod's process (the
runtime container's command, args and env, with the model path and port the pod would get) runs on this
machine on 127.0.0.1 from the engine environment. That is the request path RawDeployment creates, minus the
cluster network: KServe itself is not in it. Baseline: bare vLLM from the same environment and settings.

The study measured −2.2% at c=64 for this setup, within noise, with every `vllm:*` family kept."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from harness.errors import LayerbenchError
from stacks.base import ENGINE_VENV, DeploySettings, Stack, StackOptions, register
from stacks.kserve_manifests import pod_process, render
from stacks.vllm import VllmStack, engine_args, engine_env, engine_python


class KServeOptions(StackOptions):
    mode: Literal["raw"] = Field("raw", description="raw: the predictor pod's vLLM process as RawDeployment "
                                 "runs it (KServe only in the control plane)")


@register
class KServeStack(VllmStack):
    kind = "kserve"
    in_request_path = False  # RawDeployment: KServe creates the pod and leaves the request path
    description = "KServe RawDeployment: the vLLM ServingRuntime's predictor process, as the pod runs it"
    server_name = "KServe predictor (vLLM)"
    Options = KServeOptions
    options: KServeOptions

    def __init__(self, settings: DeploySettings):
        super().__init__(settings, venv=ENGINE_VENV)
        self.manifests: list[dict] = []

    def deploy(self) -> None:
        if not self.settings.model_path.exists():
            raise LayerbenchError(f"model not found at {self.settings.model_path}: run `make setup`")
        self.check_ports()
        self.manifests = render(self.settings, engine_args(self.settings), name=self.settings.served_model_name)
        out = self.settings.log_dir / "manifests"
        out.mkdir(parents=True, exist_ok=True)
        (out / "kserve-raw.yaml").write_text(yaml.safe_dump_all(self.manifests, sort_keys=False))
        cmd, env = pod_process(*self.manifests, self.settings.model_path, self.port)
        python = str(engine_python(self.venv))
        if cmd[0] not in ("python", "python3"):
            raise LayerbenchError(f"the ServingRuntime's command {cmd[0]!r} is not vLLM's Python server")
        self.start([python, *cmd[1:]], {**engine_env(self.settings), **env})

    def shape(self) -> str:
        return f"{self.options.mode} mode"

    def log_locations(self) -> dict[str, Path]:
        return {"engine": self.log_path}

    def baseline(self) -> Stack:
        return VllmStack(self.settings.model_copy(update={"options": {}}), venv=self.venv)

    def describe(self) -> dict:
        return {**super().describe(), "mode": self.options.mode,
                "manifests": str(self.settings.log_dir / "manifests" / "kserve-raw.yaml")}
