"""Several engines of one side (engine.replicas), read from their own metric endpoints, named `<name>@<i>`
(stacks.base.replicas):

- as one engine: each scrape round's replicas merged into one scrape whose samples carry a `replica` label, so
  a family sums over the engines as it sums over one vLLM's own engines (`merged`);
- each on its own (`loads`): the requests it finished, its prompt and output tokens and its prefix-cache hits
  over the level, and how many requests it held on average, by Little's law from its own histograms: the
  increase of vllm:e2e_request_latency_seconds_sum over the window is request-seconds spent in the engine, over
  the window's length the mean number in it (running and waiting), and vllm:request_queue_time_seconds_sum's the
  mean number waiting. Counters read between the window's edge scrapes are exact without polling during it;
- `imbalance`: the busiest replica's share over the mean (1.0: even; N: one replica took everything)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.analysis.vllm_metrics import sum_family
from harness.schemas import LevelSummary, ReplicaLoad, Routing

SEP = "@"
IN_ENGINE = "vllm:e2e_request_latency_seconds_sum"
WAITING = "vllm:request_queue_time_seconds_sum"
COUNTED = {"requests": "vllm:request_success_total", "prompt_tokens": "vllm:prompt_tokens_total",
           "output_tokens": "vllm:generation_tokens_total", "prefix_cache_hits": "vllm:prefix_cache_hits_total",
           "prefix_cache_queries": "vllm:prefix_cache_queries_total"}


def split_name(endpoint: str) -> tuple[str, int] | None:
    name, sep, index = endpoint.rpartition(SEP)
    return (name, int(index)) if sep and index.isdigit() else None


def _labelled(key: str, replica: int) -> str:
    name, _, labels = key.partition("{")
    labels = labels.rstrip("}")
    return f"{name}{{{labels + ',' if labels else ''}replica={replica}}}"


def _merge(name: str, parts: dict[int, dict]) -> dict:
    recs = [parts[i] for i in sorted(parts)]
    first = recs[0]
    bad = next((r for r in recs if not r["ok"]), None)
    samples = {_labelled(k, i): v for i, r in sorted(parts.items()) if r["ok"] for k, v in r["samples"].items()}
    families: dict[str, str] = {}
    for r in recs:
        families.update(r.get("families") or {})
    durs = [r["dur_ms"] for r in recs if r.get("dur_ms") is not None]
    return {**first, "endpoint": name, "ok": bad is None, "reason": bad["reason"] if bad else None,
            "samples": samples, "families": families, "dur_ms": max(durs) if durs else None}


def merged(scrapes: Iterable[dict]) -> list[dict]:
    """`scrapes` with each round of `<name>@<i>` scrapes (one scrape of every replica) merged into one scrape of
    `<name>`, in the order each round began; any other endpoint's scrapes as they are. A round is the scrapes
    tagged with one `round` (harness.load.scraper); untagged ones (older files) are grouped as written, a round
    ending where a replica comes again."""
    out: list[dict | tuple[str, str]] = []
    rounds: dict[tuple[str, str], dict[int, dict]] = {}
    untagged: dict[str, int] = {}
    for s in scrapes:
        named = split_name(s.get("endpoint", ""))
        if named is None:
            out.append(s)
            continue
        name, i = named
        tag = s.get("round")
        if tag is None:  # written one round after the other: a replica seen again starts the next
            n = untagged.setdefault(name, 0)
            if i in rounds.get((name, f"untagged:{n}"), {}):
                n = untagged[name] = n + 1
            tag = f"untagged:{n}"
        key = (name, str(tag))
        if key not in rounds:
            rounds[key] = {}
            out.append(key)  # the merged scrape takes the place where its round began
        rounds[key][i] = s
    return [_merge(x[0], rounds[x]) if isinstance(x, tuple) else x for x in out]


def loads(scrapes: Iterable[dict], renames: tuple[str, ...] = (), window_s: float | None = None
          ) -> list[ReplicaLoad]:
    """Each replica's share of one level, from its edge scrapes (the first and the last good one); window_s: the
    measured window's length, which requests held are averaged over (default: the time between the edges)."""
    by_replica: dict[str, list[dict]] = {}
    for s in scrapes:
        if s.get("ok") and split_name(s.get("endpoint", "")) is not None:
            by_replica.setdefault(s["endpoint"], []).append(s)
    out = []
    for endpoint, recs in sorted(by_replica.items(), key=lambda kv: split_name(kv[0])[1]):  # type: ignore[index]
        edges = [r for r in recs if r.get("phase") in ("start", "end")] or recs
        if len(edges) < 2:
            continue
        a, b = edges[0], edges[-1]
        window = window_s or b["t"] - a["t"]
        load = ReplicaLoad(replica=endpoint)
        for key, fam in COUNTED.items():
            x, y = sum_family(a["samples"], fam, renames), sum_family(b["samples"], fam, renames)
            if x is not None and y is not None:
                setattr(load, key, y - x)
        for key, fam in (("in_engine", IN_ENGINE), ("waiting", WAITING)):
            x, y = sum_family(a["samples"], fam, renames), sum_family(b["samples"], fam, renames)
            if x is not None and y is not None and window > 0:
                setattr(load, key, (y - x) / window)
        out.append(load)
    return out


def imbalance(values: list[float | None]) -> float | None:
    """max / mean over the replicas (1.0: even); None without a figure for every replica, or with none at all."""
    if len(values) < 2 or any(v is None for v in values):
        return None
    mean = sum(values) / len(values)  # type: ignore[arg-type]
    return max(values) / mean if mean > 0 else None  # type: ignore[type-var, operator]


def routing(levels: list[LevelSummary]) -> Routing | None:
    """One side's placement at one level over its windows (`levels`); None where its engines counted nothing."""
    hits = [lv.server.prefix_cache_hits for lv in levels]
    queries = [lv.server.prefix_cache_queries for lv in levels]
    q = sum(x for x in queries if x is not None)
    rate = sum(x for x in hits if x is not None) / q if q > 0 and None not in hits else None
    per = [lv.server.replicas for lv in levels if lv.server.replicas]
    if rate is None and not per:
        return None
    n = max((len(p) for p in per), default=1)
    requests = [sum((p[i].requests or 0.0) for p in per if len(p) == n) for i in range(n)] if per else []
    held = [[p[i].in_engine for p in per if len(p) == n and p[i].in_engine is not None] for i in range(n)]
    in_engine = [sum(h) / len(h) if h else None for h in held] if per else []
    return Routing(replicas=n, hit_rate=rate, requests=requests, in_engine=in_engine,
                   imbalance=imbalance(requests) if n > 1 else None,  # type: ignore[arg-type]
                   load_imbalance=imbalance(in_engine) if n > 1 else None)
