"""vLLM metric naming in one place: a stack declares how it renames `vllm:*`, and both the audit and the
per-level server summaries read the engine's families under exactly those names."""

from __future__ import annotations

from harness.analysis.audit import audit_from_scrapes
from harness.analysis.server_metrics import summarise
from harness.analysis.vllm_metrics import aliases, prefix_of, renamed_as
from stacks.base import DeploySettings, get_stack


def scrape(label: str, samples: dict[str, float], t: float) -> dict:
    families = {k.split("{", 1)[0]: "gauge" for k in samples}
    return {"t": t, "endpoint": "api", "url": "http://127.0.0.1:1/metrics", "ok": True, "label": label,
            "families": families, "samples": samples, "level": 4, "phase": None}


def test_summaries_follow_the_declared_renaming_only():
    scrapes = [scrape("stack", {"ray_vllm_num_requests_running{engine=0}": 3.0,
                                "ray_vllm_num_preemptions_total{engine=0}": 1.0}, 0),
               scrape("stack", {"ray_vllm_num_requests_running{engine=0}": 5.0,
                                "ray_vllm_num_preemptions_total{engine=0}": 4.0}, 1)]
    declared = summarise(scrapes, ("ray_vllm_",))
    assert declared.running_max == 5.0 and declared.preemptions == 3.0
    undeclared = summarise(scrapes)
    assert undeclared.running_max is None and undeclared.preemptions is None  # no guessing


def test_a_counter_first_exported_inside_the_window_rose_from_zero():
    # Ray's exporter (OpenTelemetry) has no prefix_cache_hits series until the first hit: the window's start scrape
    # carries the queries alone, its end both (ray 2.60.0, vLLM 0.32.0, recorded in a trace compare here)
    q, h = "ray_vllm_prefix_cache_queries_total{engine=0}", "ray_vllm_prefix_cache_hits_total{engine=0}"
    scrapes = [scrape("stack", {q: 3982.0}, 0), scrape("stack", {q: 82960.0, h: 48384.0}, 1)]
    got = summarise(scrapes, ("ray_vllm_",))
    assert (got.prefix_cache_queries, got.prefix_cache_hits) == (78978.0, 48384.0)
    # an endpoint that carries no engine counter at all (a layer's own) says nothing of them
    other = {"t": 0, "endpoint": "layer", "url": "u", "ok": True, "label": "stack", "families": {},
             "samples": {"layer_requests_total{}": 3.0}, "level": 4, "phase": None}
    later = [scrape("stack", {q: 10.0, h: 4.0}, 1), scrape("stack", {q: 30.0, h: 9.0}, 2)]
    assert summarise([other, *later], ("ray_vllm_",)).prefix_cache_hits == 5.0


def test_audit_marks_renamed_by_the_declared_prefix():
    base = scrape("baseline", {"vllm:num_requests_running{}": 1.0, "vllm:kv_cache_usage_perc{}": 0.1}, 0)
    stack = scrape("stack", {"proxy_vllm_num_requests_running{}": 1.0}, 0)
    a = audit_from_scrapes([base, stack], {}, "sim-proxy", ("proxy_vllm_",))
    by = {f.name: f for f in a.families}
    assert by["vllm:num_requests_running"].status == "renamed"
    assert by["vllm:num_requests_running"].found_as == "proxy_vllm_num_requests_running"
    assert by["vllm:kv_cache_usage_perc"].status == "lost"
    assert a.endpoints[1].prefixes == {"proxy_vllm_": 1}
    assert audit_from_scrapes([base, stack], {}, "sim-proxy").counts == {"lost": 2}


def test_naming_helpers():
    assert aliases("vllm:x", ("ray_vllm_",)) == ("vllm:x", "ray_vllm_x")
    assert renamed_as("vllm:x", {"ray_vllm_x", "other"}, ("ray_vllm_",)) == "ray_vllm_x"
    assert prefix_of("vllm:x") == "vllm:" and prefix_of("ray_serve_num_http_requests") == "ray_serve_"
    assert prefix_of("proxy_vllm_x", ("proxy_vllm_",)) == "proxy_vllm_" and prefix_of("nv_inference_count") == "nv_"


def test_stacks_declare_their_renaming():
    settings = DeploySettings()
    assert get_stack("vllm")(settings).metric_aliases() == ()
    assert get_stack("ray")(settings).metric_aliases() == ("ray_vllm_",)
    proxy = get_stack("sim-proxy")
    assert proxy(settings.model_copy(update={"options": {"metrics": "rename"}})).metric_aliases() == ("proxy_vllm_",)
    assert proxy(settings.model_copy(update={"options": {"metrics": "rename", "rename_prefix": "x_"}})
                 ).metric_aliases() == ("x_",)
    assert proxy(settings).metric_aliases() == ()
