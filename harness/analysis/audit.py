"""Observability audit: what a user can still see of the engine behind a layer.

From the scrapes of both deployments: every metric endpoint's HTTP status, its metric families by prefix, and
for each `vllm:*` family of the baseline whether the stack still exposes it (survives), exposes it under
the name the stack declares for it, such as `ray_vllm_*` (survives renamed), or not at all (lost); the key
families are flagged.
From the live deployment: where the engine's own log went and which ports listen beyond loopback."""

from __future__ import annotations

import ipaddress
from collections import Counter

from harness.analysis.vllm_metrics import ENGINE_PREFIX, KEY_FAMILIES, prefix_of, renamed_as
from harness.schemas import AuditResult, EndpointAudit, FamilyAudit, LiveFacts


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8 and ::1, and ::ffff:127.x: how a dual-stack socket bound to 127.0.0.1 reads (Ray's gRPC
    servers), which a prefix test would report as listening beyond loopback."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip == "localhost"
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def _families(scrapes: list[dict]) -> set[str]:
    return {f for s in scrapes if s["ok"] for f in s["families"] if not f.endswith("_created")}


METRICLESS = "no /metrics (declared by the stack; not scraped)"


def audit_from_scrapes(scrapes: list[dict], live: dict[str, LiveFacts], stack: str,
                       renames: tuple[str, ...] = (), note: str | None = None,
                       metricless: dict[str, str] | None = None) -> AuditResult:
    """renames: the prefixes the stack declares it puts in place of `vllm:` (Stack.metric_aliases); note: the
    stack's sentence on the setting that decides its engine metrics (Stack.observability_note); metricless: the
    stack's endpoints it declares serve no /metrics (Stack.metricless_endpoints), listed as such, never scraped."""
    endpoints = [EndpointAudit(label="stack", name=name, url=url, status=METRICLESS, ok_scrapes=0, gaps=0,
                               families=0, prefixes={}, vllm_families=0) for name, url in (metricless or {}).items()]
    by_label: dict[str, list[dict]] = {}
    for s in scrapes:
        by_label.setdefault(s.get("label", "stack"), []).append(s)
    for label in ("baseline", "stack"):
        per_ep: dict[str, list[dict]] = {}
        for s in by_label.get(label, []):
            per_ep.setdefault(s["endpoint"], []).append(s)
        for name, ss in per_ep.items():
            fams = _families(ss)
            ok = [s for s in ss if s["ok"]]
            reasons = Counter(s["reason"] for s in ss if not s["ok"])
            endpoints.append(EndpointAudit(
                label=label, name=name, url=ss[0]["url"], status="200" if ok else reasons.most_common(1)[0][0],
                ok_scrapes=len(ok), gaps=len(ss) - len(ok), families=len(fams),
                prefixes=dict(Counter(prefix_of(f, renames) for f in fams).most_common()),
                vllm_families=sum(f.startswith("vllm:") for f in fams),
            ))
    base_vllm = sorted(f for f in _families(by_label.get("baseline", [])) if f.startswith("vllm:"))
    stack_fams = _families(by_label.get("stack", []))
    families = []
    for f in base_vllm:
        if f in stack_fams:
            families.append(FamilyAudit(name=f, status="survives", found_as=f, key=KEY_FAMILIES.get(f)))
        elif (alias := renamed_as(f, stack_fams, renames)) is not None:
            families.append(FamilyAudit(name=f, status="renamed", found_as=alias, key=KEY_FAMILIES.get(f)))
        else:
            families.append(FamilyAudit(name=f, status="lost", found_as=None, key=KEY_FAMILIES.get(f)))
    counts = dict(Counter(fa.status for fa in families))
    base_all = _families(by_label.get("baseline", []))
    engine_ns = (ENGINE_PREFIX, *renames)
    layer_families = {}
    for ep in (e for e in endpoints if e.label == "stack"):
        own = _families([s for s in by_label.get("stack", []) if s["endpoint"] == ep.name])
        layer_families[ep.name] = sorted(f for f in own - base_all if prefix_of(f, renames) not in engine_ns)
    notes = [note] if note else []
    if not base_vllm:
        notes.append("the baseline exposed no vllm:* family: nothing to compare against")
    lost_keys = [fa.key for fa in families if fa.key and fa.status == "lost"]
    if lost_keys:
        notes.append("lost behind the layer: " + ", ".join(lost_keys)
                     + " (no engine-level view of these while serving through it)")
    for lbl, facts in live.items():
        if facts.non_loopback:
            shown = ", ".join(facts.non_loopback[:4]) + (", ..." if len(facts.non_loopback) > 4 else "")
            notes.append(f"{lbl}: {len(facts.non_loopback)} ports listen beyond loopback although the deployment was "
                         f"asked for 127.0.0.1: {shown}")
    return AuditResult(stack=stack, endpoints=endpoints, families=families, counts=counts, live=live, notes=notes,
                       layer_families=layer_families)
