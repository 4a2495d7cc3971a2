"""The base of every stack whose deployment is one server process group started on this machine (bare vLLM,
Ray Serve's driver, Triton): it owns the process, `endpoint()`, `dead()`, `processes()`, the files the
deployment leaves in /tmp and /dev/shm, and a teardown that proves the group is gone and its ports are free.
An adapter says what to start (`start(cmd, env)` from its `deploy()`) and what else to do at teardown.

A vLLM the deployment starts gets `engine_env(settings, self.engine_cache)`: a compile and kernel cache of its
own, removed at teardown (stacks.base.engine_env.cold_cache). An adapter that runs vLLM's API server says which one
(`frontend()`, stacks.base.engine_frontend); one that runs the engine in a server of its own says what that server
replaces (`replaces_frontend`)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import psutil

from stacks.base import DeploySettings, Endpoint, Stack
from stacks.base.engine_env import ENGINE_START, cold_cache, remove_cache
from stacks.base.engine_frontend import check_same_frontend, frontend_text
from stacks.base.procs import Leftovers, ManagedProcess, ensure_port_free, free_port, stop_and_verify


class LocalServerStack(Stack):
    server_name: ClassVar[str]  # how messages name it: "vLLM", "Ray Serve"
    stop_timeout_s: ClassVar[float] = 15.0  # SIGTERM -> SIGKILL, per round
    leader_grace_s: ClassVar[float] = 0.0  # the group leader alone first (Ray's driver shuts its cluster down)
    # a layer that runs vLLM's engine inside a server of its own: what takes the place of vLLM's OpenAI API server
    replaces_frontend: ClassVar[str] = ""

    def __init__(self, settings: DeploySettings, port: int | None = None):
        super().__init__(settings)
        self.port = port or getattr(self.options, "port", None) or free_port()
        self.log_path = settings.log_dir / f"{self.kind}-{self.port}.log"
        self.proc: ManagedProcess | None = None
        self.leftovers = Leftovers()
        self.engine_cache = cold_cache(self.kind)  # the vLLM this deployment starts, if any: its own cache root
        self.engine_start = ENGINE_START
        self.keep_cache = False  # a compare's side cache (stacks.base.engine_env.side_cache) outlives the deployment

    def ports(self) -> list[int]:
        """Every port this deployment listens on: checked free before start, and free again after teardown."""
        return [self.port]

    def check_ports(self) -> None:
        """A port held by another process is refused at once, before anything slower is looked at."""
        for port in self.ports():
            ensure_port_free(port)

    def start(self, cmd: list[str], env: dict[str, str], log_path: Path | None = None) -> None:
        """Start the server in its own process group; called from `deploy()`."""
        self.check_ports()
        self.log_path = log_path or self.log_path
        self.proc = ManagedProcess(self.kind, cmd, self.log_path, env=env)
        self.leftovers.snapshot()
        self.proc.start()

    def teardown(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            stop_and_verify(proc, self.ports(), self.server_name, timeout=self.stop_timeout_s,
                            leader_grace=self.leader_grace_s)
        finally:
            self.leftovers.remove()  # vLLM's /tmp/vllm_dist_* even on a clean shutdown; /dev/shm when killed
            if not self.keep_cache:
                remove_cache(self.engine_cache)
            self.after_teardown()

    def after_teardown(self) -> None:
        """What the adapter keeps or removes once its processes are gone (Ray: its session logs)."""

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=f"http://127.0.0.1:{self.port}", model=self.settings.served_model_name)

    def dead(self) -> str | None:
        return self.proc.exit_reason() if self.proc is not None else None

    def processes(self) -> dict[str, list[psutil.Process]]:
        return {self.kind: self.proc.tree()} if self.proc else {}

    # --- which API server is in the request path ---
    def frontend(self) -> str | None:
        """python | rust: the vLLM API server this deployment runs; None: none of vLLM's."""
        return None

    def frontend_replaced(self) -> str | None:
        """What this deployment runs in place of vLLM's API server, where it runs the engine in a server of its own."""
        return self.replaces_frontend or None

    def baseline(self) -> Stack | None:
        """The bare vLLM of this engine, refused before anything is deployed when it would run another API server
        than this deployment's vLLM does."""
        base = super().baseline()
        if base is not None:
            check_same_frontend(base, self)
        return base

    def describe(self) -> dict:
        """With the API server in the request path and how its engine starts (run.json's deployments)."""
        out = super().describe()
        if replaced := self.frontend_replaced():
            out.update(frontend=f"none of vLLM's: {replaced}", engine_start=self.engine_start)
        elif (frontend := self.frontend()) is not None:
            out.update(frontend=frontend_text(frontend, self.settings.engine.frontend), engine_start=self.engine_start)
        return out
