"""KV-cache arithmetic (harness/analysis/kvcache.py): hand-computed figures, the real startup-log lines of this host's
vLLM 0.32.0 (CPU), safetensors headers written by hand, and nvidia-smi detection. No engine, no network."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from harness.analysis.kvcache import (
    KVCacheFacts,
    cpu_kv_budget_bytes,
    decode_floor_ms,
    detect_gpu,
    dtype_bytes,
    gpu_bandwidth_gbs,
    kv_facts,
    kv_table,
    max_concurrency,
    read_model_shape,
    tokens_that_fit,
)
from harness.profile.schema import EngineSettings
from harness.schemas import AppliedConfig
from stacks.base import DeploySettings, parse_startup_log

LLAMA2_7B = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "torch_dtype": "float16"}
QWEN25_15B = {"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536,
              "torch_dtype": "bfloat16"}
# scripts/make_model.py's model as transformers 5 saved it (`dtype`, not `torch_dtype`)
TINY = {"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "dtype": "float32"}
# this host's vLLM 0.32.0 (CPU), 1 GiB VLLM_CPU_KVCACHE_SPACE, max_model_len 2048 (results/*/logs/*.log)
LOG_F32 = ("(EngineCore pid=12345) INFO 11-30 08:59:40 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, "
           "Maximum concurrency for 2,048 tokens per request: 256.00x")
LOG_BF16 = ("(EngineCore pid=15257) INFO 11-30 09:41:45 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, "
            "Maximum concurrency for 2,048 tokens per request: 512.00x")


def model_dir(tmp_path: Path, config: dict, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A real safetensors file: 8-byte little-endian header length, JSON header, zeroed data."""
    size = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1}
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def test_mha_config_llama2_7b(tmp_path):
    f = kv_facts(model_dir(tmp_path, LLAMA2_7B), EngineSettings(dtype="auto"), None, on_gpu=False)
    assert f.shape.num_key_value_heads == 32 and f.shape.head_dim == 128  # no num_key_value_heads: MHA
    assert f.served_dtype == "float16" and f.kv_dtype_bytes == 2  # auto: the config's torch_dtype
    assert f.bytes_per_token == 524_288 == 512 * 2**10
    assert f.mha_bytes_per_token == 524_288 and f.mha_overestimate == 1.0
    rows = kv_table(f)[3]
    assert rows[0][1].startswith("512.0 KiB = 2 (K, V) × 32 layers × 32 KV heads × 128 × 2 B")
    assert "the same" in rows[1][1]


def test_gqa_config_qwen25_15b_and_the_mha_formula(tmp_path):
    f = kv_facts(model_dir(tmp_path, QWEN25_15B), EngineSettings(dtype="bfloat16"), None, on_gpu=False)
    assert (f.bytes_per_token, f.mha_bytes_per_token, f.mha_overestimate) == (28_672, 172_032, 6.0)
    title, caption, header, rows = kv_table(f)
    assert header == ["", "computed from config.json", "engine startup log"]
    assert rows[0][1].startswith("28.0 KiB") and rows[1][1] == "168.0 KiB: x6.0 too high"
    assert "2 KV heads for 12 attention heads" in caption and "6.0x" in caption


def test_config_head_dim_and_nested_text_config(tmp_path):
    explicit = {**QWEN25_15B, "head_dim": 64}  # a head_dim key wins over hidden_size // heads
    assert kv_facts(model_dir(tmp_path, explicit), EngineSettings(), None, False).bytes_per_token == 14_336
    nested = {"model_type": "wrapper", "text_config": QWEN25_15B}
    assert kv_facts(model_dir(tmp_path, nested, "n"), EngineSettings(), None, False).bytes_per_token == 28_672


@pytest.mark.parametrize("dtype,log,tokens,conc", [("float32", LOG_F32, 524_288, 256.0),
                                                    ("bfloat16", LOG_BF16, 1_048_576, 512.0)])
def test_tiny_model_reproduces_the_engines_startup_log(tmp_path, dtype, log, tokens, conc):
    applied = parse_startup_log(log)
    engine = EngineSettings(dtype=dtype, kv_cache_gib=1.0, max_model_len=2048)
    f = kv_facts(model_dir(tmp_path, TINY), engine, applied, on_gpu=False)
    assert f.budget_bytes == 2**30 and f.budget_source == "VLLM_CPU_KVCACHE_SPACE=1"
    assert f.tokens_computed == f.tokens_logged == tokens
    assert f.concurrency_computed == f.concurrency_logged == conc and f.context_tokens == 2048
    assert f.agrees is True
    _, caption, _, rows = kv_table(f)
    assert rows[3][1:] == [f"{tokens:,}", f"{tokens:,}"] and rows[4][1:] == [f"{conc:.2f}x", f"{conc:.2f}x"]
    assert caption.startswith("The engine's startup log agrees")


def test_auto_dtype_uses_the_config_and_a_wrong_log_does_not_agree(tmp_path):
    d = model_dir(tmp_path, TINY)
    f = kv_facts(d, EngineSettings(dtype="auto"), parse_startup_log(LOG_F32), on_gpu=False)
    assert f.served_dtype == "float32" and f.agrees is True
    bf16 = model_dir(tmp_path, {**TINY, "dtype": "bfloat16"}, "bf16")  # transformers 5 writes `dtype`
    f = kv_facts(bf16, EngineSettings(dtype="auto"), parse_startup_log(LOG_BF16), on_gpu=False)
    assert f.served_dtype == "bfloat16" and f.bytes_per_token == 1024 and f.agrees is True
    f = kv_facts(d, EngineSettings(dtype="float32"), parse_startup_log(LOG_BF16), on_gpu=False)
    assert f.tokens_computed == 524_288 and f.agrees is False
    assert any("1,048,576 tokens where the arithmetic gives 524,288" in n for n in f.notes)
    assert "does not agree" in kv_table(f)[1]


def test_within_one_percent_agrees_but_is_noted(tmp_path):
    applied = AppliedConfig(kv_cache_tokens=1_040_000, max_concurrency=508.0, max_concurrency_at_tokens=2048)
    f = kv_facts(model_dir(tmp_path, TINY), EngineSettings(dtype="bfloat16"), applied, on_gpu=False)
    assert f.agrees is True and any("(within 1%)" in n for n in f.notes)
    applied = AppliedConfig(kv_cache_tokens=1_000_000, max_concurrency=488.28, max_concurrency_at_tokens=2048)
    assert kv_facts(model_dir(tmp_path, TINY, "b"), EngineSettings(dtype="bfloat16"), applied, False).agrees is False


def test_fp8_kv_cache_halves_bf16(tmp_path):
    d = model_dir(tmp_path, QWEN25_15B)
    bf16 = kv_facts(d, EngineSettings(dtype="bfloat16"), None, on_gpu=False)
    for kv in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        fp8 = kv_facts(d, EngineSettings(dtype="bfloat16", kv_cache_dtype=kv), None, on_gpu=False)
        assert fp8.kv_dtype == kv and fp8.kv_dtype_bytes == 1
        assert fp8.bytes_per_token * 2 == bf16.bytes_per_token == 28_672
        # 2**30 B holds 74,898 fp8 tokens (4,681 whole blocks) against 37,449 bf16 ones (2,340 blocks)
        assert (fp8.tokens_computed, bf16.tokens_computed) == (74_896, 37_440)
    assert dtype_bytes("torch.float32") == 4 and dtype_bytes("int4") is None
    assert kv_facts(d, EngineSettings(kv_cache_dtype="int3"), None, on_gpu=False) is None


def test_block_rounding_and_concurrency_in_blocks():
    assert tokens_that_fit(10_000, 100) == 96  # 100 tokens fit, 6 whole blocks of 16
    assert tokens_that_fit(2**30, 1024) == 1_048_576
    assert max_concurrency(1_048_576, 2048) == 512.0
    assert max_concurrency(1600, 1000) == 100 / 63  # 100 blocks; a 1,000-token request takes 63 blocks


@pytest.mark.parametrize("gib", [0.4, 1.0, 1.5, 2.5, 3.6])
def test_cpu_budget_matches_what_the_engine_is_given(gib):
    from stacks.base.engine_env import engine_env

    env = engine_env(DeploySettings(engine=EngineSettings(kv_cache_gib=gib)))
    assert cpu_kv_budget_bytes(gib) == int(env["VLLM_CPU_KVCACHE_SPACE"]) * 2**30


def test_safetensors_headers_give_params_and_the_decode_floor(tmp_path):
    d = model_dir(tmp_path, TINY)
    write_safetensors(d / "model-00001-of-00002.safetensors", {"embed": ("F32", [1024, 256]), "norm": ("F32", [256])})
    write_safetensors(d / "model-00002-of-00002.safetensors", {"lm_head": ("BF16", [1024, 256])})
    shape = read_model_shape(d)
    assert shape.param_count == 2 * 262_144 + 256
    assert shape.stored_weight_bytes == 262_144 * 4 + 256 * 4 + 262_144 * 2
    f = kv_facts(d, EngineSettings(dtype="bfloat16"), None, on_gpu=False, bandwidth_gbs=864.0)
    assert f.weight_bytes == (2 * 262_144 + 256) * 2  # served dtype, not stored dtype
    assert f.decode_floor_ms == pytest.approx(f.weight_bytes / 864e9 * 1e3, rel=1e-12)
    assert f.bandwidth_source == "given"
    assert kv_table(f)[3][5][1].startswith("0.00121 ms per token (0.00105 GB of weights ÷ 864 GB/s, given)")
    gpu = kv_facts(d, EngineSettings(dtype="float32"), None, on_gpu=True, gpu_name="NVIDIA L40S")
    assert gpu.bandwidth_gbs == 864 and gpu.bandwidth_source == "L40S spec sheet"
    assert gpu.weight_bytes == 2_098_176 and gpu.decode_floor_ms == pytest.approx(2_098_176 / 864e9 * 1e3)
    assert decode_floor_ms(27_800_000_000, 864) == pytest.approx(32.18, abs=0.01)  # 27B FP8 on an L40S


def test_quantized_checkpoint_uses_stored_bytes(tmp_path):
    d = model_dir(tmp_path, {**QWEN25_15B, "quantization_config": {"quant_method": "fp8"}})
    write_safetensors(d / "model.safetensors", {"w": ("F8_E4M3", [1000, 1000]), "s": ("F32", [1000])})
    f = kv_facts(d, EngineSettings(dtype="bfloat16"), None, on_gpu=True, bandwidth_gbs=1000.0)
    assert f.shape.param_count == 1_001_000 and f.weight_bytes == 1_004_000
    assert f.decode_floor_ms == pytest.approx(1.004e-3)


def test_no_bound_without_bandwidth_and_why(tmp_path):
    d = model_dir(tmp_path, TINY)
    write_safetensors(d / "model.safetensors", {"w": ("F32", [16, 16])})
    cpu = kv_facts(d, EngineSettings(), None, on_gpu=False)
    assert cpu.decode_floor_ms is None and any("CPU host" in n for n in cpu.notes)
    unknown = kv_facts(d, EngineSettings(), None, on_gpu=True, gpu_name="Tesla T4")
    assert unknown.decode_floor_ms is None and any("Tesla T4" in n for n in unknown.notes)
    assert kv_table(cpu)[3][5][1] == "no bound"
    bare = kv_facts(model_dir(tmp_path, TINY, "bare"), EngineSettings(), None, on_gpu=False, bandwidth_gbs=100.0)
    assert bare.shape.param_count is None and bare.decode_floor_ms is None
    assert any("safetensors" in n for n in bare.notes)


def test_gpu_budget_is_implied_by_the_log(tmp_path):
    applied = AppliedConfig(kv_cache_tokens=100_000, max_concurrency=48.83, max_concurrency_at_tokens=2048)
    f = kv_facts(model_dir(tmp_path, QWEN25_15B), EngineSettings(), applied, on_gpu=True)
    assert f.budget_bytes == 100_000 * 28_672 and f.budget_source == "implied by the engine log"
    assert f.tokens_computed is None and f.agrees is None and f.concurrency_computed == 48.83
    rows = kv_table(f)[3]
    assert rows[2][1] == "not known before startup on a GPU" and rows[2][2].startswith("2.67 GiB")
    no_log = kv_facts(model_dir(tmp_path, QWEN25_15B, "b"), EngineSettings(), None, on_gpu=True)
    assert no_log.budget_bytes is None and no_log.budget_source == "unknown" and no_log.concurrency_computed is None


@pytest.mark.parametrize("name,label,gbs", [
    ("NVIDIA L40S", "L40S", 864), ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350), ("NVIDIA H100 PCIe", "H100 PCIe", 2000),
    ("NVIDIA H200", "H200", 4800), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2039),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1555), ("NVIDIA A100-PCIE-40GB", "A100 40GB", 1555),
    ("NVIDIA L4", "L4", 300),
    ("NVIDIA A10G", "A10G", 600), ("NVIDIA A10", "A10", 600), ("NVIDIA GeForce RTX 4090", "RTX 4090", 1008),
    ("NVIDIA GeForce RTX 4080 Laptop GPU", "RTX 4080 Laptop", 432),
])
def test_known_gpus(name, label, gbs):
    assert gpu_bandwidth_gbs(name) == (label, gbs)


@pytest.mark.parametrize("name", ["Tesla T4", "NVIDIA A100 80GB PCIe", "NVIDIA GeForce RTX 4090 Laptop GPU", "L40"])
def test_unknown_gpus(name):
    assert gpu_bandwidth_gbs(name) is None


def test_missing_or_unreadable_config_is_none(tmp_path):
    assert kv_facts(tmp_path / "absent", EngineSettings(), None, on_gpu=False) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert kv_facts(tmp_path / "bad", EngineSettings(), None, on_gpu=False) is None
    assert kv_facts(model_dir(tmp_path, {"hidden_size": 8}), EngineSettings(), None, on_gpu=False) is None
    d = model_dir(tmp_path, TINY, "torn")
    (d / "model.safetensors").write_bytes(b"\x10\x00")  # a torn header: no params, still facts
    assert read_model_shape(d).param_count is None and kv_facts(d, EngineSettings(), None, False) is not None


def test_facts_round_trip_through_json(tmp_path):
    f = kv_facts(model_dir(tmp_path, TINY), EngineSettings(), parse_startup_log(LOG_BF16), on_gpu=False)
    assert KVCacheFacts.model_validate_json(f.model_dump_json()) == f


def _fake_smi(tmp_path: Path, script: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    return str(bin_dir)


def test_detect_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert detect_gpu() is None
    monkeypatch.setenv("PATH", _fake_smi(tmp_path / "a", 'printf "NVIDIA L40S\\nNVIDIA L40S\\n"\n') + os.pathsep)
    assert detect_gpu() == "NVIDIA L40S"
    monkeypatch.setenv("PATH", _fake_smi(tmp_path / "b", 'echo "NVIDIA-SMI has failed"; exit 9\n'))
    assert detect_gpu() is None
