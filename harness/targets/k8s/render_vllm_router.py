"""The vllm-router stack's cluster form: named by the adapter's `k8s_form` (stacks/vllm_router.py)."""

from __future__ import annotations

from typing import Any

from stacks.base import Stack
from stacks.vllm_router import IMAGE, METRICS_PORT, PORT, VllmRouterStack


def render_k8s(stack: Stack, cs: Any, run_id: str, label: str) -> Any:
    """The bare vLLM engines and the router's Deployment and Service in front of them (manifests/vllm-router/)."""
    from harness.targets.k8s.render_router import RouterForm, render_router

    assert isinstance(stack, VllmRouterStack)
    return render_router(stack, cs, run_id, label, RouterForm(
        "vllm-router", stack.options.image or IMAGE, PORT, METRICS_PORT, "router_metrics"))
