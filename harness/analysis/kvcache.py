"""KV-cache arithmetic from a model's config.json, held against what the engine printed at startup. Owns: the
model's attention shape and weight size (config.json, *.safetensors headers read by hand, no torch), KV bytes per
token (KV heads, not attention heads), the KV budget and the tokens and concurrency it holds (checked against
vLLM's "KV cache size" line), and the weight-bandwidth lower bound on a token's decode time at c=1."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
import subprocess
from pathlib import Path

from pydantic import BaseModel

from harness.profile.schema import EngineSettings
from harness.schemas import AppliedConfig

BLOCK_SIZE = 16  # vLLM's default KV block size in tokens: the cache holds whole blocks
_DTYPE_BYTES = {"float32": 4, "float": 4, "f32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "half": 2, "f16": 2}
# Peak memory bandwidth in GB/s: vendor spec-sheet figures, not measured. Matched on the words of the name
# nvidia-smi prints; first match wins, so specific forms come before general ones.
_GPU_BANDWIDTH: list[tuple[set[str], set[str], str, float]] = [  # (must have, must not have, label, GB/s)
    ({"h200"}, set(), "H200", 4800), ({"h100", "pcie"}, set(), "H100 PCIe", 2000),
    ({"h100"}, {"nvl"}, "H100 SXM", 3350), ({"a100", "80gb"}, {"pcie"}, "A100 80GB SXM", 2039),
    ({"a100", "40gb"}, set(), "A100 40GB", 1555), ({"l40s"}, set(), "L40S", 864), ({"l4"}, set(), "L4", 300),
    ({"a10g"}, set(), "A10G", 600), ({"a10"}, set(), "A10", 600), ({"4090"}, {"laptop"}, "RTX 4090", 1008),
    ({"4080", "laptop"}, set(), "RTX 4080 Laptop", 432),
]
_IMPLIED = "implied by the engine log"
_HEADER = ["", "computed from config.json", "engine startup log"]


class ModelShape(BaseModel):
    """What decides KV bytes per token and weight bytes, from config.json and the safetensors headers."""
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # = num_attention_heads when the config has none (MHA)
    head_dim: int
    torch_dtype: str | None = None
    quantized: bool = False  # config.json has a quantization_config: weights stay in their stored dtype
    param_count: int | None = None  # None: no *.safetensors in the directory, or one is unreadable
    stored_weight_bytes: int | None = None


class KVCacheFacts(BaseModel):
    """Computed KV-cache figures beside the engine's own, for a report (JSON-serialisable)."""
    shape: ModelShape
    served_dtype: str
    kv_dtype: str
    kv_dtype_bytes: int
    bytes_per_token: int  # K and V of every layer for the KV heads: what the engine allocates
    mha_bytes_per_token: int  # the textbook formula, with attention heads
    mha_overestimate: float
    budget_bytes: int | None = None
    budget_source: str  # "VLLM_CPU_KVCACHE_SPACE=N", "implied by the engine log", "unknown"
    tokens_computed: int | None = None
    tokens_logged: int | None = None
    context_tokens: int
    concurrency_computed: float | None = None
    concurrency_logged: float | None = None
    agrees: bool | None = None  # None: nothing independent to compare (no log line, or a GPU host)
    weight_bytes: int | None = None
    bandwidth_gbs: float | None = None
    bandwidth_source: str | None = None
    decode_floor_ms: float | None = None
    notes: list[str] = []


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a dtype as configs and vLLM spell it ("torch.bfloat16", "fp8_e5m2"); None if unknown."""
    n = name.lower().removeprefix("torch.")
    return 1 if n.startswith(("fp8", "float8")) else _DTYPE_BYTES.get(n)


def _safetensors_sizes(model_dir: Path) -> tuple[int | None, int | None]:
    """(parameter count, stored bytes) summed over the *.safetensors headers; (None, None) if none or unreadable.
    A header is an 8-byte little-endian length, then JSON: {name: {dtype, shape, data_offsets}}."""
    files, params, stored = sorted(model_dir.glob("*.safetensors")), 0, 0
    try:
        for f in files:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n)) if n <= 100 * 2**20 else None
            tensors = [t for name, t in header.items() if name != "__metadata__"]
            params += sum(math.prod(t["shape"]) for t in tensors)
            stored += sum(t["data_offsets"][1] - t["data_offsets"][0] for t in tensors)
    except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None, None
    return (params, stored) if files else (None, None)


def read_model_shape(model_dir: Path) -> ModelShape | None:
    """The model's shape, or None if config.json is missing, unreadable or lacks the attention fields."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
            cfg = {**cfg, **cfg["text_config"]}  # multimodal wrappers keep the language model's shape here
        heads = int(cfg["num_attention_heads"])
        head_dim = cfg.get("head_dim") or int(cfg["hidden_size"]) // heads
        dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        params, stored = _safetensors_sizes(Path(model_dir))
        return ModelShape(num_hidden_layers=int(cfg["num_hidden_layers"]), num_attention_heads=heads,
                          num_key_value_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=int(head_dim),
                          torch_dtype=str(dtype) if dtype else None, quantized="quantization_config" in cfg,
                          param_count=params, stored_weight_bytes=stored)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return None


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, elem_bytes: int) -> int:
    """K and V for every layer: 2 × layers × KV heads × head_dim × bytes (attention heads: the MHA formula)."""
    return 2 * layers * kv_heads * head_dim * elem_bytes


def cpu_kv_budget_bytes(kv_cache_gib: float) -> int:
    """The KV budget of a CPU engine: VLLM_CPU_KVCACHE_SPACE as stacks/vllm.py engine_env sets it, in GiB."""
    return max(1, round(kv_cache_gib)) * 2**30


def tokens_that_fit(budget_bytes: int, bytes_per_token: int, block_size: int = BLOCK_SIZE) -> int:
    """Tokens the cache holds: whole blocks only."""
    return budget_bytes // (bytes_per_token * block_size) * block_size


def max_concurrency(tokens: int, context_tokens: int, block_size: int = BLOCK_SIZE) -> float:
    """Requests of `context_tokens` the cache holds at once, counted in blocks as vLLM counts them."""
    return (tokens // block_size) / math.ceil(context_tokens / block_size)


def gpu_bandwidth_gbs(gpu_name: str) -> tuple[str, float] | None:
    """(label, spec-sheet GB/s) for a recognised GPU name as nvidia-smi prints it, else None."""
    words = set(re.findall(r"[a-z0-9]+", gpu_name.lower()))
    return next(((label, gbs) for need, avoid, label, gbs in _GPU_BANDWIDTH if need <= words and not avoid & words),
                None)


def detect_gpu() -> str | None:
    """The first GPU's name from nvidia-smi; None when there is none or nvidia-smi fails. Never raises."""
    try:
        exe = shutil.which("nvidia-smi")
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10) if exe else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out and out.returncode == 0 else []
    return lines[0] if lines else None


def decode_floor_ms(weight_bytes: int, bandwidth_gbs: float) -> float:
    """Every decode step reads all weights once: weight bytes ÷ bandwidth (GB/s, 10^9 bytes), in ms."""
    return weight_bytes / (bandwidth_gbs * 1e9) * 1e3


def kv_facts(model_dir: Path, engine: EngineSettings, applied: AppliedConfig | None, on_gpu: bool,
             bandwidth_gbs: float | None = None, gpu_name: str | None = None) -> KVCacheFacts | None:
    """KV-cache and decode-floor facts for `engine` serving `model_dir`, beside the engine's startup log.
    None (no exception) if config.json is missing or unusable, or a dtype is unknown. `gpu_name` picks a
    spec-sheet bandwidth when none is given (pass detect_gpu()); a GPU's budget is derived from the log."""
    if (shape := read_model_shape(model_dir)) is None:
        return None
    served = (engine.dtype if engine.dtype != "auto" else shape.torch_dtype or "float32").removeprefix("torch.")
    kv_dtype = engine.kv_cache_dtype if engine.kv_cache_dtype != "auto" else served
    served_bytes, kv_bytes = dtype_bytes(served), dtype_bytes(kv_dtype)
    if served_bytes is None or kv_bytes is None:
        return None
    notes: list[str] = []
    bpt = kv_bytes_per_token(shape.num_hidden_layers, shape.num_key_value_heads, shape.head_dim, kv_bytes)
    mha = kv_bytes_per_token(shape.num_hidden_layers, shape.num_attention_heads, shape.head_dim, kv_bytes)
    log = applied or AppliedConfig()
    context = log.max_concurrency_at_tokens or engine.max_model_len
    budget = tokens = agrees = None
    source, logged = "unknown", log.kv_cache_tokens
    if engine.kv_cache_blocks is not None:  # so many blocks whatever the memory: the log says how many tokens
        source = f"engine.kv_cache_blocks={engine.kv_cache_blocks} (--num-gpu-blocks-override)"
        budget = logged * bpt if logged is not None else None
    elif not on_gpu:
        budget = cpu_kv_budget_bytes(engine.kv_cache_gib)
        source, tokens = f"VLLM_CPU_KVCACHE_SPACE={budget // 2**30}", tokens_that_fit(budget, bpt)
    elif logged is not None:
        budget, source = logged * bpt, _IMPLIED
    if on_gpu and engine.kv_cache_blocks is None:
        notes.append("On a GPU the KV budget is what gpu_memory_utilization leaves after weights and activations: "
                     + ("here, the logged tokens × bytes per token." if budget else "no startup log line was found."))
    held = logged if tokens is None else tokens
    conc = round(max_concurrency(held, context), 2) if held is not None else None
    if tokens is not None and logged is not None:
        agrees = abs(tokens - logged) <= 0.01 * logged and (log.max_concurrency is None or conc is not None and
                                                            abs(conc - log.max_concurrency) <= 0.01 * conc)
        if tokens != logged:
            notes.append(f"The engine holds {logged:,} tokens where the arithmetic gives {tokens:,}"
                         + (" (within 1%)." if agrees else ": its KV layout or budget differs."))
    if mha > bpt:
        notes.append(f"With {shape.num_key_value_heads} KV heads for {shape.num_attention_heads} attention heads "
                     f"(GQA), sizing the cache with attention heads overestimates it {mha / bpt:.1f}x.")
    weights = shape.stored_weight_bytes if shape.quantized or shape.param_count is None else \
        shape.param_count * served_bytes
    if shape.quantized:
        notes.append("The checkpoint is quantized: the decode bound uses the weight bytes as stored.")
    bw_source = "given" if bandwidth_gbs else None
    if not bandwidth_gbs and on_gpu and gpu_name and (known := gpu_bandwidth_gbs(gpu_name)):
        bw_source, bandwidth_gbs = f"{known[0]} spec sheet", known[1]
    if not bandwidth_gbs:
        why = f"the memory bandwidth of {gpu_name or 'this GPU'}" if on_gpu else "a CPU host's memory bandwidth"
        notes.append(f"No decode bound: {why} is not known; give it in GB/s for one.")
    elif weights is None:
        notes.append("No decode bound: the model directory has no readable *.safetensors to count weights from.")
    floor = decode_floor_ms(weights, bandwidth_gbs) if weights is not None and bandwidth_gbs else None
    return KVCacheFacts(
        shape=shape, served_dtype=served, kv_dtype=kv_dtype, kv_dtype_bytes=kv_bytes, bytes_per_token=bpt,
        mha_bytes_per_token=mha, mha_overestimate=mha / bpt, budget_bytes=budget, budget_source=source,
        tokens_computed=tokens, tokens_logged=logged, context_tokens=context,
        concurrency_computed=conc, concurrency_logged=log.max_concurrency, agrees=agrees, weight_bytes=weights,
        bandwidth_gbs=bandwidth_gbs or None, bandwidth_source=bw_source, decode_floor_ms=floor, notes=notes)


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n:,.0f} B"


def kv_table(facts: KVCacheFacts, contexts: list[tuple[str, int]] = ()) -> tuple[str, str, list[str], list[list[str]]]:
    """(title, caption, header, rows) comparing the config.json arithmetic with the engine's startup log.
    contexts: (what, tokens) of the workload's own contexts (its p50 and p99 prompt + output): the concurrency
    the cache holds at each, beside the one at the engine's reference context."""
    f, s, implied = facts, facts.shape, facts.budget_source == _IMPLIED
    per_token = f"{_size(f.budget_bytes / f.tokens_logged)} (budget ÷ tokens)" \
        if f.budget_bytes and f.tokens_logged and not implied else ""
    ms = f.decode_floor_ms
    floor = "no bound" if ms is None else (f"{ms:.{'1f' if ms >= 1 else '3g'}} ms per token "
                                           f"({(f.weight_bytes or 0) / 1e9:.3g} GB of weights "
                                           f"÷ {f.bandwidth_gbs:,.0f} GB/s, {f.bandwidth_source})")
    rows = [
        ["KV bytes per token", f"{_size(f.bytes_per_token)} = 2 (K, V) × {s.num_hidden_layers} layers × "
         f"{s.num_key_value_heads} KV heads × {s.head_dim} × {f.kv_dtype_bytes} B ({f.kv_dtype})", per_token],
        ["MHA formula (attention heads)", f"{_size(f.mha_bytes_per_token)}: "
         + (f"x{f.mha_overestimate:.1f} too high" if f.mha_overestimate > 1 else "the same (the model is MHA)"), ""],
        ["KV cache budget", "not known before startup on a GPU" if implied or f.budget_bytes is None else
         f"{_size(f.budget_bytes)} ({f.budget_source})",
         f"{_size(f.budget_bytes)} (tokens × bytes per token)" if implied and f.budget_bytes else ""],
        ["Tokens that fit", *("—" if n is None else f"{n:,}" for n in (f.tokens_computed, f.tokens_logged))],
        [f"Max concurrency at {f.context_tokens:,} tokens",
         *("—" if x is None else f"{x:.2f}x" for x in (f.concurrency_computed, f.concurrency_logged))],
        *([f"Max concurrency at the workload's {what} context ({n:,} tokens)",
           *("—" if t is None else f"{max_concurrency(t, n):.2f}x" for t in (f.tokens_computed, f.tokens_logged))]
          for what, n in contexts if n > 0),
        ["Decode lower bound at c=1", floor, ""],
    ]
    verdict = {True: "The engine's startup log agrees with the arithmetic.", None: "",
               False: "The engine's startup log does not agree with the arithmetic."}[f.agrees]
    caption = " ".join(line for line in [verdict, *f.notes] if line)
    return "KV cache: config.json arithmetic vs the engine's startup log", caption, list(_HEADER), rows
