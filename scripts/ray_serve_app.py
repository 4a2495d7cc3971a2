"""Ray Serve LLM deployment driver, run from the engine environment by stacks/ray.py (layerbench's harness
never imports ray). It starts a private local Ray (own temp dir and ports, 127.0.0.1), runs
`build_openai_app` with one LLMConfig, prints LAYERBENCH_SERVE_STARTED, then waits; SIGTERM shuts Serve and
Ray down so no Ray process outlives it.

Usage: python scripts/ray_serve_app.py CONFIG.json   (keys: see stacks/ray.py RayStack.deploy)
"""

from __future__ import annotations

import json
import signal
import sys
import threading


def accelerator_type() -> str | None:
    """The node's GPU type as Ray itself names it (from the GPU's name), so the engine replica's placement asks
    for what this node has; None where Ray's accelerator list does not know it."""
    from ray._private.accelerators import NvidiaGPUAcceleratorManager
    from ray.util.accelerators import accelerators

    found = NvidiaGPUAcceleratorManager.get_current_node_accelerator_type()
    known = {v for k, v in vars(accelerators).items() if k.isupper() and isinstance(v, str)}
    return found if found in known else None


def router_config(router: str | None) -> dict:
    """deployment_config's request_router_config for the LLMServer replicas (None: Serve's default router). The
    prefix-aware router's imbalanced_threshold defaults to infinity in its code (initialize_state in
    ray/llm/_internal/serve/routing_policies/prefix_aware/prefix_aware_router.py, Ray 2.60.0): load would never
    override a prefix match. 10 is set: above a gap of 10 queued requests between replicas it balances load first
    (the threshold as docs.ray.io/en/latest/serve/llm/prefix-aware-request-router.html describes it)."""
    if router is None:
        return {}
    return {"request_router_config": {"request_router_class": router,
                                      "request_router_kwargs": {"imbalanced_threshold": 10}}}


def main() -> int:
    cfg = json.loads(open(sys.argv[1]).read())
    import ray
    from ray import serve
    from ray.serve.llm import LLMConfig, build_openai_app

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    ray.init(
        num_cpus=cfg["num_cpus"],
        num_gpus=cfg["num_gpus"],
        _temp_dir=cfg["temp_dir"],
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        _metrics_export_port=cfg["metrics_port"],
        runtime_env={"env_vars": cfg["env"]},
        log_to_driver=False,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": cfg["port"]})
    llm = LLMConfig(
        model_loading_config={"model_id": cfg["model_id"], "model_source": cfg["model_source"]},
        accelerator_config={"kind": "gpu" if cfg["gpu"] else "cpu"},
        accelerator_type=accelerator_type() if cfg["gpu"] else None,
        deployment_config={"num_replicas": cfg.get("num_replicas", 1),
                           "max_ongoing_requests": cfg["max_ongoing_requests"],
                           **router_config(cfg.get("request_router"))},
        engine_kwargs=cfg["engine_kwargs"],
        experimental_configs={"stream_batching_interval_ms": cfg["stream_batching_interval_ms"]},
        log_engine_metrics=True,
        runtime_env={"env_vars": cfg["env"]},
    )
    # direct streaming serves from the LLMServer replica itself and refuses an ingress_deployment_config
    # (ray/llm/_internal/serve/core/ingress/builder.py: _validate_direct_streaming_ingress_config, Ray 2.60.0)
    ingress = {} if cfg.get("request_path") == "direct" else {
        "ingress_deployment_config": {"num_replicas": cfg["ingress_replicas"],
                                      "max_ongoing_requests": cfg["max_ongoing_requests"]}}
    app = build_openai_app({"llm_configs": [llm], **ingress})
    serve.run(app, name="layerbench", route_prefix="/", blocking=False)
    print("LAYERBENCH_SERVE_STARTED", flush=True)
    stop.wait()
    print("LAYERBENCH_SHUTDOWN", flush=True)
    try:
        serve.shutdown()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
