"""What a measurement costs in money, given what one GPU (or host) costs per hour (`GPU_HOURLY_USD`): the run's
own cost from its wall time, and dollars per million output tokens at a measured throughput, which at the
capacity level is what serving at the SLA costs per token on one GPU."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from harness.errors import LayerbenchError

ENV = "GPU_HOURLY_USD"


class Price(BaseModel):
    hourly_usd: float = Field(gt=0)

    def run_usd(self, wall_s: float) -> float:
        return self.hourly_usd * wall_s / 3600.0

    def usd_per_mtok(self, tok_s: float | None) -> float | None:
        """$ per million output tokens at a sustained tok/s on one GPU; None without throughput."""
        if not tok_s or tok_s <= 0:
            return None
        return self.hourly_usd / (tok_s * 3600.0) * 1e6

    def text(self) -> str:
        return f"${self.hourly_usd:g} per GPU-hour"


def price(given: float | None = None) -> Price | None:
    """From --gpu-hourly-usd, else the GPU_HOURLY_USD environment variable; None when neither is set."""
    raw = given if given is not None else os.environ.get(ENV) or None
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise LayerbenchError(f"{ENV} must be a number of dollars per GPU-hour, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise LayerbenchError(f"{ENV} must be a positive number of dollars per GPU-hour, got {raw!r}")
    return Price(hourly_usd=value)


def usd(v: float | None) -> str:
    if v is None:
        return "—"
    return f"${v:,.2f}" if v >= 0.1 else f"${v:.4f}"
