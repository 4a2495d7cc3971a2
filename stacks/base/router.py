"""What the Rust routers in front of their workers share (vllm-router, smg): a metrics port of their own beside the
serving one, and `power_of_two`, which each refuses with one worker, refused here first with one message."""

from __future__ import annotations

from harness.errors import LayerbenchError
from stacks.base import DeploySettings
from stacks.base.fronted import FrontedEngineStack
from stacks.base.procs import free_port


class WorkerRouterStack(FrontedEngineStack):
    replicas_by = "layer"  # every engine a worker: --worker-urls U1 U2 ...

    def __init__(self, settings: DeploySettings, port: int | None = None):
        super().__init__(settings, port)
        if getattr(self.options, "policy", None) == "power_of_two" and settings.engine.replicas < 2:
            raise LayerbenchError(f"stack {self.kind}: option policy power_of_two needs at least two workers "
                                  f"({self.server_name}'s own rule): set engine.replicas 2 or more (REPLICAS=2)")
        self.metrics_port = free_port(self.port)

    def ports(self) -> list[int]:
        return [self.port, self.metrics_port]
