"""Which metric endpoints answered and which `vllm:*` families survive behind a layer."""

from __future__ import annotations

from pydantic import BaseModel


class EndpointAudit(BaseModel):
    label: str  # baseline | stack
    name: str
    url: str
    status: str  # "200" or the gap reason seen most ("http 404", "connection: ConnectError", ...)
    ok_scrapes: int
    gaps: int
    families: int
    prefixes: dict[str, int]
    vllm_families: int


class FamilyAudit(BaseModel):
    name: str
    status: str  # survives | renamed | lost
    found_as: str | None
    key: str | None  # what a key family tells an operator


class LiveFacts(BaseModel):
    logs: dict[str, str]  # name -> path (exists or not)
    logs_exist: dict[str, bool]
    listening: list[str]  # "addr:port (process)"
    non_loopback: list[str]


class AuditResult(BaseModel):
    stack: str
    endpoints: list[EndpointAudit]
    families: list[FamilyAudit]
    counts: dict[str, int]
    live: dict[str, LiveFacts]
    notes: list[str]
    layer_families: dict[str, list[str]] = {}  # stack endpoint -> families the baseline does not have (nv_*, ray_*)

    @property
    def kept(self) -> int:
        """How many of the baseline's vllm:* families are still visible behind the layer (by name or renamed)."""
        return sum(fa.status != "lost" for fa in self.families)
