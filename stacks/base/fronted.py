"""The base of every layer that is a process of its own in front of a bare engine deployment: KServe's proxy mode,
the reference engine's known-overhead proxy, LiteLLM's proxy, vLLM's router. The engine behind it is a whole
stack (bare vLLM from the layer's environment, or the reference engine) deployed first and torn down last; the
front is this stack's own server process on 127.0.0.1, and its port is the endpoint. The baseline is a fresh
deployment of the same engine, so the layer is all that differs.

An adapter says how to start its front (`front_command`), where the front is ready (`front_ready_path`) and,
where its engine is not bare vLLM, which engine (`engine_behind`). A layer that is sometimes fronted and
sometimes the engine itself (KServe's modes) returns None from `engine_behind` for the latter."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import psutil
from rich.console import Console

from harness.schemas import AppliedConfig
from stacks.base import REGISTRY, DeploySettings, Stack
from stacks.base.engine_frontend import frontend_of
from stacks.base.local import LocalServerStack
from stacks.base.procs import wait_http_ready
from stacks.base.replicas import ReplicaSet, replica_name


class FrontedEngineStack(LocalServerStack):
    front_role: ClassVar[str] = ""  # how the CPU table labels the front's processes (default: the stack's kind)

    def __init__(self, settings: DeploySettings, port: int | None = None):
        super().__init__(settings, port)
        self.engine: Stack | None = self.engines_behind()
        self._front: tuple[list[str], dict[str, str]] | None = None  # built in deploy(), started in wait_ready()

    # --- what an adapter says ---
    def engine_behind(self, settings: DeploySettings | None = None) -> Stack | None:
        """The engine deployment behind the front: bare vLLM from this layer's environment, none of its options
        (settings: one replica's, where the front has several engines)."""
        return REGISTRY["vllm"]((settings or self.settings).model_copy(update={"options": {}}), venv=self.engine_venv)

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        """The front's command line and environment, given the engine's base URL."""
        raise NotImplementedError

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        """The front's command line and environment, given every engine's base URL: a layer that fronts several
        (replicas_by = "layer") says how it takes them."""
        if len(upstreams) != 1:
            raise NotImplementedError(f"{self.kind} fronts one engine")
        return self.front_command(upstreams[0])

    def engines_behind(self) -> Stack | None:
        """The engine behind the front, or `engine.replicas` of them as one ReplicaSet."""
        one = self.engine_behind()
        if self.settings.engine.replicas == 1 or one is None:
            return one
        return ReplicaSet(self.settings, self.engine_behind)

    def ready_url(self) -> str:
        """Answers once the front serves (for most layers: once it sees its engine too)."""
        return f"{self.endpoint().base_url}/v1/models"

    # --- lifecycle ---
    def deploy(self) -> None:
        """The engines start here; the front once they all answer (wait_ready), from the command built here (a
        missing install is refused now). A router that meets an engine still loading marks it unhealthy until its
        next health check: vllm-router 0.1.17 checks every 60 s, and a compare's first level ran on one of its two
        workers (measured)."""
        self.check_ports()
        if self.engine is not None:
            self.engine.deploy()
            ep = self.engine.endpoint()
            self._front = self.front_commands(ep.spread or [ep.base_url])

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        waited = self.engine.wait_ready(timeout) if self.engine is not None else 0.0
        if self.proc is None and self._front is not None:
            self.start(*self._front)
        assert self.proc is not None, "deploy() first"
        return waited + wait_http_ready(self.ready_url(), timeout, self.server_name, self.proc, console)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self.engine is not None:
                self.engine.teardown()

    def dead(self) -> str | None:
        """The front outlives its engine, answering every request with an error: both are watched."""
        if reason := super().dead():
            return reason
        if self.engine is not None and (reason := self.engine.dead()):
            return f"the engine behind {self.server_name}: {reason}"
        return None

    def processes(self) -> dict[str, list[psutil.Process]]:
        procs = super().processes()
        if self.front_role and self.kind in procs:
            procs[self.front_role] = procs.pop(self.kind)
        if self.engine is not None:
            procs.update(self.engine.processes())
        return procs

    # --- where things are ---
    def metric_endpoints(self) -> dict[str, str]:
        """Where a user of the layer looks (its own port), and the engine's port behind it."""
        api = super().metric_endpoints()
        if isinstance(self.engine, ReplicaSet):  # each engine's own: engine@0, engine@1, ...
            return {**api, **{replica_name("engine", i): f"{r.endpoint().base_url}/metrics"
                              for i, r in enumerate(self.engine.replicas)}}
        return {**api, "engine": f"{self.engine.endpoint().base_url}/metrics"} if self.engine is not None else api

    def log_locations(self) -> dict[str, Path]:
        if self.engine is None:
            return super().log_locations()
        return {**self.engine.log_locations(), "front": self.log_path}

    # --- what runs ---
    def engine_version(self) -> str:
        return self.engine.engine_version() if self.engine is not None else super().engine_version()

    def engine_plan(self) -> dict | None:
        return self.engine.engine_plan() if self.engine is not None else super().engine_plan()

    def verify_config(self) -> AppliedConfig:
        return self.engine.verify_config() if self.engine is not None else super().verify_config()

    def baseline(self) -> Stack | None:
        return self.engines_behind() if self.engine is not None else super().baseline()

    def frontend(self) -> str | None:
        """The API server of the engine behind the front (the front is not vLLM's)."""
        return frontend_of(self.engine) if self.engine is not None else super().frontend()

    def describe(self) -> dict:
        extra = {"upstream": self.engine.describe()} if self.engine is not None else {}
        return {**super().describe(), **extra}
