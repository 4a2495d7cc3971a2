"""Several engine pods a side on the k8s target (the profile's `engine.replicas`, REPLICAS=N), deployed as the local
target deploys N engines (stacks/base/replicas.py): each engine its own Deployment and Service (under Ray, its own
worker group), asking for tensor_parallel_size GPUs of its own. The bare side's load Job spreads its requests over
the engines' Services itself, by the profile's `engine.baseline_spread` (harness/load/spread.py); a routing layer
is given every engine's Service. Each engine's metrics are named `<name>@<i>` (stacks.base.replicas.replica_name),
so the analysis reads the engines as one and each on its own (harness/analysis/replicas.py).

One engine keeps the object names and labels it always had; each of several is `<side's name>-<i>`, its pods also
labelled layerbench.io/replica=<i>. That label keeps the Deployments' selectors apart: Kubernetes does not stop
two controllers from selecting the same pods, and ones that do "might conflict and behave unexpectedly"
(https://kubernetes.io/docs/concepts/workloads/controllers/deployment/, Creating a Deployment). The side's engine
selector leaves it out, so it matches every engine pod (versions, logs, GPUs freed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.errors import LayerbenchError
from stacks.base.replicas import replica_name

if TYPE_CHECKING:
    from harness.profile.schema import EngineSettings
    from harness.targets.k8s.common import Deployed
    from harness.targets.k8s.plan import ClusterSettings
    from stacks.base import Stack

REPLICA_LABEL = "layerbench.io/replica"


def engine_count(stack: Stack) -> int:
    """The engines a side deploys: the profile's engine.replicas (each one pod, as check_engines leaves it)."""
    return stack.settings.engine.replicas


def replica_object(name: str, index: int, count: int) -> str:
    """Engine `index`'s object name: the side's own for one engine, `<name>-<index>` for each of several."""
    return name if count == 1 else f"{name}-{index}"


def replica_labels(labels: dict[str, str], index: int, count: int) -> dict[str, str]:
    """Engine `index`'s pod labels: the side's engine labels, and its index where there are several."""
    return dict(labels) if count == 1 else {**labels, REPLICA_LABEL: str(index)}


def named(urls: list[str], name: str) -> dict[str, str]:
    """Metric endpoints by name: `name` for one engine's URL, `name@0`, `name@1`, ... for several."""
    return {name: urls[0]} if len(urls) == 1 else {replica_name(name, i): u for i, u in enumerate(urls)}


def engine_urls(engines: Deployed) -> list[str]:
    """Every engine's base URL of a rendered bare side: what a routing layer in front of them is given."""
    return list(engines.spread) or [engines.url]


def engine_metrics(engines: Deployed, name: str = "engine") -> dict[str, str]:
    """Each engine's /metrics behind a layer, as the local fronted stacks name them (engine, or engine@<i>)."""
    return named([f"{u}/metrics" for u in engine_urls(engines)], name)


def check_engines(cs: ClusterSettings, engine: EngineSettings) -> None:
    """The cluster config's `replicas` (pods behind one Service, which the Service spreads over) and the profile's
    engine.replicas (one Deployment and Service per engine, each read on its own) both ask for several engines:
    one of them must be 1, or the engines per side and whose metrics are whose would be ambiguous."""
    if engine.replicas > 1 and cs.replicas > 1:
        raise LayerbenchError(f"engine.replicas {engine.replicas} (REPLICAS=) and the cluster config's replicas "
                              f"{cs.replicas} both ask for several engines a side: engine.replicas deploys each engine "
                              "as its own Deployment and Service, read on its own; set the cluster config's replicas "
                              "to 1")
