"""KServe RawDeployment objects for a vLLM model, rendered from manifests/kserve/ (one ServingRuntime whose
container is vLLM's own OpenAI server, one InferenceService with the RawDeployment annotation), and the
process that such a pod runs: the runtime container's command, its args followed by the model's args (the
order in which KServe merges them), its env, with the model path and port the pod would get.

The local `raw` mode runs exactly that process, so the compare measures what RawDeployment changes in the
request path: the runtime's flags and env. The one local change: the server binds 127.0.0.1, not the pod's
0.0.0.0."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import yaml

from stacks.base import PROJECT_ROOT, DeploySettings

TEMPLATES = PROJECT_ROOT / "manifests" / "kserve"
POD_PORT = 8080  # KServe's runtime containers listen here; the pod's Service points at it
POD_MODEL_DIR = "/mnt/models"  # where KServe's storage initializer puts storageUri
DEFAULT_IMAGE = "vllm/vllm-openai"


@dataclass(frozen=True)
class RuntimeContainer:
    """The ServingRuntime's container: its image (vLLM's official one unless named) and tag, and the CPU and memory
    it asks for."""

    image: str | None = None
    version: str = "latest"
    cpu: str = "2"
    memory: str = "8Gi"


def render(settings: DeploySettings, engine_flags: list[str], name: str = "layerbench",
           storage_uri: str | None = None, container: RuntimeContainer | None = None) -> list[dict[str, Any]]:
    """[ServingRuntime, InferenceService] as they would be applied; engine_flags are the bare vLLM baseline's
    engine flags (stacks.vllm.engine_args), so both sides run the same engine settings."""
    c = container or RuntimeContainer()
    values = {"name": name, "runtime": f"{name}-vllm", "image": f"{c.image or DEFAULT_IMAGE}:{c.version}",
              "storage_uri": storage_uri or f"pvc://models/{settings.served_model_name}", "cpu": c.cpu,
              "memory": c.memory}
    runtime = yaml.safe_load(Template((TEMPLATES / "servingruntime-vllm.yaml").read_text()).substitute(values))
    isvc = yaml.safe_load(Template((TEMPLATES / "inferenceservice-raw.yaml").read_text()).substitute(values))
    isvc["spec"]["predictor"]["model"]["args"] = list(engine_flags)
    return [runtime, isvc]


def pod_process(runtime: dict[str, Any], isvc: dict[str, Any], model_path: Path, port: int,
                host: str = "127.0.0.1") -> tuple[list[str], dict[str, str]]:
    """(command line, env) of the predictor pod's container, with the model at `model_path` instead of
    /mnt/models, listening on host:port instead of the pod's 0.0.0.0:8080."""
    container = runtime["spec"]["containers"][0]
    name = isvc["metadata"]["name"]
    args = [*container.get("args", []), *isvc["spec"]["predictor"]["model"].get("args", [])]
    local = []
    for arg in args:
        arg = arg.replace("{{.Name}}", name).replace(POD_MODEL_DIR, str(model_path))
        local.append(f"--port={port}" if arg == f"--port={POD_PORT}" else arg)
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return [*container["command"], *local, f"--host={host}"], env
