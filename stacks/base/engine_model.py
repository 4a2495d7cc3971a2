"""Which model the engine serves, from the profile's `engine.model`, resolved once before anything is deployed:
- `auto` (the default): on a GPU host the layer study's model, STUDY_MODEL; on a host without one `gpu-like`
  where the profile gives a `step` (the quick profile), else `tiny`;
- `tiny`: the generated 2-layer Qwen2 (scripts/make_model.py), computed on this host's CPU;
- `gpu-like`: the same weights and tokenizer, with a config.json that names the GPU-like architecture (the
  `layerbench_gpulike` vLLM plugin in the engine environment) and carries the emulated step time. One directory
  per step time, derived from the tiny model's files (linked, not copied);
- a Hugging Face repo id (`engine.revision`: a branch, tag or commit; default main), resolved into the HF cache
  with huggingface_hub: every engine then gets the repo id and the *commit* it resolved to, reads the cache
  offline, and so serves exactly those files, on both sides and behind every stack. A cache filled at a commit
  has no `refs/` (huggingface_hub names a commit in `refs/<revision>` only for a branch or tag:
  `_cache_commit_hash_for_specific_revision`, huggingface/huggingface_hub src/huggingface_hub/file_download.py),
  so offline it answers only a reader that passes that commit. Every local engine runs with HF_HUB_OFFLINE=1 and
  gets the commit (vLLM's `--revision`; AsyncEngineArgs' `revision` in Triton's model, KServe's in-process
  server and Ray Serve LLM's engine_kwargs), and vLLM, offline, swaps the repo id for that commit's snapshot
  directory before it loads anything (vllm/engine/arg_utils.py, "HF_HUB_OFFLINE is True, replace model_id"): a
  layer that reads config.json again from vLLM's model name, as Ray Serve LLM's apply_checkpoint_info did with
  no revision before ray-project/ray#62962, reads that snapshot too. A layer handed the repo id by any other
  road must get the snapshot directory (ServedModel.path) instead;
- a local directory with a config.json.
`tiny` and `gpu-like` are for hosts without a GPU; a model is refused where it cannot fit."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from harness.errors import LayerbenchError
from harness.host.gpus import GpuHost
from harness.profile.models import STUDY_MODEL, model_kind
from harness.profile.schema import EngineSettings
from harness.schemas import ServedModel
from stacks.base import MODEL_DIR

GPU_LIKE_ARCHITECTURE = "LayerbenchGpuLikeForCausalLM"  # what engine_plugin/layerbench_gpulike registers
BLOCKING_WAIT_ENV = "LAYERBENCH_BLOCKING_WAIT"  # the plugin's switch: vLLM's queue readers block, not spin
# files an engine never reads: other frameworks' weights and exports (a repo can hold several copies)
SKIP_FILES = ["*.pth", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.ot", "*.tflite", "flax_model*", "tf_model*",
              "original/*", "onnx/*", "openvino/*", "coreml/*"]
CPU_MEMORY_SHARE = 0.5  # a model's weights on a host without a GPU: at most this share of its memory


def wanted(engine: EngineSettings, host: GpuHost | None) -> tuple[str, str, str | None]:
    """(kind, id, revision) the profile asks for on this host: `auto` decided, nothing fetched. Refuses the tiny
    models on a GPU host: their numbers would be the CPU's and the client's, not the GPU's."""
    kind = model_kind(engine.model)
    if kind == "auto":
        if host:
            return ("hub", *STUDY_MODEL)
        return ("gpu-like", "gpu-like", None) if engine.step is not None else ("tiny", "tiny", None)
    if kind in ("tiny", "gpu-like") and host is not None:
        raise LayerbenchError(
            f"engine.model {kind} is the generated 2-layer random model, computed on the CPU; this host has "
            f"{len(host.gpus)} GPU(s) ({host.gpus[0].name}), where it would measure the CPU and the client, not the "
            f"GPU. Set engine.model: auto (serves {STUDY_MODEL[0]}), a Hugging Face repo id or a model directory "
            "(make ... MODEL=org/name)")
    return kind, engine.model, engine.revision


def resolve(engine: EngineSettings, host: GpuHost | None, devices: list[int], fetch: bool = True,
            tiny: Path = MODEL_DIR) -> ServedModel:
    """The model to serve, its files on this host and its identity. fetch=False (a dry run): a hub model not in
    the cache is returned unresolved (path None) instead of downloaded."""
    kind, ident, revision = wanted(engine, host)
    if kind in ("tiny", "gpu-like") and not fetch and not (tiny / "config.json").exists():
        return ServedModel(source=kind, id=kind, path=tiny, served_name="tiny")  # a dry run on a fresh clone
    if kind == "tiny":
        return _local("tiny", "tiny", _need_tiny(tiny), "tiny")
    if kind == "gpu-like":
        return _local("gpu-like", "gpu-like", gpu_like_dir(engine, tiny), "tiny")
    if kind == "path":
        path = Path(ident).expanduser()
        if not (path / "config.json").is_file():
            raise LayerbenchError(f"engine.model {ident}: no config.json in {path}; point it at a model directory "
                                  "(config.json, weights, tokenizer) or use a Hugging Face repo id")
        model = _local("path", ident, path.resolve(), _served_name(path.name))
    else:
        model = _hub(ident, revision, fetch)
    check_fits(model, engine, host, devices)
    return model


def _need_tiny(tiny: Path) -> Path:
    if not (tiny / "config.json").exists():
        raise LayerbenchError(f"model not found at {tiny}: run `make setup`")
    return tiny


def _local(source: str, ident: str, path: Path, served: str) -> ServedModel:
    return ServedModel(source=source, id=ident, path=path, config_digest=config_digest(path),
                       weights_bytes=weights_bytes(path), served_name=served)


def _served_name(name: str) -> str:
    """A name a client asks for and a Triton model directory can carry: [a-z0-9._-]."""
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.") or "model"


def hf_cache_dir() -> Path:
    """huggingface_hub's cache as the environment names it now (the library reads it once, when first imported,
    so a value set later in the same process would be missed)."""
    env = os.environ
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return Path(hub).expanduser()
    home = env.get("HF_HOME") or str(Path(env.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
    return Path(home).expanduser() / "hub"


def _hub(repo_id: str, revision: str | None, fetch: bool) -> ServedModel:
    """Resolve `repo_id` at `revision` into the HF cache (downloading it unless offline or fetch=False)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    requested = revision or "main"
    cache = hf_cache_dir()
    # the environment as it is now: huggingface_hub reads HF_HUB_OFFLINE once, when it is first imported
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    unresolved = ServedModel(source="hub", id=repo_id, requested_revision=requested, hf_cache=cache,
                             served_name=_served_name(repo_id.split("/")[-1]))
    try:
        path = Path(snapshot_download(repo_id, revision=requested, cache_dir=cache, ignore_patterns=SKIP_FILES,
                                      local_files_only=offline or not fetch))
    except LocalEntryNotFoundError:
        if not fetch and not offline:
            return unresolved  # a dry run downloads nothing: the compare will
        raise LayerbenchError(
            f"{repo_id} at revision {requested} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is "
            # `hf`, the CLI of huggingface_hub >= 1.0, which removed `huggingface-cli` (huggingface/huggingface_hub
            # #3404); `hf download REPO_ID --revision R --cache-dir D` (src/huggingface_hub/cli/download.py)
            "set: download it where the hub is reachable (`hf download "
            f"{repo_id} --revision {requested} --cache-dir {cache}`) and copy that cache here, or unset "
            "HF_HUB_OFFLINE") from None
    except GatedRepoError:
        raise LayerbenchError(f"{repo_id} is gated on the Hugging Face hub: accept its terms there and set "
                              "HF_TOKEN") from None
    except RevisionNotFoundError:
        raise LayerbenchError(f"{repo_id} has no revision {requested!r} (branch, tag or commit): fix "
                              "engine.revision / REVISION=") from None
    except RepositoryNotFoundError:
        raise LayerbenchError(f"unknown Hugging Face repo {repo_id!r} (or private: set HF_TOKEN): fix engine.model "
                              "/ MODEL=") from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise LayerbenchError(f"cannot resolve {repo_id} at {requested} through the Hugging Face hub: "
                              f"{str(e).splitlines()[0][:200]} (HF_HUB_OFFLINE=1 uses the cache only)") from None
    if not (path / "config.json").is_file():
        raise LayerbenchError(f"{repo_id} at {requested} has no config.json ({path}): not a model vLLM can load")
    return unresolved.model_copy(update={"revision": path.name, "path": path, "config_digest": config_digest(path),
                                         "weights_bytes": weights_bytes(path)})


def config_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:12]
    except OSError:
        return None


def weights_bytes(path: Path) -> int | None:
    """Bytes of the weights the engine loads: safetensors where the model has them (vLLM prefers them), else
    PyTorch .bin/.pt files. Follows the HF cache's links into its blobs."""
    for pattern in ("*.safetensors", "*.bin", "*.pt"):
        files = [f for f in path.rglob(pattern) if f.is_file()]
        if files:
            return sum(f.stat().st_size for f in files)
    return None


def check_fits(model: ServedModel, engine: EngineSettings, host: GpuHost | None, devices: list[int]) -> None:
    """Refuse a model whose weights cannot be held where it would run (each GPU holds 1/tp of them)."""
    if model.weights_bytes is None:
        return
    gib = model.weights_bytes / 2**30
    if host is None:
        import psutil

        memory = psutil.virtual_memory().total
        if model.weights_bytes > CPU_MEMORY_SHARE * memory:
            raise LayerbenchError(
                f"{model.id} has {gib:.1f} GiB of weights and this host has no GPU and {memory / 2**30:.0f} GiB of "
                "memory: it cannot serve it. Set engine.model: auto or tiny here, or run on a GPU host")
        return
    per_gpu = model.weights_bytes / max(1, engine.tensor_parallel_size)
    for index in devices:
        gpu = host.by_index(index)
        usable = (gpu.memory_mib * 2**20 * engine.gpu_memory_utilization) if gpu and gpu.memory_mib else None
        if usable is not None and per_gpu > usable:
            raise LayerbenchError(
                f"{model.id}: {per_gpu / 2**30:.1f} GiB of weights per GPU at tensor_parallel_size "
                f"{engine.tensor_parallel_size}, but GPU {index} ({gpu.name}) gives {usable / 2**30:.1f} GiB at "
                f"gpu_memory_utilization {engine.gpu_memory_utilization}: raise tensor_parallel_size (GPUS=) or "
                "serve a smaller model")


def gpu_like_dir(engine: EngineSettings, tiny: Path = MODEL_DIR) -> Path:
    """The GPU-like model's directory, written (idempotently) from `tiny` on first use."""
    _need_tiny(tiny)
    assert engine.step is not None
    config = json.loads((tiny / "config.json").read_text())
    config["architectures"] = [GPU_LIKE_ARCHITECTURE]
    config["layerbench_step"] = engine.step.model_dump(exclude={"like"})
    text = json.dumps(config, indent=2, sort_keys=True)
    out = tiny.parent / f"gpu-like-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    if not (out / "config.json").exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for f in tiny.iterdir():
            if f.name != "config.json" and not (tmp / f.name).exists():
                (tmp / f.name).symlink_to(f.resolve())
        (tmp / "config.json").write_text(text)
        try:
            tmp.rename(out)
        except OSError:  # another process wrote it first: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def model_dir(engine: EngineSettings, tiny: Path = MODEL_DIR) -> Path:
    """The directory of the tiny or GPU-like model (the reference and calibration paths, CPU hosts only)."""
    return gpu_like_dir(engine, tiny) if engine.model == "gpu-like" else tiny


def engine_model_env(engine: EngineSettings) -> dict[str, str]:
    """What the engine's processes need in their environment for this model: blocking queue readers, and not
    vLLM's optional spin-loop extension, which would spin 100 ms before each blocking wait."""
    return {BLOCKING_WAIT_ENV: "1", "VLLM_USE_SPINLOOP_EXT": "0"} if engine.model == "gpu-like" else {}


def check_target(engine: EngineSettings, target: str) -> None:
    if engine.model == "gpu-like" and target != "local":
        raise LayerbenchError("engine.model gpu-like emulates a GPU's step on a CPU host and runs on the local "
                              "target only; on a GPU host or cluster, serve the real model")


def study_model(model: ServedModel | None) -> bool:
    """Whether a run served the layer study's model (its published figures are set beside such runs only)."""
    return model is not None and model.source == "hub" and model.id == STUDY_MODEL[0]


def study_comparable(profile: str, model: ServedModel | None) -> bool:
    """Whether a run is the layer study's, so its published figures may be set beside it: the study's profile
    (`default`) serving the study's model, or the `gpu-like` profile, whose engine emulates the study's bare
    vLLM step by step."""
    if model is None:
        return False
    return (profile == "default" and study_model(model)) or (profile == "gpu-like" and model.source == "gpu-like")
