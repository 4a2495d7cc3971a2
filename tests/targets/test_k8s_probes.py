"""Preflight's probes against the API emulator, whose registry knows which vLLM each image carries: the engine
versions are settled before any engine is applied (a mismatched set refused with its table, a provisional
baseline rendered again for the stack image's vLLM), and an unknown tag, the placeholder load image, a model
missing from the HF-cache PVC and a namespace without GPU quota are each refused before any GPU is taken."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.images import DEFAULT_KSERVE_HF_IMAGE, DEFAULT_RAY_IMAGE, DEFAULT_TRITON_IMAGE
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.runner import RunOptions, run_plan
from stacks.base import DeploySettings, get_stack
from tests.k8s_emulator import Emulator

RUN = "20261201-101010-compare-ray-abc123"
LOAD = "registry.test/layerbench:1"
PROFILE = load_profile("quick")
# what a registry holds: each image and the vLLM inside it (the harness image has none)
REGISTRY = {"vllm/vllm-openai:v0.32.0": "0.32.0", "vllm/vllm-openai:v0.29.0": "0.29.0",
            "vllm/vllm-openai:v0.30.1": "0.30.1", DEFAULT_RAY_IMAGE: "0.29.0",
            DEFAULT_KSERVE_HF_IMAGE: "0.24.0", LOAD: "harness"}


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def plan(kind: str, cs: ClusterSettings, **options):
    stack = get_stack(kind)(DeploySettings(engine=PROFILE.engine, target="k8s", options=options))
    return render_plan(stack, PROFILE, cs, RUN, LoadCommand("compare", 1)), stack


def cluster(**kw) -> Emulator:
    """A cluster with the registry above and the HF-cache PVC the engines mount."""
    emu = Emulator(**{"images": REGISTRY, **kw})
    emu.put("api/v1", "persistentvolumeclaims", "layerbench", {"metadata": {"name": "hf-cache"}})
    return emu


def applied(emu: Emulator) -> list[str]:
    """The kinds this run created, in order."""
    return [path.rsplit("/", 1)[-1] for method, path, _ in emu.requests if method == "POST"]


def run(emu: Emulator, kind: str, cs: ClusterSettings, tmp_path, **options):
    p, stack = plan(kind, cs, **options)

    def rerender(version: str):
        return render_plan(stack, PROFILE, cs.model_copy(update={"vllm_version": version}), RUN,
                           LoadCommand("compare", 1))

    with Cluster(cs.namespace, RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5) as c:
        return run_plan(p, cs, tmp_path, quiet(), RunOptions(cluster=c, rerender=rerender))


def test_the_old_default_set_is_refused_before_any_engine_is_applied(tmp_path):
    """vllm 0.32.0 against ray-llm 2.60.0 (which bundles 0.29.0): found by the probes, not after a sweep."""
    with cluster() as emu:
        cs = ClusterSettings(load_image=LOAD, vllm_version="0.32.0")
        with pytest.raises(LayerbenchError) as e:
            run(emu, "ray", cs, tmp_path)
        text = str(e.value)
        assert "the images run different vLLM versions" in text
        assert "baseline (vllm): vllm/vllm-openai:v0.32.0 -> vLLM 0.32.0" in text
        assert f"stack (ray): {DEFAULT_RAY_IMAGE} -> vLLM 0.29.0" in text and "--allow-version-mismatch" in text
        assert set(applied(emu)) == {"jobs"}  # the probes only: no Deployment, no RayService
        assert emu.objects("Job") == [] and emu.objects("Pod") == []  # and they were deleted


def test_the_default_set_is_consistent_and_its_baseline_follows_the_stack(tmp_path):
    with cluster() as emu:
        p, _ = plan("ray", ClusterSettings(load_image=LOAD))
        assert p.engine["version"] == "0.29.0" and not p.engine["provisional"]
        assert p.sides[0].engine_images == ["vllm/vllm-openai:v0.29.0"]
        for label in ("baseline", "stack"):
            emu.behave(f"lb-{label}-{'vllm' if label == 'baseline' else 'ray'}-abc123", version="0.29.0")
        with pytest.raises(LayerbenchError, match="RESULTS"):  # the sides deploy; their loads return no results
            run(emu, "ray", ClusterSettings(load_image=LOAD), tmp_path)
        assert "deployments" in applied(emu)  # past preflight: the baseline was deployed


NEWER_TRITON = "nvcr.io/nvidia/tritonserver:26.07-vllm-python-py3"


def test_a_provisional_baseline_is_rendered_again_for_the_stack_images_vllm(tmp_path):
    """A Triton image not known to bundle a version: its probe says NVIDIA's 0.30.1+...nv26.7 build, and bare
    vLLM 0.30.1 (the release) is run; the two count as the same engine version."""
    cs = ClusterSettings(load_image=LOAD, triton_image=NEWER_TRITON)
    with cluster(images={**REGISTRY, NEWER_TRITON: "0.30.1+092c4842.nv26.7.57386851"}) as emu:
        p, _ = plan("triton", cs)
        assert p.engine["provisional"] and p.engine["stack_image"] == NEWER_TRITON
        with pytest.raises(LayerbenchError, match="RESULTS"):  # the sides deploy; their loads return no results
            run(emu, "triton", cs, tmp_path)
        engines = [c["image"] for o in emu.created if o["kind"] == "Deployment"
                   for c in o["spec"]["template"]["spec"]["containers"]]
        assert engines[0] == "vllm/vllm-openai:v0.30.1"  # the baseline, rendered again for Triton's vLLM
        probed = {c["image"] for o in emu.created if o["kind"] == "Job" and "probe" in o["metadata"]["name"]
                  for c in o["spec"]["template"]["spec"]["containers"]}
        assert {"vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.30.1", NEWER_TRITON, LOAD} <= probed


def test_the_default_triton_bundles_nvidias_build_of_a_release_the_baseline_runs(tmp_path):
    with cluster(images={**REGISTRY, "vllm/vllm-openai:v0.11.1": "0.11.1",
                         DEFAULT_TRITON_IMAGE: "0.11.1+9114fd76.nv25.12.cu131"}) as emu:
        p, _ = plan("triton", ClusterSettings(load_image=LOAD))
        assert p.engine["version"] == "0.11.1" and not p.engine["provisional"]
        assert p.sides[0].engine_images == ["vllm/vllm-openai:v0.11.1"]
        with pytest.raises(LayerbenchError, match="RESULTS"):  # past the version check: both sides deployed
            run(emu, "triton", ClusterSettings(load_image=LOAD), tmp_path)
        assert "deployments" in applied(emu)


@pytest.mark.parametrize(("cs", "registry", "message"), [
    (ClusterSettings(), REGISTRY, "load_image is the placeholder localhost/layerbench:unset"),
    (ClusterSettings(load_image=LOAD, ray_image="rayproject/ray-llm:9.9.9-py311-cu128"),
     REGISTRY, "image rayproject/ray-llm:9.9.9-py311-cu128 cannot be pulled"),
    (ClusterSettings(load_image="registry.test/not-layerbench:1"), {**REGISTRY, "registry.test/not-layerbench:1": None},
     "load_image registry.test/not-layerbench:1 is not layerbench's harness image"),
])
def test_images_are_checked_before_anything_is_deployed(tmp_path, cs, registry, message):
    with cluster(images=registry) as emu:
        with pytest.raises(LayerbenchError, match=message.replace("(", r"\(")):
            run(emu, "ray", cs, tmp_path)
        assert not {"deployments", "rayservices"} & set(applied(emu))


def test_a_model_missing_from_the_cache_pvc_is_refused(tmp_path):
    with cluster(models={"someone/else@main"}) as emu:
        with pytest.raises(LayerbenchError, match="the HF cache PVC hf-cache has no Qwen/Qwen2.5-1.5B-Instruct at "
                                                  "revision 989aa798"):
            run(emu, "vllm", ClusterSettings(load_image=LOAD), tmp_path)
        assert "deployments" not in applied(emu)


def test_a_namespace_quota_without_room_for_a_side_is_refused(tmp_path):
    with cluster(gpu_nodes={"gpu-1": 8}) as emu:
        emu.put("api/v1", "resourcequotas", "layerbench", {
            "metadata": {"name": "team-gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
            "status": {"used": {"requests.nvidia.com/gpu": "1"}}})
        cs = ClusterSettings(load_image=LOAD, replicas=2, gpus=2)
        with pytest.raises(LayerbenchError, match=r"ResourceQuota team-gpus in namespace layerbench leaves 3 of 4 "
                                                  r"requests.nvidia.com/gpu; a side \(2 replica\(s\) x 2 GPU\(s\)\) "
                                                  r"needs 4"):
            run(emu, "vllm", cs, tmp_path)
        assert applied(emu) == []


def test_a_missing_namespace_is_named_before_anything_is_created(tmp_path):
    with cluster(namespaces=("default",)) as emu:
        with pytest.raises(LayerbenchError, match=r"namespace layerbench does not exist: create it \(kubectl create "
                                                  r"namespace layerbench\)"):
            run(emu, "vllm", ClusterSettings(load_image=LOAD), tmp_path)
        assert applied(emu) == []


def test_a_kubeconfig_without_the_crds_is_refused(tmp_path):
    with cluster(crds=()) as emu:
        with pytest.raises(LayerbenchError, match="CRD rayservices.ray.io missing: install the KubeRay operator"):
            run(emu, "ray", ClusterSettings(load_image=LOAD), tmp_path)
        assert applied(emu) == []


@pytest.mark.slow  # a local compare of the reference engine first (~10 s)
def test_an_interrupted_compare_deletes_what_it_made_and_reports_what_it_measured(tmp_path, monkeypatch):
    """Ctrl-C during the stack's load: the baseline measured, everything deleted, the report marked interrupted."""
    from harness.cli.main import main
    from harness.targets.k8s import jobresults
    from tests.k8s_emulator import write_kubeconfig
    from tests.targets.test_k8s_compare import split_side

    local = tmp_path / "local"
    prof = tmp_path / "p.yaml"
    prof.write_text("concurrency: [2]\nrequests: 20\nrequests_per_concurrency: 0\noutput_tokens: 8\n"
                    "input_tokens: 32\nwarmup_sweep: false\nscrape: none\n")
    assert main(["compare", "--stack", "sim-proxy", "--profile", str(prof), "--repeats", "1", "--pairs", "2",
                 "--opt", "ttft_ms=10",
                 "--opt", "itl_ms=2", "--results-dir", str(local), "--reports-dir", str(tmp_path / "lr")]) == 0
    (run_local,) = local.iterdir()
    baseline = jobresults.pack(split_side(run_local, "baseline", tmp_path / "job"))
    real_finish = Cluster.finish_job

    def finish(self, ref, timeout_s, console=None):
        if ref.name.startswith("lb-stack-") and ref.name.endswith("-load"):
            raise KeyboardInterrupt
        return real_finish(self, ref, timeout_s, console)

    monkeypatch.setattr(Cluster, "finish_job", finish)
    with cluster() as emu:
        real = emu._log_of
        emu._log_of = lambda owner, b, c, i: (baseline if owner["metadata"]["name"].endswith("-load")
                                              else real(owner, b, c, i))
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"load_image: {LOAD}\n")
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", emu.url)))
        rc = main(["compare", "--stack", "vllm", "--profile", str(prof), "--target", "k8s", "--cluster-config",
                   str(cfg), "--results-dir", str(tmp_path / "k8s"), "--reports-dir", str(tmp_path / "reports")])
        left = [o for o in emu.store.values() if (o["metadata"].get("labels") or {}).get("layerbench.io/run")]
    assert rc == 130 and left == []
    (run,) = (tmp_path / "k8s").iterdir()
    s = json.loads((run / "compare.json").read_text())
    assert s["status"] == "interrupted" and s["runs"]["baseline"]["levels"]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert "interrupted" in (tmp_path / "reports" / run.name / "report.md").read_text()
