"""The GPU-like model: vLLM's own Qwen2 (real attention over real KV blocks, real logits, so sampling picks real
tokens of the tokenizer's vocabulary) whose forward step, after computing, waits until the step has taken the
time its config.json sets (`layerbench_step`, see pacing.py). Sleeping releases the CPU as a worker waiting on
its GPU does."""

from __future__ import annotations

import time

from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

from layerbench_gpulike.pacing import Pacer, StepTime, split_tokens


class GpuLikeQwen2ForCausalLM(Qwen2ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._pacer = Pacer(StepTime.from_config(vllm_config.model_config.hf_config))

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        started = time.perf_counter()
        out = super().forward(input_ids, positions, intermediate_tensors, inputs_embeds)
        decode, prefill = split_tokens(positions.reshape(-1).tolist())
        self._pacer.finish(started, decode, prefill)
        return out
