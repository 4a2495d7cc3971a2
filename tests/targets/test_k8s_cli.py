"""`layerbench compare --target k8s --dry-run` end to end, in-process: for every stack it writes one manifest
file per side and plan.json that pass the three validators, touches no cluster and no run record; an invalid
rendering is refused with one line per problem and nothing written; bad combinations are refused."""

from __future__ import annotations

import pytest
import yaml

from harness.cli.main import main
from harness.targets.k8s.plan import K8sPlan
from harness.targets.k8s.validate import object_problems


@pytest.mark.parametrize(("kind", "extra"), [
    ("vllm", []),
    # a second or two each (the validators' schemas): `make test` runs them, `make test-fast` renders every stack
    # in test_k8s_render instead
    pytest.param("ray", [], marks=pytest.mark.slow), pytest.param("triton", [], marks=pytest.mark.slow),
    pytest.param("kserve", [], marks=pytest.mark.slow),
    pytest.param("kserve", ["--opt", "mode=inprocess"], marks=pytest.mark.slow),
    pytest.param("kserve", ["--opt", "mode=proxy"], marks=pytest.mark.slow)])
def test_compare_dry_run_writes_valid_manifests(kind, extra, tmp_path, capsys, monkeypatch):
    def no_cluster(*args, **kwargs):
        raise AssertionError("a dry run must not reach the cluster")

    monkeypatch.setattr("harness.targets.k8s.runner.run_plan", no_cluster)
    rc = main(["compare", "--stack", kind, *extra, "--target", "k8s", "--dry-run", "--results-dir", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    (run,) = tmp_path.iterdir()
    files = sorted(p.name for p in (run / "manifests").iterdir())
    assert files == sorted(["baseline-vllm.yaml", f"stack-{kind}.yaml", "plan.json"])
    assert sorted(p.name for p in run.iterdir()) == ["manifests"]  # no run.json: nothing ran
    out = capsys.readouterr().out
    for name in files:
        assert str(run / "manifests" / name) in out
    for name in [f for f in files if f.endswith(".yaml")]:
        docs = list(yaml.safe_load_all((run / "manifests" / name).read_text()))
        assert object_problems(docs, "1.33") == [], name
        assert docs[-1]["kind"] == "Job"
    plan = K8sPlan.model_validate_json((run / "manifests" / "plan.json").read_text())
    assert plan.run_id == run.name and [s.label for s in plan.sides] == ["baseline", "stack"]


def test_an_invalid_rendering_is_refused_with_every_problem(tmp_path, capsys, monkeypatch):
    from harness.targets.k8s import render_vllm

    real = render_vllm.render_vllm

    def broken(*args, **kwargs):
        deployed = real(*args, **kwargs)
        pod = deployed.objects[0]["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        pod["containers"][0]["securityContext"]["privileged"] = True
        deployed.objects[1]["spec"]["selectr"] = {}
        return deployed

    monkeypatch.setattr(render_vllm, "render_vllm", broken)  # what the vllm adapter's k8s_form names
    rc = main(["run", "--stack", "vllm", "--target", "k8s", "--dry-run", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "did not pass validation (3 problems)" in err
    assert "'selectr' was unexpected" in err and "hostNetwork is true" in err and "privileged container" in err
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_k8s_without_dry_run_hands_the_plan_to_the_runner(tmp_path, monkeypatch, capsys):
    seen = {}

    def run_plan(plan, settings, out_dir, console, options):
        seen.update(plan=plan, out_dir=out_dir, options=options)
        return 0

    monkeypatch.setattr("harness.targets.k8s.runner.run_plan", run_plan)
    monkeypatch.setattr("harness.targets.k8s.validate.plan_problems", lambda plan, version, crd_dir=None: [])
    assert main(["run", "--stack", "vllm", "--target", "k8s", "--results-dir", str(tmp_path)]) == 0
    (run,) = tmp_path.iterdir()
    assert seen["out_dir"] == run and [s.label for s in seen["plan"].sides] == ["stack"]
    assert (run / "manifests" / "stack-vllm.yaml").exists()  # what was applied is kept with the run
    assert seen["options"].allow_version_mismatch is False and callable(seen["options"].rerender)


@pytest.mark.parametrize(("argv", "message"), [
    (["compare", "--resume", "x", "--dry-run"], "--dry-run plans a new run; it cannot be combined with --resume"),
    (["compare", "--resume", "x", "--target", "k8s"], "cannot be combined with --target k8s"),
    (["compare", "--stack", "sim", "--target", "k8s", "--dry-run"], "stack sim has no k8s form"),
    (["audit", "--stack", "kserve", "--opt", "mode=nothing", "--target", "k8s", "--dry-run"],
     "stack kserve: option mode"),
    (["compare", "--stack", "ray", "--opt", "ingress_replicas=0", "--target", "k8s", "--dry-run"],
     "stack ray: option ingress_replicas"),
    (["run", "--stack", "vllm", "--cluster-config", "c.yaml"], "--cluster-config needs --target docker or"),
    # a cluster or docker compare deploys each side once: a design or export asked of it is refused, not dropped
    (["compare", "--stack", "ray", "--target", "k8s", "--pairs", "3", "--dry-run"],
     "PAIRS=: the k8s target deploys each side once"),
    (["compare", "--stack", "ray", "--target", "docker", "--mde", "2%", "--budget", "20m", "--max-pairs", "4",
      "--export", "benchmark-report"],
     "MDE=, BUDGET=, MAX_PAIRS=, --export: the docker target"),
])
def test_bad_combinations_are_refused_before_anything_is_written(argv, message, tmp_path, capsys):
    assert main([*argv, "--results-dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_cluster_settings_come_from_the_cluster_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("harness.targets.k8s.validate.plan_problems", lambda plan, version, crd_dir=None: [])
    config = tmp_path / "cluster.yaml"
    config.write_text("namespace: bench\ngpus: 2\nruntime_class: nvidia\n")
    results = tmp_path / "results"
    argv = ["run", "--stack", "vllm", "--target", "k8s", "--dry-run", "--results-dir", str(results)]
    assert main([*argv, "--cluster-config", str(config)]) == 0, capsys.readouterr().err
    docs = {d["kind"]: d for d in yaml.safe_load_all(next(results.glob("*/manifests/stack-vllm.yaml")).read_text())}
    dep, svc = docs["Deployment"], docs["Service"]
    pod = dep["spec"]["template"]["spec"]
    assert dep["metadata"]["namespace"] == svc["metadata"]["namespace"] == "bench"
    assert pod["runtimeClassName"] == "nvidia"
    assert str(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) == "2"


@pytest.mark.parametrize(("text", "message"), [
    ("gpus: -1\n", "gpus: Input should be greater than or equal to 0"),
    ("namespce: x\n", "namespce: Extra inputs are not permitted"),
    ("- a\n", "expected a mapping of settings"),
    ("a: [\n", "is not valid YAML"),
])
def test_a_bad_cluster_config_is_refused_naming_the_file_and_field(text, message, tmp_path, capsys):
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    results = tmp_path / "results"
    argv = ["run", "--stack", "vllm", "--target", "k8s", "--dry-run", "--results-dir", str(results)]
    assert main([*argv, "--cluster-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"cluster config {config}" in err and message in err
    assert not results.exists() or not any(results.iterdir())
