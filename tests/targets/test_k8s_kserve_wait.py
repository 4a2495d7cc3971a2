"""KServe on the k8s target against the API emulator: a stock install (default deployment mode Serverless) is
deployed, each InferenceService asking for RawDeployment; should the controller resolve Knative all the same
(KServe's controller then records status.deploymentMode Knative and makes nothing when Knative Serving is absent),
or the service not become Ready by the deadline, the run stops with the controller's reason and the ConfigMap fix.
The Hugging Face runtime (mode inprocess) is handed a commit-pinned model as its snapshot directory."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.runner import RunOptions, run_plan
from stacks.base import DeploySettings, get_stack
from tests.k8s_emulator import Emulator

RUN = "20261201-101010-run-kserve-abc123"
ISVC = "lb-stack-kserve-abc123"
LOAD = "registry.test/layerbench:1"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
PROFILE = load_profile("quick")
FIX = ("set defaultDeploymentMode to RawDeployment in ConfigMap kserve/inferenceservice-config, key deploy "
       "(kubectl edit configmap inferenceservice-config -n kserve), and restart the KServe controller")


def emulator(**kw) -> Emulator:
    emu = Emulator(**kw)
    emu.put("api/v1", "persistentvolumeclaims", "layerbench", {"metadata": {"name": "hf-cache"}})
    return emu


def run(emu: Emulator, cs: ClusterSettings, tmp_path, **options) -> str:
    """`run --stack kserve` (the stack's side only) on the emulator; the error it stops with."""
    stack = get_stack("kserve")(DeploySettings(engine=PROFILE.engine, target="k8s", options=options))
    plan = render_plan(stack, PROFILE, cs, RUN, LoadCommand("run", 1))
    with Cluster(cs.namespace, RUN, emu.api_client(), poll_s=0.002, request_timeout_s=5) as c:
        with pytest.raises(LayerbenchError) as e:
            run_plan(plan, cs, tmp_path, Console(file=io.StringIO(), width=200), RunOptions(cluster=c))
    return str(e.value)


def test_a_stock_install_deploys_and_a_knative_resolution_stops_with_the_reason_and_the_fix(tmp_path):
    with emulator(kserve_mode="Serverless") as emu:
        emu.behave(ISVC, "knative")
        error = run(emu, ClusterSettings(load_image=LOAD, ready_timeout_s=30), tmp_path)
        assert error.startswith(f"stack (kserve): InferenceService/{ISVC}: KServe resolved deployment mode Knative "
                                "for it (status.deploymentMode), which needs Knative Serving")
        assert error.endswith(f"if KServe ignored the annotation: {FIX}")
        assert emu.objects("InferenceService") == []  # deleted after the failure
        (isvc,) = [o for o in emu.created if o["kind"] == "InferenceService"]  # past preflight: it was applied
        assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"


def test_a_service_not_ready_by_the_deadline_says_what_kserve_reported_and_the_fix(tmp_path):
    with emulator(kserve_mode="Serverless") as emu:
        emu.behave(ISVC, "never")
        error = run(emu, ClusterSettings(load_image=LOAD, ready_timeout_s=0.2), tmp_path)
        assert f"InferenceService/{ISVC} not ready after 0.2 s: Ready=False (reason PredictorNotReady: predictor " \
               "not ready)" in error
        assert error.endswith(f"if KServe ignored the annotation: {FIX}")


def test_with_a_raw_default_a_late_service_names_no_configmap_fix(tmp_path):
    with emulator(kserve_mode="RawDeployment") as emu:
        emu.behave(ISVC, "never")
        error = run(emu, ClusterSettings(load_image=LOAD, ready_timeout_s=0.2), tmp_path)
        assert "not ready after 0.2 s" in error and "inferenceservice-config" not in error


@pytest.mark.parametrize(("revision", "model_args"), [
    (COMMIT, [f"--model_dir=/mnt/hf-cache/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}"]),
    ("main", ["--model_id=Qwen/Qwen2.5-0.5B-Instruct", "--model_revision=main"])])
def test_the_hugging_face_runtime_is_handed_the_snapshot_of_a_commit(tmp_path, revision, model_args):
    """A cache filled at a commit has no refs/main, which KServe's vLLM check (AutoConfig with no revision) needs
    offline: the runtime gets the snapshot directory instead; a branch goes by repo id and revision."""
    with emulator() as emu:
        cs = ClusterSettings(load_image=LOAD, model="Qwen/Qwen2.5-0.5B-Instruct", model_revision=revision)
        assert "RESULTS" in run(emu, cs, tmp_path, mode="inprocess")  # deployed and loaded; the fake load sends none
        (isvc,) = [o for o in emu.created if o["kind"] == "InferenceService"]
        args = isvc["spec"]["predictor"]["model"]["args"]
        assert args[:len(model_args) + 1] == [*model_args, "--backend=vllm"]
        assert not any(a.startswith(("--model_id", "--model_revision")) for a in args[len(model_args):])
        (runtime,) = [o for o in emu.created if o["kind"] == "ServingRuntime"]
        mounts = runtime["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "hf-cache", "mountPath": "/mnt/hf-cache", "readOnly": True} in mounts  # the whole cache
