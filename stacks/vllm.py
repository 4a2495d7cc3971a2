"""Bare vLLM, local target: `python -m vllm.entrypoints.openai.api_server` from the engine environment on
127.0.0.1 and a free port, in its own process group, log to a file (`vllm serve` with VLLM_USE_RUST_FRONTEND=1 when
the profile's engine.frontend is rust: stacks/base/engine_frontend.py). It is every layer's baseline."""

from __future__ import annotations

from pathlib import Path

import httpx
from rich.console import Console

from stacks.base import ENGINE_VENV, DeploySettings, register
from stacks.base.engine_env import (
    check_model_files,
    engine_args,
    engine_env,
    engine_python,
    installed_vllm_version,
    model_args,
    settings_from_args,
)
from stacks.base.engine_frontend import check_frontend, effective_env, frontend_env, runs_frontend, server_module
from stacks.base.local import LocalServerStack
from stacks.base.procs import wait_http_ready


@register
class VllmStack(LocalServerStack):
    kind = "vllm"
    replicas_by = "client"  # N bare engines: the load client spreads over them
    in_request_path = False
    description = "bare vLLM OpenAI server (the baseline)"
    server_name = "vLLM"
    docker_form = "harness.targets.k8s.docker_forms:vllm"
    k8s_form = "harness.targets.k8s.render_vllm:render_vllm"

    def __init__(self, settings: DeploySettings, port: int | None = None, venv: Path = ENGINE_VENV):
        """venv: the environment vLLM runs from (a layer's baseline runs from the layer's own). An API server
        (engine.frontend) this vLLM cannot run is refused here, before anything is deployed."""
        super().__init__(settings, port)
        self.venv = self.engine_venv = venv
        self._version: str | None = None
        check_frontend(settings.engine.frontend, settings.target, venv)

    def deploy(self) -> None:
        check_model_files(self.settings)
        self.check_ports()
        self.start([str(engine_python(self.venv)), *self.server_args()], self.server_env())

    def server_env(self) -> dict[str, str]:
        return {**engine_env(self.settings, self.engine_cache), **frontend_env(self.settings.engine.frontend)}

    def server_args(self) -> list[str]:
        """The server's command line after the interpreter."""
        return [*server_module(self.settings.engine.frontend), *model_args(self.settings), "--served-model-name",
                self.settings.served_model_name, "--host", "127.0.0.1", "--port", str(self.port),
                *engine_args(self.settings)]

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        assert self.proc is not None, "deploy() first"
        waited = wait_http_ready(f"{self.endpoint().base_url}/health", timeout, "vLLM", self.proc, console)
        self.proc.tree()  # remember every child for teardown's survivor check
        return waited

    def log_locations(self) -> dict[str, Path]:
        return {"engine": self.log_path}

    def frontend(self) -> str:
        return runs_frontend(self.server_args(), effective_env(self.server_env()))

    def engine_plan(self) -> dict:
        return {**settings_from_args(self.server_args()), "devices": list(self.settings.devices)}

    def engine_version(self) -> str:
        if self._version is None:
            try:  # the running server is the most direct answer
                self._version = httpx.get(f"{self.endpoint().base_url}/version", timeout=5).json()["version"]
            except (httpx.HTTPError, ValueError, KeyError):
                self._version = installed_vllm_version(self.venv)
        return self._version

    def describe(self) -> dict:
        return {**super().describe(), "venv": str(self.venv)}

