"""layerbench's GPU-like engine, installed into the engine environment (never imported by the harness).

`register()` is vLLM's plugin hook (entry point group `vllm.general_plugins`), run in every vLLM process:
- it registers ARCHITECTURE, the tiny Qwen2 whose step then waits for the time its config.json sets, so a
  model directory whose `architectures` names it is served by real vLLM with that step time;
- with LAYERBENCH_BLOCKING_WAIT=1 (set for that model only), vLLM's shared-memory queue readers block on their
  notification socket instead of spinning on sched_yield() for 1 s after each read. On a GPU host EngineCore
  spins while the GPU works, on cores the GPU does not need; here that spin would take a whole core from the
  API server and the layer for the length of every emulated step (measured with vLLM 0.32.0 on CPU: EngineCore
  at 92–99% of a core at c=1 while the worker slept)."""

from __future__ import annotations

import os

ARCHITECTURE = "LayerbenchGpuLikeForCausalLM"
BLOCKING_WAIT_ENV = "LAYERBENCH_BLOCKING_WAIT"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # a lazy "module:Class" string: the model (and torch) is imported only where vLLM builds it
        ModelRegistry.register_model(ARCHITECTURE, "layerbench_gpulike.model:GpuLikeQwen2ForCausalLM")
    if os.environ.get(BLOCKING_WAIT_ENV) == "1":
        _blocking_readers()


def _blocking_readers() -> None:
    """Readers of vLLM's shared-memory message queues go straight to their blocking poll (busy_loop_s = 0):
    the writer notifies every enqueue, so a reader wakes when data arrives, without holding a core."""
    from vllm.distributed.device_communicators import shm_broadcast

    cond = shm_broadcast.SpinCondition
    if getattr(cond, "_layerbench_blocking", False):  # plugins load more than once per process
        return
    original = cond.__init__

    def __init__(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        if self.is_reader:
            self.busy_loop_s = 0.0

    cond.__init__ = __init__
    cond._layerbench_blocking = True
