"""Stack adapters, one module per serving stack; importing the package registers them by `kind`."""

from stacks import endpoint, kserve, ray, sim, triton, vllm  # noqa: F401
from stacks.base import REGISTRY, Stack, get_stack

__all__ = ["REGISTRY", "Stack", "get_stack"]
