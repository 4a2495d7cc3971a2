"""Load profiles: what load to send (levels, request counts, token lengths, SLOs) and the engine settings
both deployments of a compare must share. Built-in profiles live in harness/profiles/*.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import LayerbenchError

PROFILE_DIR = Path(__file__).parent / "profiles"


class SLO(BaseModel):
    """A request is good when it succeeded and met every set bound (seconds)."""

    model_config = ConfigDict(extra="forbid")
    ttft_s: float = Field(0.5, gt=0)
    e2e_s: float = Field(10.0, gt=0)
    itl_p95_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)


class EngineSettings(BaseModel):
    """vLLM settings applied identically to a stack and to its baseline."""

    model_config = ConfigDict(extra="forbid")
    max_model_len: int = Field(2048, gt=0)
    max_num_seqs: int = Field(64, gt=0)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    enforce_eager: bool = False
    kv_cache_gib: float = Field(1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE on CPU hosts")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    enable_prefix_caching: bool = True
    extra_args: list[str] = Field(default_factory=list)


class LoadProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    requests: int = Field(100, gt=0, description="minimum measured requests per level")
    requests_per_concurrency: int = Field(
        8, ge=0, description="a level sends at least this many requests per concurrent slot"
    )
    min_duration_s: float = Field(0.0, ge=0, description="a level keeps sending until this long has passed")
    warmup_waves: int = Field(1, ge=0)
    input_tokens: int = Field(128, gt=16)
    output_tokens: int = Field(64, gt=1)
    api: Literal["completions", "chat"] = "completions"
    ignore_eos: bool = True
    request_timeout_s: float = Field(120.0, gt=0)
    scrape_interval_s: float = Field(2.0, gt=0)
    repeats: int = Field(1, ge=1)
    slo: SLO = Field(default_factory=SLO)
    engine: EngineSettings = Field(default_factory=EngineSettings)

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("concurrency levels must be positive integers")
        return sorted(set(v))

    def requests_for(self, concurrency: int) -> int:
        """Window size: short windows at high concurrency are all ramp and tail (see DESIGN, window size)."""
        return max(self.requests, self.requests_per_concurrency * concurrency)


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> LoadProfile:
    """A built-in profile name or a YAML file; any problem becomes one LayerbenchError naming the field."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise LayerbenchError(
                f"unknown profile {name_or_path!r}: built-in profiles are {', '.join(builtin_profiles())}, "
                "or give a path to a YAML file"
            )
    if not path.exists():
        raise LayerbenchError(f"profile file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LayerbenchError(f"profile {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise LayerbenchError(f"profile {path} must be a YAML mapping of fields")
    data.setdefault("name", path.stem)
    try:
        return LoadProfile.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"field '{'.'.join(str(x) for x in err['loc'])}': {err['msg']}" for err in e.errors()
        )
        raise LayerbenchError(f"profile {path} is malformed: {problems}") from None
