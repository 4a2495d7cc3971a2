"""engine.model as a real choice: its forms, a hub model resolved through a Hugging Face cache laid out as
huggingface_hub lays one out (the tiny model under a repo id), the identity recorded, and what is refused."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.host import gpus
from harness.profile.models import STUDY_MODEL
from harness.profile.schema import EngineSettings
from stacks.base import MODEL_DIR, DeploySettings, parse_startup_log
from stacks.base.engine_model import check_fits, resolve, study_comparable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from hf_cache_layout import lay_out  # noqa: E402

REPO = "layerbench/tiny-qwen2"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """The tiny model under REPO in an HF cache; huggingface_hub reads it offline. Yields (cache, commit)."""
    if not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"{MODEL_DIR} missing: run `make setup` (make test does) to generate the tiny model")
    cache = tmp_path / "hub"
    commit = lay_out(MODEL_DIR, cache, REPO)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield cache, commit


@pytest.mark.parametrize("model, ok", [("auto", True), ("tiny", True), ("Qwen/Qwen2.5-1.5B-Instruct", True),
                                       ("/models/x", True), ("./x", True), ("~/m", True), ("qwen", False),
                                       ("a/b/c", False), ("../", True), ("org/..", False)])
def test_engine_model_takes_keywords_repo_ids_and_paths(model, ok):
    if ok:
        EngineSettings(model=model)
    else:
        with pytest.raises(ValueError, match="is none of"):
            EngineSettings(model=model)


def test_a_revision_belongs_to_a_repo_id():
    EngineSettings(model="org/name", revision="v1")
    with pytest.raises(ValueError, match="engine.revision applies to a Hugging Face repo id"):
        EngineSettings(model="tiny", revision="v1")


def test_a_hub_model_resolves_to_the_commit_its_branch_names(hf_cache):
    cache, commit = hf_cache
    m = resolve(EngineSettings(model=REPO), None, [])
    assert (m.source, m.id, m.revision, m.requested_revision) == ("hub", REPO, commit, "main")
    assert m.path == cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / commit
    assert (m.path / "config.json").is_symlink() and (m.path / "tokenizer.json").exists()
    assert m.hf_cache == cache and len(m.config_digest) == 12 and m.weights_bytes > 1_000_000
    assert m.served_name == "tiny-qwen2" and m.engine_ref() == (REPO, commit)
    # the same files whether the engine names the repo id and commit, or the snapshot's directory
    assert m.same_files(REPO, commit) and m.same_files(str(m.path), None) and not m.same_files(REPO, "0" * 40)
    assert "config " + m.config_digest in m.text() and commit[:12] in m.text()


def test_a_commit_resolves_to_itself_and_an_unknown_revision_is_refused(hf_cache):
    _, commit = hf_cache
    assert resolve(EngineSettings(model=REPO, revision=commit), None, []).revision == commit
    with pytest.raises(LayerbenchError, match="at revision v9 is not in the Hugging Face cache .* HF_HUB_OFFLINE"):
        resolve(EngineSettings(model=REPO, revision="v9"), None, [])
    with pytest.raises(LayerbenchError, match="layerbench/nope at revision main is not in the Hugging Face cache"):
        resolve(EngineSettings(model="layerbench/nope"), None, [])


def test_a_local_directory_needs_its_config(tmp_path):
    with pytest.raises(LayerbenchError, match="no config.json"):
        resolve(EngineSettings(model=str(tmp_path)), None, [])
    m = resolve(EngineSettings(model=str(MODEL_DIR)), None, [])
    assert m.source == "path" and m.path == MODEL_DIR.resolve() and m.engine_ref() == (str(MODEL_DIR.resolve()), None)


@pytest.fixture
def gpu_host(monkeypatch):
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakes' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    gpus.reset_cache()
    yield gpus.host_gpus()
    gpus.reset_cache()


def test_auto_is_the_study_model_on_a_gpu_host_and_tiny_is_refused_there(gpu_host, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    m = resolve(EngineSettings(), gpu_host, [0], fetch=False)  # a dry run: nothing downloaded
    assert (m.id, m.requested_revision, m.path) == (*STUDY_MODEL, None)
    with pytest.raises(LayerbenchError, match="this host has 8 GPU.*Set engine.model: auto"):
        resolve(EngineSettings(model="tiny"), gpu_host, [0])
    assert resolve(EngineSettings(), None, []).source == "tiny"  # auto on a CPU host


def test_a_model_larger_than_its_gpus_is_refused(monkeypatch, hf_cache):
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakes' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MEMORY_MIB", "4")  # 4 MiB GPUs: the tiny model's 6.5 MiB do not fit one
    gpus.reset_cache()
    try:
        host = gpus.host_gpus()
        m = resolve(EngineSettings(model=REPO), None, [])
        with pytest.raises(LayerbenchError, match="GiB of weights per GPU at tensor_parallel_size 1.*raise "
                                                  "tensor_parallel_size"):
            check_fits(m, EngineSettings(model=REPO), host, [0])
        check_fits(m, EngineSettings(model=REPO, tensor_parallel_size=2), host, [0, 1])  # half each: fits
    finally:
        gpus.reset_cache()


def test_the_study_figures_need_the_study_model_and_profile(hf_cache):
    tiny = resolve(EngineSettings(model="tiny"), None, [])
    hub = resolve(EngineSettings(model=REPO), None, [])
    study = hub.model_copy(update={"id": STUDY_MODEL[0]})
    assert study_comparable("default", study) and not study_comparable("quick", study)
    assert not study_comparable("default", tiny) and not study_comparable("default", hub)
    gpu_like = tiny.model_copy(update={"source": "gpu-like"})
    assert study_comparable("gpu-like", gpu_like) and not study_comparable("gpu-like", tiny)


def test_the_engine_config_line_names_model_revision_and_tensor_parallelism():
    line = ("INFO 12-01 13:18:40 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
            "model='layerbench/tiny-qwen2', speculative_config=None, tokenizer='layerbench/tiny-qwen2', "
            "skip_tokenizer_init=False, tokenizer_mode=auto, revision=c87fe4e534e98a1422892d0f95ebc75d69b4e1b4, "
            "tokenizer_revision=c87fe4e534e98a1422892d0f95ebc75d69b4e1b4, trust_remote_code=False, "
            "dtype=torch.float32, max_seq_len=2048, download_dir=None, load_format=auto, tensor_parallel_size=2, "
            "pipeline_parallel_size=1")
    cfg = parse_startup_log(line)
    assert (cfg.model, cfg.revision, cfg.tensor_parallel_size) == (REPO, "c87fe4e534e98a1422892d0f95ebc75d69b4e1b4",
                                                                   2)
    path = parse_startup_log(line.replace("revision=c87fe4e534e98a1422892d0f95ebc75d69b4e1b4,", "revision=None,"))
    assert path.revision is None


def test_deploy_settings_carry_the_devices_into_every_stacks_environment(hf_cache):
    from stacks.base import get_stack
    from stacks.base.engine_env import engine_env

    m = resolve(EngineSettings(model=REPO), None, [])
    settings = DeploySettings(engine=EngineSettings(model=REPO, tensor_parallel_size=2), model=m, model_path=m.path,
                              served_model_name=m.served_name, devices=[2, 3])
    env = engine_env(settings)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["HF_HUB_CACHE"] == str(m.hf_cache) and env["HF_HUB_OFFLINE"] == "1"
    ray = get_stack("ray")(settings).driver_config()
    assert ray["num_gpus"] == 2 and ray["gpu"] and ray["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert ray["model_source"] == REPO and ray["engine_kwargs"]["revision"] == m.revision
    assert ray["engine_kwargs"]["tensor_parallel_size"] == 2 and ray["engine_kwargs"]["gpu_memory_utilization"]
    triton = get_stack("triton")(settings)
    assert "kind: KIND_MODEL" in triton.config_pbtxt() and triton.engine_spec()["revision"] == m.revision
    raw, pod_env = get_stack("kserve")(settings).raw_process()
    assert "--tensor-parallel-size" in raw and raw[raw.index("--tensor-parallel-size") + 1] == "2"
    assert f"--model={m.path}" in raw  # the predictor pod's /mnt/models: the same snapshot
    bare = get_stack("vllm")(settings).server_args()
    assert bare[bare.index("--model") + 1] == REPO and bare[bare.index("--revision") + 1] == m.revision
    cpu = settings.model_copy(update={"devices": []})
    assert "kind: KIND_CPU" in get_stack("triton")(cpu).config_pbtxt()
    assert "CUDA_VISIBLE_DEVICES" not in engine_env(cpu) and "--gpu-memory-utilization" not in \
        get_stack("vllm")(cpu).server_args()
