"""The smg stack's cluster form: named by the adapter's `k8s_form` (stacks/smg.py)."""

from __future__ import annotations

from typing import Any

from stacks.base import Stack
from stacks.smg import IMAGE, METRICS_PORT, PORT, SmgStack


def render_k8s(stack: Stack, cs: Any, run_id: str, label: str) -> Any:
    """The bare vLLM engines and the gateway's Deployment and Service in front of them (manifests/smg/)."""
    from harness.targets.k8s.render_router import RouterForm, render_router

    assert isinstance(stack, SmgStack)
    return render_router(stack, cs, run_id, label, RouterForm(
        "smg", stack.options.image or IMAGE, PORT, METRICS_PORT, "smg_metrics"))
