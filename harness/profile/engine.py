"""The engine settings both deployments of a compare share, the GPU-like engine's emulated step, and the SLO a
request is judged good by: the parts of a profile that say what is served, apart from the load sent to it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from harness.profile.models import model_kind
from harness.profile.workload import STRICT


class SLO(BaseModel):
    """A request is good when it succeeded and met every set bound (seconds)."""

    model_config = STRICT
    ttft_s: float = Field(0.5, gt=0)
    e2e_s: float = Field(10.0, gt=0)
    itl_p95_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)


class EmulatedStep(BaseModel):
    """The GPU-like engine's step time (engine.model: gpu-like): the model computes, then sleeps until the step
    has taken base_ms + decode_ms_per_token × decoding sequences + prefill_ms_per_token × prompt tokens in it."""

    model_config = STRICT
    base_ms: float = Field(gt=0, le=10_000, description="a step's fixed cost (a GPU reading the weights once)")
    decode_ms_per_token: float = Field(ge=0, le=1_000, description="added per sequence decoding in the step")
    prefill_ms_per_token: float = Field(ge=0, le=1_000, description="added per prompt token prefilled in the step")
    like: str = Field("", description="what these figures emulate, for the report's first line")

    def ms(self, decode: float, prefill: float = 0.0) -> float:
        return self.base_ms + self.decode_ms_per_token * decode + self.prefill_ms_per_token * prefill

    def text(self) -> str:
        return (f"{self.base_ms:g} ms per step + {self.decode_ms_per_token:g} ms per decoding sequence + "
                f"{self.prefill_ms_per_token:g} ms per prompt token")


class EngineSettings(BaseModel):
    """vLLM settings applied identically to a stack and to its baseline."""

    model_config = STRICT
    model: str = Field(
        "auto", description="auto: the layer study's Qwen2.5-1.5B-Instruct on a GPU host; on a host without one, "
        "the GPU-like engine when `step` is given, else the tiny model; tiny: the generated 2-layer Qwen2, "
        "computed on this host's CPU; gpu-like: the same model whose step then sleeps for `step` (the CPU is left "
        "free, as a worker waiting on its GPU leaves it); a "
        "Hugging Face repo id (org/name, with `revision`); or a local model directory")
    revision: str | None = Field(None, min_length=1, description="a repo id's branch, tag or commit (default: "
                                 "main); the commit it resolves to is recorded")
    step: EmulatedStep | None = Field(None, description="gpu-like only: the emulated step time")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs one engine shards the model over, on "
                                      "both sides")
    gpus: list[int] | None = Field(None, description="GPU indices (nvidia-smi's) each deployment may use, the same "
                                   "for both sides (default: the first replicas × tensor_parallel_size visible ones)")
    replicas: int = Field(1, ge=1, le=16, description="engines per side, each with these settings (on a GPU host each "
                          "on tensor_parallel_size GPUs of its own): the stack fronts them all, the bare side is N "
                          "engines the load client spreads its requests over (baseline_spread), with no hop between")
    baseline_spread: Literal["round_robin", "hash"] = Field(
        "round_robin", description="how the load client spreads the bare side's requests over its replicas: each to "
        "the next engine in turn, or to the engine a hash of the prompt's first characters picks (a prefix group, "
        "or a chat, then stays on one engine)")
    max_model_len: int = Field(2048, gt=0)
    max_num_seqs: int = Field(64, gt=0)
    dtype: Literal["auto", "bfloat16", "float16", "float32", "fastest"] = Field(
        "bfloat16", description="fastest: gpu-like only, whichever of bfloat16 and float32 this host's CPU computes "
        "fastest, measured before deploying (a CPU without AVX-512 runs bfloat16 several times slower)")
    enforce_eager: bool = False
    kv_cache_gib: float = Field(1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE on CPU hosts")
    # vLLM's --num-gpu-blocks-override (vllm/engine/arg_utils.py; applied on every platform by
    # may_override_num_blocks in vllm/v1/core/kv_cache_utils.py, 0.32.0): the cache holds exactly this many blocks
    kv_cache_blocks: int | None = Field(None, ge=1, description="the KV cache's size in blocks, on every host (vLLM's "
                                        "--num-gpu-blocks-override; a block is 128 tokens on vLLM's CPU build, 16 by "
                                        "default on a GPU): a cache smaller than the prefixes a workload repeats, so "
                                        "where a router places them decides the hits")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = Field("auto", min_length=1, description="vLLM's --kv-cache-dtype (auto: the model's "
                                "dtype; fp8 halves the KV bytes per token where the engine supports it)")
    extra_args: list[str] = Field(default_factory=list)
    frontend: Literal["python", "rust"] | None = Field(
        None, description="bare vLLM's API server, the same on both sides: python (its OpenAI server) or rust "
        "(VLLM_USE_RUST_FRONTEND=1, started as `vllm serve`: stacks/base/engine_frontend.py); default: the variable "
        "left unset, vLLM's own default (the Python server in vLLM 0.32). A layer that runs the engine in a server "
        "of its own (Ray, Triton, KServe inprocess) replaces it; the report says so")
    dtype_measured: str | None = Field(None, description="set by layerbench: how `dtype: fastest` was chosen")

    @field_validator("model")
    @classmethod
    def _model_form(cls, v: str) -> str:
        model_kind(v)
        return v

    @field_validator("gpus")
    @classmethod
    def _gpu_indices(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(g < 0 for g in v)):
            raise ValueError("gpus must be a non-empty list of GPU indices (0, 1, ...), as nvidia-smi -L numbers them")
        return v

    def on_host(self, has_gpu: bool) -> EngineSettings:
        """`auto` with a `step` decided for the host: the GPU-like engine where there is no NVIDIA GPU, the study's
        model (the step dropped) where there is one. Anything else is returned as it is."""
        if self.model != "auto" or self.step is None:
            return self
        if not has_gpu:
            return self.model_copy(update={"model": "gpu-like"})
        return self.model_copy(update={"step": None, "dtype": "auto" if self.dtype == "fastest" else self.dtype})

    @model_validator(mode="after")
    def _step_with_its_model(self) -> EngineSettings:
        if self.model == "gpu-like" and self.step is None:
            raise ValueError("engine.model gpu-like needs engine.step (base_ms, decode_ms_per_token, "
                             "prefill_ms_per_token): the step time it emulates")
        if self.model not in ("gpu-like", "auto") and self.step is not None:
            raise ValueError("engine.step applies to engine.model: gpu-like (or auto: the GPU-like engine where the "
                             "host has no NVIDIA GPU) only")
        if self.dtype == "fastest" and self.step is None:
            raise ValueError("engine.dtype fastest applies to engine.model: gpu-like only")
        if self.revision is not None and model_kind(self.model) != "hub":
            raise ValueError(f"engine.revision applies to a Hugging Face repo id, not engine.model {self.model!r}")
        return self
