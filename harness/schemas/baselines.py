"""The baselines as data (baselines/ at the project root, described in baselines/README.md), typed and checked:

- versions/<stack>.yaml: per target (local, docker, k8s) the bare vLLM a stack is compared with, where its version
  comes from, the image it runs on the docker and k8s targets, and which checks hold both sides to one version;
  and the stack's own engine image with the vLLM and CUDA it carries (harness/targets/k8s/images.py reads these).
- published/<publication>.yaml: what a publication measured for a stack against bare vLLM, with its conditions;
  a deployment of the stack in the reference's `shape` gets it from Stack.published(), and the compare's report
  sets it beside the run.

Every file is validated whole: a malformed one is one LayerbenchError naming the file and the field. The folder is
read from the project root (the checkout, or the editable install the harness image makes), as manifests/ is."""

from __future__ import annotations

from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import LayerbenchError
from harness.schemas.deploy import PublishedResult

BASELINES = Path(__file__).resolve().parents[2] / "baselines"
TARGETS = ("local", "docker", "k8s")

Scalar = str | int | float | bool
# Where the baseline's vLLM version comes from:
#   engine-venv: the vLLM installed in the stack's engine environment (`venv`), which the baseline runs from too;
#   stack-image: the vLLM the stack's own engine image bundles (`image` below);
#   pinned: the cluster config's `vllm_version`, else the engine version this checkout pins
#           (harness/host/engine_build.py VLLM_VERSION); the stack's engine is that bare vLLM image too;
#   reference-engine: no vLLM: layerbench's reference engine of known timing, compared with itself.
VllmFrom = Literal["engine-venv", "stack-image", "pinned", "reference-engine"]
# How the match is verified (baselines/README.md says where each lives in the code):
#   engine-version: before anything deploys, both sides' engine_version() must agree (harness/procedures/compare.py
#                   check_versions; --allow-version-mismatch compares anyway), and the live answer of each side is
#                   recorded and a resume refused when it changed (harness/measure/session.py);
#   image-probe: every engine image's `vllm.__version__`, read by running it once before any engine starts
#                (docker: commands.sh's version check; k8s: preflight's probe Jobs); releases must agree;
#   pod-version: k8s: the version each side's engine pods print at startup; both sides' releases must agree.
Check = Literal["engine-version", "image-probe", "pod-version"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineImage(_Strict):
    """A stack's own engine image on the docker and k8s targets, and what it carries, each fact with its source."""

    name: str = Field(min_length=1)
    checked: date  # when the facts below were last read
    vllm: str = Field(min_length=1)
    vllm_source: str = Field(min_length=1)
    cuda: str = Field(pattern=r"^\d+(\.\d+)?$")
    cuda_source: str = Field(min_length=1)


class TargetBaseline(_Strict):
    """The bare vLLM a stack is compared with on one target, for the deployments of a `shape` ({}: every one)."""

    shape: dict[str, Scalar] = {}
    vllm_from: VllmFrom
    venv: str | None = None  # engine-venv: the environment, relative to the project root
    baseline_image: str | None = None  # docker, k8s: the bare vLLM's image, {vllm} standing for its version
    note: str = Field(min_length=1)
    checks: list[Check] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> TargetBaseline:
        if (self.vllm_from == "engine-venv") != (self.venv is not None):
            raise ValueError("venv: set it exactly when vllm_from is engine-venv")
        if self.baseline_image is not None and "{vllm}" not in self.baseline_image:
            raise ValueError("baseline_image: put {vllm} where the version goes (vllm/vllm-openai:v{vllm})")
        return self

    def matches(self, facts: dict[str, object]) -> bool:
        return all(k in facts and facts[k] == v for k, v in self.shape.items())

    def image(self, version: str) -> str | None:
        """The baseline's image for an engine version (its release: NVIDIA's 0.11.1+9114fd76.nv25.12 is 0.11.1)."""
        return self.baseline_image.format(vllm=version.split("+", 1)[0]) if self.baseline_image else None


class MatchedBaseline(_Strict):
    """versions/<stack>.yaml: the version-matched bare vLLM of one stack on each target it runs on."""

    stack: str = Field(min_length=1)
    image: EngineImage | None = None
    local: list[TargetBaseline] = Field(min_length=1)
    docker: list[TargetBaseline] = []  # none: the stack has no docker form
    k8s: list[TargetBaseline] = []  # none: the stack has no k8s form

    @model_validator(mode="after")
    def _consistent(self) -> MatchedBaseline:
        for target in TARGETS:
            for i, entry in enumerate(getattr(self, target)):
                where = f"{target}.{i}"
                if target == "local" and (entry.baseline_image or entry.vllm_from in ("stack-image", "pinned")):
                    raise ValueError(f"{where}: a local baseline runs from an environment, not an image")
                if target != "local" and entry.baseline_image is None:
                    raise ValueError(f"{where}.baseline_image: the docker and k8s baselines run an image")
                if entry.vllm_from == "stack-image" and self.image is None:
                    raise ValueError(f"{where}.vllm_from: stack-image needs the stack's `image`")
        return self

    def entry(self, target: str, facts: dict[str, object]) -> TargetBaseline | None:
        """The entry for a deployment on a target, given its shape (Stack.published_shape())."""
        return next((e for e in getattr(self, target) if e.matches(facts)), None)


class Conditions(_Strict):
    """What a publication measured under: its figures hold for runs of the same kind only."""

    model: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    vllm: str = Field(min_length=1)
    load: str = Field(min_length=1)


class Reference(_Strict):
    """One published result: the stack in a shape against bare vLLM at one concurrency, as the report quotes it."""

    stack: str = Field(min_length=1)
    shape: dict[str, Scalar] = {}  # the deployment's facts it holds for (Stack.published_shape()); {}: any
    concurrency: int = Field(ge=1)
    delta_pct: float
    verdict: Literal["overhead", "gain", "within noise"]
    source: str = Field(min_length=1)  # the report's words for the publication
    note: str | None = None

    def result(self) -> PublishedResult:
        return PublishedResult(concurrency=self.concurrency, delta_pct=self.delta_pct, verdict=self.verdict,
                               source=self.source)


class Publication(_Strict):
    """published/<name>.yaml: one publication and the results it reports."""

    title: str = Field(min_length=1)
    url: str | None = Field(None, pattern=r"^https?://")
    conditions: Conditions
    conditions_from: str = Field(min_length=1)  # where the conditions were read
    results: list[Reference] = Field(min_length=1)


def load_file(path: Path, model: type[BaseModel]) -> BaseModel:
    """One file, validated; one LayerbenchError naming the file and every field that is wrong."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise LayerbenchError(f"baseline file {path} cannot be read: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise LayerbenchError(f"baseline file {path} is not valid YAML: {str(e)[:300]}") from None
    if not isinstance(data, dict):
        raise LayerbenchError(f"baseline file {path}: expected a mapping of {', '.join(model.model_fields)}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '(file)'}: {err['msg']}" for err in e.errors())
        raise LayerbenchError(f"baseline file {path}: {problems}") from None


def _folder(folder: Path, model: type[BaseModel]) -> dict[str, BaseModel]:
    """Every file of a folder, read again only when one of them changed (name, size, modification time)."""
    if not folder.is_dir():
        raise LayerbenchError(f"{folder} is missing: the baselines ship with layerbench's checkout (baselines/)")
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.glob("*.yaml")))
    return _parsed(folder, model, stamp)


@lru_cache(maxsize=16)
def _parsed(folder: Path, model: type[BaseModel], stamp: tuple) -> dict[str, BaseModel]:
    return {(folder / name).stem: load_file(folder / name, model) for name, _, _ in stamp}


def matched_baselines(root: Path | None = None) -> dict[str, MatchedBaseline]:
    """versions/*.yaml by stack; each file is named after its stack."""
    folder = (root or BASELINES) / "versions"
    found: dict[str, MatchedBaseline] = _folder(folder, MatchedBaseline)  # type: ignore[assignment]
    for stem, m in found.items():
        if m.stack != stem:
            raise LayerbenchError(f"baseline file {folder / f'{stem}.yaml'}: stack: {m.stack!r}, but the file is "
                                  f"named for {stem!r} (versions/<stack>.yaml)")
    return found


def stack_images(root: Path | None = None) -> dict[str, EngineImage]:
    """The stacks' own engine images by stack (those that run one of their own on the docker and k8s targets)."""
    return {kind: m.image for kind, m in matched_baselines(root).items() if m.image is not None}


def publications(root: Path | None = None) -> dict[str, Publication]:
    """published/*.yaml by file name."""
    return _folder((root or BASELINES) / "published", Publication)  # type: ignore[return-value]


def published_for(kind: str, facts: dict[str, object], root: Path | None = None) -> PublishedResult | None:
    """The published result for a deployment of `kind` whose shape is `facts`, None where no publication measured
    that shape. A reference naming a fact the stack does not have, or two references for one shape, is refused."""
    folder = (root or BASELINES) / "published"
    hits = []
    for name, pub in publications(root).items():
        for i, ref in enumerate(pub.results):
            if ref.stack != kind:
                continue
            if missing := sorted(set(ref.shape) - set(facts)):
                raise LayerbenchError(f"baseline file {folder / f'{name}.yaml'}: results.{i}.shape: stack {kind} has "
                                      f"no {', '.join(missing)} (it has {', '.join(sorted(facts)) or 'none'})")
            if all(facts[k] == v for k, v in ref.shape.items()):
                hits.append((name, ref))
    if len(hits) > 1:
        raise LayerbenchError(f"more than one published result for {kind} in this shape: "
                              + ", ".join(f"{folder / f'{name}.yaml'} ({ref.source})" for name, ref in hits))
    return hits[0][1].result() if hits else None
