"""layerbench's GPU-like engine, installed into the engine environment (never imported by the harness).

`register()` is vLLM's plugin hook (entry point group `vllm.general_plugins`), run in every vLLM process:
- it registers ARCHITECTURE, the tiny Qwen2 whose step then waits for the time its config.json sets, so a
  model directory whose `architectures` names it is served by real vLLM with that step time;
- with LAYERBENCH_BLOCKING_WAIT=1 (set for that model only), vLLM's shared-memory queue readers block on their
  notification socket, waking every WAKE_MS, instead of spinning on sched_yield() for 1 s after each read. On a
  GPU host EngineCore spins while the GPU works, on cores the GPU does not need; here that spin would take a
  whole core from the API server and the layer for the length of every emulated step (measured with vLLM 0.32.0
  on CPU: EngineCore at 92–99% of a core at c=1 while the worker slept)."""

from __future__ import annotations

import os

ARCHITECTURE = "LayerbenchGpuLikeForCausalLM"
BLOCKING_WAIT_ENV = "LAYERBENCH_BLOCKING_WAIT"
WAKE_MS = 1  # a blocked reader's longest sleep between checks of its queue


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # a lazy "module:Class" string: the model (and torch) is imported only where vLLM builds it
        ModelRegistry.register_model(ARCHITECTURE, "layerbench_gpulike.model:GpuLikeQwen2ForCausalLM")
    if os.environ.get(BLOCKING_WAIT_ENV) == "1":
        _blocking_readers()


def _blocking_readers() -> None:
    """Readers of vLLM's shared-memory message queues go straight to their blocking poll (busy_loop_s = 0), polled
    at most WAKE_MS at a time. The writer publishes a notification after each write, but most are not seen by a
    blocked reader (vLLM's readers spin past them, and recheck every 5 s when idle). Measured with vLLM 0.32.0 on
    this 2-core host: blocking on the notification alone stretched a 16-token request from 0.67 s to 10.7-15.7 s,
    and with a 50 ms wake 20 sequential 64-token requests took 65.9 s instead of 12.7 s, ~40 ms lost per step.
    Waking every 1 ms bounds what a missed one costs (the pacer takes it out of the sleep like vLLM's other work
    between steps), at about a tenth of a core for EngineCore instead of the spin's whole one."""
    from vllm.distributed.device_communicators import shm_broadcast

    cond = shm_broadcast.SpinCondition
    if getattr(cond, "_layerbench_blocking", False):  # plugins load more than once per process
        return
    original_init, original_wait = cond.__init__, cond.wait

    def __init__(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        if self.is_reader:
            self.busy_loop_s = 0.0

    def wait(self, timeout_ms: int | None = None) -> None:
        original_wait(self, timeout_ms=WAKE_MS if timeout_ms is None else min(timeout_ms, WAKE_MS))

    cond.__init__ = __init__
    cond.wait = wait
    cond._layerbench_blocking = True
