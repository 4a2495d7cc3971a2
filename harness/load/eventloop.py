"""The load client's event loop: uvloop where it is installed (a project dependency on Linux and macOS), else
asyncio's own. Measured on the 2-core CPU host (`make bench-harness`, the scale section's method), uvloop took
about a sixth less of the client's CPU per SSE event at c=64, at the same TTFT accuracy; a run records which loop
it had (run.json `client_loop`). The reference engine and the benchmark's floor client keep asyncio's loop: they
are instruments, calibrated as they are."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # Windows, or an environment installed without it
    uvloop = None

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on the client's loop."""
    if uvloop is not None:
        return uvloop.run(main)
    return asyncio.run(main)


def name() -> str:
    return f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio"
