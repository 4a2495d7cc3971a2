"""The KV-cache arithmetic from the model's config.json beside what the engine's startup log says, as report
tables: one per deployment whose engine settings differ (a setting sweep changes them)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.analysis.kvcache import detect_gpu, kv_facts, kv_table
from harness.profile.schema import EngineSettings
from harness.reporting.document import Table
from harness.schemas import AppliedConfig
from stacks.base import MODEL_DIR

BANDWIDTH_ENV = "GPU_BANDWIDTH_GBS"  # the GPU's memory bandwidth, for the decode lower bound


def bandwidth() -> float | None:
    try:
        v = float(os.environ.get(BANDWIDTH_ENV, ""))
    except ValueError:
        return None
    return v if v > 0 else None


def kv_tables(sides: list[tuple[str, EngineSettings, AppliedConfig | None]], model_dir: Path = MODEL_DIR,
              contexts: list[tuple[str, int]] = ()) -> list[Table]:
    """sides: (who, engine settings, what its engine reported applying); sides with the same settings and log
    share one table. contexts: the workload's own contexts, (what, tokens), each a row."""
    gpu = detect_gpu()
    unique: dict[str, list] = {}  # sides with the same settings and log -> one table naming them all
    for who, engine, applied in sides:
        key = engine.model_dump_json() + (applied.model_dump_json() if applied else "")
        unique.setdefault(key, [[], engine, applied])[0].append(who)
    out: list[Table] = []
    for whos, engine, applied in unique.values():
        facts = kv_facts(model_dir, engine, applied, on_gpu=gpu is not None, bandwidth_gbs=bandwidth(), gpu_name=gpu)
        if facts is None:
            continue
        title, caption, header, rows = kv_table(facts, contexts)
        out.append((f"{title} ({', '.join(whos)})" if len(unique) > 1 else title, caption, header, rows))
    return out
