"""Which Triton model serves, and the model repository it is served from.

Two models can run behind the local Triton stack:
- layerbench's Python-backend model (scripts/triton_vllm_model.py), modelled on NVIDIA's vLLM backend (a response
  thread fed by a queue, the engine built as vLLM's OpenAI server builds it), the default;
- a user's copy of NVIDIA's vLLM backend, `TRITON_VLLM_MODEL=path/to/model.py` (its `src/model.py` from
  github.com/triton-inference-server/vllm_backend, with the `utils/` package that sits beside it), served from the
  same repository layout NVIDIA's samples use: `<model>/config.pbtxt` and `<model>/1/model.json`, the engine's
  AsyncEngineArgs as JSON (vllm_backend samples/model_repository/vllm_model; README "Using the vLLM Backend").
  Its config.pbtxt names the Python backend, so Triton loads the copy in the version directory (NVIDIA's image
  names `backend: "vllm"`, which loads the backend installed under backends/vllm instead); inputs, outputs and
  the decoupled policy come from the model's own `auto_complete_config`, as with NVIDIA's sample config.
On the docker and k8s targets NVIDIA's Triton image serves its own vLLM backend.

Only NVIDIA's backend is what "the single-GPU study of Triton's vLLM backend" measured, so the study's figures are
set beside a run only when it served."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LayerbenchError
from stacks.base import PROJECT_ROOT

MODEL_PY = PROJECT_ROOT / "scripts" / "triton_vllm_model.py"
USER_MODEL_ENV = "TRITON_VLLM_MODEL"
OURS = "layerbench's Python model modelled on NVIDIA's vLLM backend"
NVIDIA = "NVIDIA's vLLM backend"
IN_IMAGE = f"{NVIDIA} (the Triton image's)"

CONFIG_PBTXT = """\
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] }},
  {{ name: "stream", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }},
  {{ name: "sampling_parameters", data_type: TYPE_STRING, dims: [ 1 ], optional: true }},
  {{ name: "exclude_input_in_output", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }},
  {{ name: "return_num_input_tokens", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }},
  {{ name: "return_num_output_tokens", data_type: TYPE_BOOL, dims: [ 1 ], optional: true }}
]
output [
  {{ name: "text_output", data_type: TYPE_STRING, dims: [ -1 ] }},
  {{ name: "num_output_tokens", data_type: TYPE_UINT32, dims: [ -1 ] }},
  {{ name: "num_input_tokens", data_type: TYPE_UINT32, dims: [ -1 ] }}
]
instance_group [ {{ count: 1, kind: {kind} }} ]
"""

# NVIDIA's backend completes inputs, outputs, max_batch_size 0 and the decoupled policy itself
# (TritonPythonModel.auto_complete_config in its src/model.py); its vLLM metrics are published only with the
# REPORT_CUSTOM_METRICS parameter (its README, "Triton Metrics")
NVIDIA_CONFIG_PBTXT = """\
name: "{name}"
backend: "{backend}"
instance_group [ {{ count: 1, kind: {kind} }} ]
"""
REPORT_CUSTOM_METRICS = """\
parameters: {
  key: "REPORT_CUSTOM_METRICS"
  value: { string_value: "true" }
}
"""


@dataclass(frozen=True)
class TritonModel:
    """The model a Triton deployment serves: layerbench's (path None, nvidia False), a user's copy of NVIDIA's
    vLLM backend (its model.py), or the one in NVIDIA's image (docker and k8s targets)."""

    label: str
    nvidia: bool
    path: Path | None = None


def choose_model(target: str) -> TritonModel:
    """From TRITON_VLLM_MODEL and the target; a value that cannot serve is refused before anything deploys."""
    value = os.environ.get(USER_MODEL_ENV, "").strip()
    if target != "local":
        if value:
            raise LayerbenchError(f"{USER_MODEL_ENV} is set, but the {target} target serves the vLLM backend in "
                                  f"NVIDIA's Triton image: unset {USER_MODEL_ENV}, or use --target local")
        return TritonModel(IN_IMAGE, nvidia=True)
    if not value:
        return TritonModel(OURS, nvidia=False)
    path = Path(value).expanduser()
    if not path.is_file():
        raise LayerbenchError(f"{USER_MODEL_ENV}={value} is not a file: point it at a copy of NVIDIA's vLLM "
                              "backend's src/model.py (github.com/triton-inference-server/vllm_backend, with its "
                              f"utils/ folder beside it), or unset {USER_MODEL_ENV} to serve layerbench's model")
    imports_utils = re.search(r"^\s*from utils[. ]", path.read_text(errors="replace"), re.M)
    if imports_utils and not (path.parent / "utils").is_dir():
        raise LayerbenchError(f"{path} imports the utils package NVIDIA's backend keeps beside model.py, and "
                              f"{path.parent / 'utils'} is missing: copy the backend's src/ folder whole and set "
                              f"{USER_MODEL_ENV} to its model.py")
    return TritonModel(f"{NVIDIA} ({value})", nvidia=True, path=path.resolve())


def model_json(spec: dict) -> str:
    """NVIDIA's model.json: the engine's AsyncEngineArgs, without layerbench's own option."""
    return json.dumps({k: v for k, v in spec.items() if k != "report_engine_metrics"}, indent=2)


def nvidia_config_pbtxt(name: str, kind: str, report_metrics: bool, backend: str = "python") -> str:
    """config.pbtxt for NVIDIA's backend: "python" loads a copy in the version directory, "vllm" the backend
    installed in the image (its samples/model_repository/vllm_model/config.pbtxt)."""
    text = NVIDIA_CONFIG_PBTXT.format(name=name, backend=backend, kind=kind)
    return text + (REPORT_CUSTOM_METRICS if report_metrics else "")


def config_text(model: TritonModel, name: str, kind: str, report_metrics: bool) -> str:
    """The config.pbtxt the local repository gives `model`."""
    if model.path is None:
        return CONFIG_PBTXT.format(name=name, kind=kind)
    return nvidia_config_pbtxt(name, kind, report_metrics)


def write_repository(model: TritonModel, model_dir: Path, kind: str, spec: dict) -> None:
    """<repository>/<name>/config.pbtxt and 1/: our model with engine.json, or the user's copy of NVIDIA's backend
    (model.py and its utils/ package) with model.json. The repository is made afresh."""
    version = model_dir / "1"
    shutil.rmtree(model_dir.parent, ignore_errors=True)
    version.mkdir(parents=True)
    config = config_text(model, model_dir.name, kind, bool(spec.get("report_engine_metrics")))
    (model_dir / "config.pbtxt").write_text(config)
    if model.path is None:
        shutil.copy(MODEL_PY, version / "model.py")
        (version / "engine.json").write_text(json.dumps(spec, indent=2))
        return
    shutil.copy(model.path, version / "model.py")
    if (model.path.parent / "utils").is_dir():
        shutil.copytree(model.path.parent / "utils", version / "utils",
                        ignore=shutil.ignore_patterns("__pycache__"))
    (version / "model.json").write_text(model_json(spec))
