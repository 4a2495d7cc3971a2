"""What the measured windows mean: per-level statistics, stationarity, the verdicts, where the latency went, the
engine's own figures, the KV-cache arithmetic, the emulated step, the audit and the cost."""
