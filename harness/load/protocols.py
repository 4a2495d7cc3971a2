"""Wire protocols by `Endpoint.protocol`: which streaming client measures a deployment. Each client is
measured against the reference engine by `make bench-harness` (its excess over a raw-socket floor)."""

from __future__ import annotations

from harness.load.client import StreamClient
from harness.load.triton_client import TritonStreamClient

CLIENTS: dict[str, type[StreamClient]] = {c.protocol: c for c in (StreamClient, TritonStreamClient)}
