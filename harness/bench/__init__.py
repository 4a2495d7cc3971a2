"""`make bench-harness`: how accurate is layerbench? Accuracy, resolution and capacity against the reference
engine, side by side with `vllm bench serve` and a minimal raw-socket floor client."""
