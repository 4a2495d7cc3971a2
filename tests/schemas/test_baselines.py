"""The baselines as data (baselines/, read by harness/schemas/baselines.py): every file loads, a malformed one is one
LayerbenchError naming the file and the field, the version-matched baselines are the ones the adapters and the
docker and k8s renderings really deploy, and each stack's published values are what its compare report shows."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.errors import LayerbenchError
from harness.host.engine_build import VLLM_VERSION
from harness.profile.loading import load_profile
from harness.profile.models import STUDY_MODEL
from harness.reporting.report import _published
from harness.schemas import PublishedResult
from harness.schemas import baselines as bl
from harness.targets.k8s import images
from harness.targets.k8s.docker import render_docker
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.remote_run import Where, skeleton
from stacks.base import PROJECT_ROOT, REGISTRY, DeploySettings
from stacks.kserve import KServeStack
from stacks.ray import RayStack
from stacks.triton import TritonStack
from tests.stacks.test_triton_stack import settings
from tests.targets.test_k8s_render import plan as k8s_plan

EXAMPLES = PROJECT_ROOT / "reports" / "examples"
NO_BASELINE = {"endpoint"}  # a server layerbench did not start: no version-matched bare vLLM to set beside it


@pytest.fixture(autouse=True)
def _no_user_model(monkeypatch):
    monkeypatch.delenv("TRITON_VLLM_MODEL", raising=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the shipped baselines/ to break or extend."""
    return Path(shutil.copytree(bl.BASELINES, tmp_path / "baselines"))


def edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def deployment(kind: str, target: str, tmp_path: Path, **options):
    return REGISTRY[kind](DeploySettings(target=target, log_dir=tmp_path, options=options))


# --- every file loads ---------------------------------------------------------------------------------------------
def test_every_file_loads_and_every_stack_with_a_baseline_has_one():
    files = sorted(bl.BASELINES.glob("*/*.yaml"))
    assert {p.parent.name for p in files} == {"versions", "published"}
    matched, pubs = bl.matched_baselines(), bl.publications()
    assert len(matched) + len(pubs) == len(files)
    assert set(matched) == set(REGISTRY) - NO_BASELINE
    assert {r.stack for p in pubs.values() for r in p.results} <= set(REGISTRY)
    for pub in pubs.values():  # every study of this suite measured its model, at the pinned revision
        assert pub.conditions.model == STUDY_MODEL[0]


# --- a malformed file: one error, naming the file and the field ---------------------------------------------------
@pytest.mark.parametrize(("where", "change", "field"), [
    ("published/ray-serve-llm-single-gpu.yaml", lambda d: d["results"][0].update(delta_pct="a lot"),
     "results.0.delta_pct"),
    ("published/kserve-rawdeployment-single-gpu.yaml", lambda d: d["results"][0].update(verdict="fine"),
     "results.0.verdict"),
    ("published/triton-vllm-backend-single-gpu.yaml", lambda d: d["conditions"].pop("gpu"), "conditions.gpu"),
    ("versions/ray.yaml", lambda d: d["image"].update(vllm=0.29), "image.vllm"),
    ("versions/kserve.yaml", lambda d: d["k8s"][1].update(checks=["by eye"]), "k8s.1.checks.0"),
    ("versions/triton.yaml", lambda d: d["local"][0].update(venvs=".venv-triton"), "local.0.venvs"),
    ("versions/vllm.yaml", lambda d: d["docker"][0].update(baseline_image="vllm/vllm-openai:latest"),
     "docker.0: Value error, baseline_image"),
])
def test_a_malformed_file_is_one_error_naming_the_file_and_the_field(tree, where, change, field):
    edit(tree / where, change)
    loader = bl.publications if where.startswith("published") else bl.matched_baselines
    with pytest.raises(LayerbenchError) as e:
        loader(tree)
    assert str(e.value).startswith(f"baseline file {tree / where}: ") and field in str(e.value)


def test_a_file_that_is_not_yaml_or_names_another_stack_is_refused(tree):
    (tree / "published" / "broken.yaml").write_text("title: [unclosed\n")
    with pytest.raises(LayerbenchError, match=rf"^baseline file {tree}/published/broken.yaml is not valid YAML"):
        bl.publications(tree)
    shutil.copy(tree / "versions" / "ray.yaml", tree / "versions" / "rayy.yaml")
    with pytest.raises(LayerbenchError, match=r"rayy.yaml: stack: 'ray', but the file is named for 'rayy'"):
        bl.matched_baselines(tree)


# --- the version-matched baselines are the ones deployed ----------------------------------------------------------
def _shapes() -> list:
    """(stack, shape) for every shape some entry of the stack's file names ({}: the stack's one shape)."""
    out = []
    for kind, m in sorted(bl.matched_baselines().items()):
        entries = [e for target in bl.TARGETS for e in getattr(m, target)]
        for shape in {json.dumps(e.shape, sort_keys=True): e.shape for e in entries}.values():
            out.append(pytest.param(kind, shape, id="-".join([kind, *(f"{k}={v}" for k, v in shape.items())])))
    return out


@pytest.mark.parametrize(("kind", "shape"), _shapes())
def test_the_local_baseline_runs_from_the_environment_the_file_names(tmp_path, kind, shape):
    stack = deployment(kind, "local", tmp_path, **shape)
    entry = bl.matched_baselines()[kind].entry("local", stack.published_shape())
    assert entry is not None and entry.checks == ["engine-version"]
    base = stack.baseline()
    if entry.vllm_from == "reference-engine":
        assert base.kind == "sim"
        return
    assert base.kind == "vllm" and base.venv == stack.engine_venv == PROJECT_ROOT / entry.venv


@pytest.mark.parametrize(("kind", "shape"), _shapes())
def test_the_docker_and_k8s_baselines_are_the_images_rendered(tmp_path, kind, shape):
    m = bl.matched_baselines()[kind]
    for target, has_form in (("docker", REGISTRY[kind].docker_form), ("k8s", REGISTRY[kind].k8s_form)):
        entry = m.entry(target, deployment(kind, target, tmp_path, **shape).published_shape())
        if entry is None:  # KServe's proxy mode has no docker form; a local-only stack has neither
            assert not getattr(m, target) or shape == {"mode": "proxy"}
            assert has_form is None or getattr(m, target)
            continue
        assert has_form is not None
        version = m.image.vllm if entry.vllm_from == "stack-image" else VLLM_VERSION
        stack_image = m.image.name if entry.vllm_from == "stack-image" else entry.image(version)
        if target == "docker":
            s = deployment(kind, "docker", tmp_path, **shape)
            rendered = render_docker(s, load_profile("quick"), ClusterSettings(check_driver=False), "r-1", "compare")
            assert [side.engine_image for side in rendered.sides] == [entry.image(version), stack_image]
            assert entry.checks == ["image-probe"]
        else:
            rendered = k8s_plan(kind, **shape)
            assert rendered.sides[0].engine_images == [entry.image(version)]
            assert rendered.sides[1].engine_images == [stack_image]
            assert entry.checks == ["image-probe", "pod-version"]
        assert entry.image(version) == images.vllm_image(version)


def test_the_images_module_reads_the_stack_images_from_the_files():
    found = bl.stack_images()
    assert (images.DEFAULT_RAY_IMAGE, images.DEFAULT_TRITON_IMAGE, images.DEFAULT_KSERVE_HF_IMAGE) == \
        (found["ray"].name, found["triton"].name, found["kserve"].name)
    assert images.BUNDLED == {i.name: (i.vllm, i.vllm_source) for i in found.values()}
    assert images.IMAGE_CUDA == {i.name: (i.cuda, i.cuda_source) for i in found.values()}
    assert images.known_vllm(found["triton"].name) == "0.11.1"


# --- the published results: what the report shows -----------------------------------------------------------------
def _example_line(run: str) -> str:
    [line] = [x for x in (EXAMPLES / run / "report.md").read_text().splitlines() if " measured " in x and "c=" in x
              and x.startswith("- The ")]
    return line


@pytest.mark.parametrize(("stack", "options", "run"), [
    (RayStack, {}, "20261201-155527-compare-ray-ccbf69"),
    (KServeStack, {"mode": "raw"}, "20261201-171145-compare-kserve-e80704"),
    (TritonStack, {}, "20261201-165644-compare-triton-7f5149"),
])
@pytest.mark.parametrize("target", ["docker", "k8s"])
def test_each_stacks_published_values_are_what_its_report_shows(tmp_path, stack, options, run, target):
    """The compare's report line, from the summary a remote compare starts with (the fixture of test_triton_stack),
    is the committed example report's, and the values are the example summary's."""
    s = stack(settings(tmp_path, target=target, **options))
    summary = skeleton(s, load_profile("default"), "r1", 1, Where(target, *STUDY_MODEL))
    [line] = _published(summary)
    said = line.split("; this run")[0]
    assert _example_line(run).startswith(said + "; this run")
    example = json.loads((EXAMPLES / run / "summary.json").read_text())["published"]
    assert summary.published.model_dump() == example
    assert s.published() == summary.published


def test_every_reference_agrees_with_every_example_report_that_quotes_it():
    refs = {r.source: r for p in bl.publications().values() for r in p.results}
    quoted = 0
    for path in sorted(EXAMPLES.glob("*/summary.json")):
        p = json.loads(path.read_text()).get("published")
        if p is not None:
            assert p == refs[p["source"]].result().model_dump(), path
            quoted += 1
    assert quoted >= len(refs)


def test_each_reference_names_facts_its_stack_has(tmp_path):
    for pub in bl.publications().values():
        for r in pub.results:
            assert set(r.shape) <= set(deployment(r.stack, "docker", tmp_path).published_shape()), r


def test_the_shapes_nothing_published_measures_carry_none(tmp_path):
    assert deployment("kserve", "local", tmp_path, mode="proxy").published() is None
    assert deployment("ray", "local", tmp_path, ingress_replicas=4).published() is None
    assert TritonStack(settings(tmp_path)).published() is None  # layerbench's model, not NVIDIA's backend
    for kind in ("vllm", "litellm", "vllm-router", "sim", "sim-proxy"):
        assert deployment(kind, "local", tmp_path).published() is None


# --- adding a reference is adding a file --------------------------------------------------------------------------
def test_a_reference_added_as_a_file_reaches_the_stack(tree, tmp_path, monkeypatch):
    (tree / "published" / "litellm-proxy.yaml").write_text(yaml.safe_dump({
        "title": "A study of LiteLLM's proxy", "url": "https://example.org/litellm-study",
        "conditions": {"model": STUDY_MODEL[0], "gpu": "one H100", "vllm": "0.32.0", "load": "c = 1..64"},
        "conditions_from": "the study", "results": [{"stack": "litellm", "concurrency": 16, "delta_pct": -4.5,
                                                     "verdict": "overhead", "source": "A study of LiteLLM's proxy"}]}))
    monkeypatch.setattr(bl, "BASELINES", tree)
    assert deployment("litellm", "local", tmp_path).published() == PublishedResult(
        concurrency=16, delta_pct=-4.5, verdict="overhead", source="A study of LiteLLM's proxy")
    assert RayStack(DeploySettings(log_dir=tmp_path)).published().delta_pct == -70.0  # the shipped ones stay


def test_a_reference_for_a_fact_the_stack_lacks_or_a_second_one_for_a_shape_is_refused(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(bl, "BASELINES", tree)
    path = tree / "published" / "ray-serve-llm-single-gpu.yaml"
    edit(path, lambda d: d["results"].append({**copy.deepcopy(d["results"][0]), "source": "another"}))
    with pytest.raises(LayerbenchError, match="more than one published result for ray in this shape: .*another"):
        RayStack(DeploySettings(log_dir=tmp_path)).published()
    edit(path, lambda d: d["results"][1]["shape"].update(ingress_replica=2))
    with pytest.raises(LayerbenchError, match=rf"^baseline file {path}: results.1.shape: stack ray has no "
                                              "ingress_replica"):
        RayStack(DeploySettings(log_dir=tmp_path)).published()
