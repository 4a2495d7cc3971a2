"""N engines of one side (profile `engine.replicas`): each deployed with the side's settings, on its own GPUs on a
GPU host (the i-th run of tensor_parallel_size of the side's devices), torn down together.

The bare side of a compare with replicas is a `ReplicaSet` of bare engines: its endpoint names every engine, and
the load client spreads requests over them itself (round robin, or by a hash of the prompt's first characters:
`engine.baseline_spread`), so no hop is added. A layer that fronts several engines holds a `ReplicaSet` as the
engine behind it and gives its front every engine's URL.

Each engine's metric endpoint is named `<name>@<i>`: the per-level summaries read the engines as one (their
counters summed, as vLLM sums its own engines' label sets) and each on its own (requests, tokens and time in the
engine per replica: harness.analysis.replicas)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from harness.errors import LayerbenchError
from harness.host.gpus import replica_devices
from harness.schemas import AppliedConfig
from stacks.base import DeploySettings, Endpoint, Stack
from stacks.base.engine_frontend import frontend_of, replaced_by

# AppliedConfig fields every replica must have alike: one that differs would make the replicas unequal engines
SAME = ("model", "revision", "tensor_parallel_size", "max_model_len", "kv_cache_tokens")


def replica_name(name: str, index: int) -> str:
    return f"{name}@{index}"


def each_settings(settings: DeploySettings) -> list[DeploySettings]:
    """One DeploySettings per replica: the side's, with the replica's own GPUs, as one engine (replicas 1)."""
    n = settings.engine.replicas
    one = settings.engine.model_copy(update={"replicas": 1})
    return [settings.model_copy(update={"devices": d, "engine": one})
            for d in replica_devices(list(settings.devices), n)]


class ReplicaSet(Stack):
    """`engine.replicas` deployments of one bare engine, made by `make` from each replica's settings."""

    Options = Stack.Options

    def __init__(self, settings: DeploySettings, make: Callable[[DeploySettings], Stack]):
        self.settings, self.make = settings, make
        self.replicas = [make(s) for s in each_settings(settings)]
        first = self.replicas[0]
        self.options: Any = first.options
        self.kind = first.kind  # type: ignore[misc]  # the reports name the engine, with its count (describe)
        self.in_request_path, self.loads_model = first.in_request_path, first.loads_model  # type: ignore[misc]
        self.cheap_liveness = all(r.cheap_liveness for r in self.replicas)  # type: ignore[misc]
        self.engine_venv = first.engine_venv

    # --- lifecycle ---
    def deploy(self) -> None:
        for r in self.replicas:
            r.deploy()

    def wait_ready(self, timeout: float, console: Any = None) -> float:
        return sum(r.wait_ready(timeout) for r in self.replicas)

    def teardown(self) -> None:
        """Every replica, also when one fails; the first failure is raised after."""
        failed: list[BaseException] = []
        for r in self.replicas:
            try:
                r.teardown()
            except Exception as e:  # noqa: BLE001 - the others still go down
                failed.append(e)
        if failed:
            raise failed[0]

    def dead(self) -> str | None:
        return next((f"replica {i}: {why}" for i, r in enumerate(self.replicas) if (why := r.dead())), None)

    # --- where things are ---
    def endpoint(self) -> Endpoint:
        eps = [r.endpoint() for r in self.replicas]
        return eps[0].model_copy(update={"spread": [e.base_url for e in eps],
                                         "spread_by": self.settings.engine.baseline_spread})

    def metric_endpoints(self) -> dict[str, str]:
        return {replica_name(name, i): url for i, r in enumerate(self.replicas)
                for name, url in r.metric_endpoints().items()}

    def metric_aliases(self) -> tuple[str, ...]:
        return self.replicas[0].metric_aliases()

    def private_network(self) -> str | None:
        return next((why for r in self.replicas if (why := r.private_network())), None)

    def log_locations(self) -> dict[str, Path]:
        return {replica_name(name, i): p for i, r in enumerate(self.replicas) for name, p in r.log_locations().items()}

    # --- what runs ---
    def engine_version(self) -> str:
        """The replicas' one version; LayerbenchError where they differ (one engine environment serves them all,
        so a difference means something else answered on a replica's port)."""
        versions = [r.engine_version() for r in self.replicas]
        if len(set(versions)) > 1:
            raise LayerbenchError(f"the {len(versions)} replicas run different engine versions: {', '.join(versions)}")
        return versions[0]

    def engine_plan(self) -> dict | None:
        plans = [r.engine_plan() for r in self.replicas]
        if plans[0] is None:
            return None
        return {**plans[0], "devices": list(self.settings.devices), "replicas": len(plans),
                "replica_devices": [p.get("devices") for p in plans if p]}

    def verify_config(self) -> AppliedConfig:
        """The first replica's applied settings, once every replica is shown to have the same."""
        configs = [r.verify_config() for r in self.replicas]
        for field in SAME:
            values = [getattr(c, field) for c in configs]
            if len({repr(v) for v in values}) > 1:
                raise LayerbenchError(f"the replicas applied different {field}: "
                                      + ", ".join(f"replica {i}: {v}" for i, v in enumerate(values)))
        return configs[0]

    def again(self, log_dir: Path) -> Stack:
        return ReplicaSet(self.settings.model_copy(update={"log_dir": log_dir}), self.make)

    def baseline(self) -> Stack | None:
        """N of the first replica's baseline (the reference engine is its own: an A/A)."""
        if self.replicas[0].baseline() is self.replicas[0]:
            return self

        def bare(s: DeploySettings) -> Stack:
            made = self.make(s)
            return made.baseline() or made

        return ReplicaSet(self.settings, bare)

    def frontend(self) -> str | None:
        """The vLLM API server every replica runs (stacks.base.engine_frontend)."""
        return frontend_of(self.replicas[0])

    def frontend_replaced(self) -> str | None:
        return replaced_by(self.replicas[0])

    def processes(self) -> dict[str, list[psutil.Process]]:
        return {replica_name(role, i): procs for i, r in enumerate(self.replicas)
                for role, procs in r.processes().items()}

    def describe(self) -> dict:
        return {**self.replicas[0].describe(), "replicas": len(self.replicas),
                "spread": self.settings.engine.baseline_spread}


def check_replicas(cls: type[Stack], replicas: int, target: str, options: dict) -> None:
    """LayerbenchError, before anything is deployed or resolved, where `replicas` engines cannot be deployed as
    asked: a stack that cannot front several, the docker target (one engine a side), or one port for N engines.
    The local target runs N engines on this host, the k8s target N engine pods (a stack without a k8s form is
    refused where the plan is rendered, naming the stacks that have one)."""
    if replicas == 1:
        return
    if not cls.replicas_by:
        raise LayerbenchError(f"stack {cls.kind} cannot front several engines (engine.replicas {replicas}): it runs "
                              f"one engine in a server of its own; use replicas 1, or a stack that routes "
                              f"({fronting()})")
    if target == "docker":  # the k8s target deploys each engine as a pod of its own (harness/targets/k8s/engines.py)
        raise LayerbenchError(f"engine.replicas {replicas}: the docker target deploys one engine a side (its docker "
                              "run commands start one engine container per side); run N engines a side on the k8s "
                              "target (--target k8s: a pod each) or on this host (the local target), or set "
                              "replicas 1")
    if cls.replicas_by == "client" and options.get("port"):
        raise LayerbenchError(f"--port / --opt port with engine.replicas {replicas}: each of the {replicas} engines "
                              "listens on a free port of its own; remove the port")


def build_stack(cls: type[Stack], settings: DeploySettings) -> Stack:
    """The deployment of stack `cls` with `settings.engine.replicas` engines: the stack itself for one; N bare
    engines (`replicas_by == "client"`) or the layer fronting N (`"layer"`) for more; refused (check_replicas)
    where that cannot be."""
    n = settings.engine.replicas
    check_replicas(cls, n, settings.target, settings.options)
    if missing := [f for f in cls.engine_flags(cls.checked_options(settings.options))
                   if f not in settings.engine.extra_args]:
        settings = settings.model_copy(update={"engine": settings.engine.model_copy(
            update={"extra_args": [*settings.engine.extra_args, *missing]})})
    if n == 1 or cls.replicas_by == "layer":
        return cls(settings)
    return ReplicaSet(settings, cls)


def fronting() -> str:
    from stacks.base import REGISTRY

    return ", ".join(sorted(k for k, c in REGISTRY.items() if c.replicas_by == "layer")) or "none installed"
