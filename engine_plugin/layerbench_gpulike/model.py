"""The GPU-like model: vLLM's own Qwen2 (real attention over real KV blocks, real logits, so sampling picks real
tokens of the tokenizer's vocabulary) whose forward step, after computing, waits until the step has taken the
time its config.json sets (`layerbench_step`, see pacing.py). Sleeping releases the CPU as a worker waiting on
its GPU does. A forward without attention metadata is vLLM's memory profiling or compile warm-up, not a step:
it is not paced."""

from __future__ import annotations

import time
from typing import Any

import torch
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

from layerbench_gpulike.pacing import Pacer, StepTime, split_lengths, split_positions


def _batch(positions: torch.Tensor) -> tuple[int, int] | None:
    """(decoding sequences, prompt tokens) of this step; None for a forward that is not a step."""
    if not is_forward_context_available():
        return None
    meta: Any = get_forward_context().attn_metadata
    if meta is None:
        return None
    if isinstance(meta, list):  # one dict per micro-batch (ubatching, not used on CPU)
        meta = meta[0] if meta else None
    if isinstance(meta, dict):
        meta = next(iter(meta.values()), None)
    starts = getattr(meta, "query_start_loc", None)
    if starts is None:
        return split_positions(positions.reshape(-1).tolist())
    return split_lengths((starts[1:] - starts[:-1]).tolist())


class GpuLikeQwen2ForCausalLM(Qwen2ForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._pacer = Pacer(StepTime.from_config(vllm_config.model_config.hf_config))

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, intermediate_tensors: Any = None,
                inputs_embeds: torch.Tensor | None = None) -> Any:
        started = time.perf_counter()
        out = super().forward(input_ids, positions, intermediate_tensors, inputs_embeds)
        batch = _batch(positions)
        if batch is not None:
            self._pacer.finish(started, *batch)
        return out
