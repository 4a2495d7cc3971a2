"""Fair engine starts: every deployment's vLLM gets a compile and kernel cache of its own (VLLM_CACHE_ROOT, with
Triton's and Inductor's caches inside it), so neither side of a compare finds the other's torch.compile artefacts
warm; the layers that run vLLM in their own processes (Ray Serve, Triton, KServe) get theirs too; the cache goes
at teardown; run.json's deployment record says how the engine started. No engine is started: deployments record
what they would start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.measure.pairs import pair_targets
from harness.profile.schema import EngineSettings
from stacks import kserve as kserve_mod
from stacks import triton as triton_mod
from stacks import vllm as vllm_mod
from stacks.base import DeploySettings
from stacks.base import engine_env as ee
from stacks.base.local import LocalServerStack
from stacks.kserve import KServeStack
from stacks.ray import RayStack
from stacks.triton import TritonStack
from stacks.vllm import VllmStack


def settings(tmp_path: Path, **options) -> DeploySettings:
    engine = EngineSettings(max_model_len=1024, max_num_seqs=8, dtype="float32", enforce_eager=True)
    return DeploySettings(engine=engine, log_dir=tmp_path / "logs", model_path=tmp_path, options=options)


@pytest.fixture
def started(monkeypatch, tmp_path) -> list[tuple[str, dict[str, str]]]:
    """(kind, env) of every process a deployment would start; nothing is started."""
    out: list[tuple[str, dict[str, str]]] = []

    def start(self, cmd, env, log_path=None):
        out.append((self.kind, dict(env)))

    python = Path(sys.executable)
    monkeypatch.setattr(LocalServerStack, "start", start)
    monkeypatch.setattr(vllm_mod, "engine_python", lambda venv=None: python)
    monkeypatch.setattr(kserve_mod, "engine_python", lambda venv=None: python)
    monkeypatch.setattr(ee, "COLD_CACHE_DIR", tmp_path / "cold")
    return out


def cache_of(env: dict[str, str]) -> Path:
    """The deployment's cache root, with Triton's and Inductor's caches inside it."""
    root = Path(env["VLLM_CACHE_ROOT"])
    assert Path(env["TRITON_CACHE_DIR"]).parent == root and Path(env["TORCHINDUCTOR_CACHE_DIR"]).parent == root
    return root


def test_every_deployment_of_a_compare_has_a_cache_of_its_own(tmp_path, started):
    stack = VllmStack(settings(tmp_path))  # an A/A compare: both sides are bare vLLM
    for k in range(2):
        for side in pair_targets(stack, k):
            side.deploy()
    roots = [cache_of(env) for _, env in started]
    assert len(roots) == 4 and len(set(roots)) == 4
    assert all(r.parent == tmp_path / "cold" and not r.exists() for r in roots)  # vLLM creates it, not us


def test_layers_that_run_vllm_in_their_own_processes_get_their_own_cache(tmp_path, started, monkeypatch):
    venv = tmp_path / "triton-venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(triton_mod, "triton_paths", lambda: (tmp_path / "tritonserver", tmp_path, venv / "backends"))
    ray = RayStack(settings(tmp_path))
    triton = TritonStack(settings(tmp_path))
    raw = KServeStack(settings(tmp_path, mode="raw"))
    inprocess = KServeStack(settings(tmp_path, mode="inprocess"))

    ray_env = ray.driver_config()["env"]  # scripts/ray_serve_app.py hands it to every replica (runtime_env)
    triton.deploy()
    raw.deploy()
    inprocess_env = inprocess.front_command("")[1]
    for layer in (ray, triton, raw, inprocess):
        layer.baseline().deploy()
    layer_roots = [cache_of(ray_env), cache_of(started[0][1]), cache_of(started[1][1]), cache_of(inprocess_env)]
    baseline_roots = [cache_of(env) for _, env in started[2:]]
    assert layer_roots == [ray.engine_cache, triton.engine_cache, raw.engine_cache, inprocess.engine_cache]
    assert len(set(layer_roots + baseline_roots)) == 8


def test_teardown_removes_the_deployments_cache_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setattr(ee, "COLD_CACHE_DIR", tmp_path / "cold")
    stack = VllmStack(settings(tmp_path))
    stack.start([sys.executable, "-c", "import time; time.sleep(60)"], stack.server_env())
    (stack.engine_cache / "torch_compile_cache").mkdir(parents=True)  # what vLLM writes there
    stack.teardown()
    assert not stack.engine_cache.exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ee.remove_cache(elsewhere)  # only a cache layerbench made is ever removed
    assert elsewhere.exists()


def test_engine_env_without_a_root_still_shares_nothing():
    a, b = ee.engine_env(DeploySettings()), ee.engine_env(DeploySettings())
    assert cache_of(a) != cache_of(b)


def test_the_deployment_record_says_how_the_engine_started(tmp_path):
    record = VllmStack(settings(tmp_path)).describe()  # harness.measure.session writes it into run.json's deployments
    assert record["engine_start"] == ee.ENGINE_START and record["engine_start"].startswith("cold")
    fronted = KServeStack(settings(tmp_path, mode="proxy")).describe()
    assert fronted["upstream"]["engine_start"] == ee.ENGINE_START
