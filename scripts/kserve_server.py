"""KServe's own Python data plane around vLLM, run by stacks/kserve.py from the KServe environment
(scripts/setup_kserve.sh; layerbench's harness never imports kserve). `kserve.ModelServer` serves one model
through its OpenAI protocol layer (`/openai/v1/completions`, `/openai/v1/models`, `/metrics`):

- inprocess: an `OpenAIGenerativeModel` of ours runs vLLM's AsyncLLM inside KServe's server process, as
  KServe's Hugging Face runtime does with its vLLM backend. vLLM's stat loggers register the `vllm:*`
  families in the process's Prometheus registry, which KServe's `/metrics` serves;
- proxy: KServe's `OpenAIProxyModel` forwards each request to a bare vLLM server, so only KServe's code is
  added to the request path; the `vllm:*` families stay on the engine's own port.

Two things differ from a KServe pod, both for this host's safety: the REST server binds 127.0.0.1 (KServe
0.21 hard-codes 0.0.0.0 in its RESTServer; we set the host on its uvicorn config), and KServe's gRPC server
is off (it binds [::] with no setting to change it, and the load uses REST).

Usage: python scripts/kserve_server.py CONFIG.json   (keys: see stacks/kserve.py KServeStack.server_config)
"""

from __future__ import annotations

import json
import sys
import time
import types
import uuid
from pathlib import Path


def alias_moved_vllm_modules() -> None:
    """kserve 0.21's OpenAI types import vLLM 0.24's module layout; vLLM 0.32 moved two of those modules.
    Point the old names at the new homes of the very same classes, before kserve imports them. Nothing to do
    with a vLLM of the old layout (KServe's own Hugging Face image, where the proxy mode runs on k8s)."""
    try:
        import vllm.entrypoints.chat_utils  # noqa: F401  (the layout kserve 0.21 imports)
        return
    except ImportError:
        pass
    import vllm.renderers.chat_utils as chat_utils
    from vllm.entrypoints.generate.base import protocol as generate_protocol
    from vllm.entrypoints.serve.engine import protocol as serve_protocol

    engine = types.ModuleType("vllm.entrypoints.openai.engine")
    engine.__path__ = []  # a package, so that its `protocol` submodule resolves
    protocol = types.ModuleType("vllm.entrypoints.openai.engine.protocol")
    protocol.DeltaMessage = generate_protocol.DeltaMessage
    for name in ("UsageInfo", "ModelCard", "ModelList"):
        setattr(protocol, name, getattr(serve_protocol, name))
    sys.modules.setdefault("vllm.entrypoints.chat_utils", chat_utils)
    sys.modules.setdefault(engine.__name__, engine)
    sys.modules.setdefault(protocol.__name__, protocol)


def bind_loopback(host: str) -> None:
    """ModelServer builds its RESTServer with host="0.0.0.0"; ours sets the uvicorn config's host after."""
    import kserve.model_server as model_server

    class LoopbackRESTServer(model_server.RESTServer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.config.host = host

    model_server.RESTServer = LoopbackRESTServer


def sse(obj) -> str:
    return f"data: {obj.model_dump_json(exclude_none=True)}\n\n"


def _max_tokens(llm, request) -> int:
    """The request's max_tokens; without one, as vLLM's server: whatever the context has left."""
    if request.max_tokens is not None:
        return request.max_tokens
    n_prompt = len(request.prompt) if isinstance(request.prompt, list) else \
        len(llm.get_tokenizer().encode(request.prompt))
    return llm.vllm_config.model_config.max_model_len - n_prompt


def _whole(final, request_id: str, created: int, name: str):
    """A non-streamed completion from vLLM's final output."""
    from kserve.protocol.rest.openai.types import Completion, CompletionChoice, UsageInfo

    out = final.outputs[0]
    n_in, n_out = len(final.prompt_token_ids or ()), len(out.token_ids)
    return Completion(id=request_id, created=created, model=name, choices=[CompletionChoice(
        index=0, text=out.text, finish_reason=out.finish_reason)],
        usage=UsageInfo(prompt_tokens=n_in, completion_tokens=n_out, total_tokens=n_in + n_out))


def inprocess_model(cfg: dict):
    from kserve.protocol.rest.openai import OpenAIGenerativeModel
    from kserve.protocol.rest.openai.errors import create_error_response
    from kserve.protocol.rest.openai.types import CompletionChunk, CompletionChunkChoice, UsageInfo
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    class VllmInProcess(OpenAIGenerativeModel):
        """vLLM's async engine in KServe's process: completions, streamed or not (chat is not served)."""

        def __init__(self, name: str, engine_spec: dict, applied_path: Path):
            super().__init__(name)
            self.engine = True  # ModelServer runs start_engine() in its event loop, beside the REST server
            self.spec, self.applied_path = engine_spec, applied_path
            self.llm: AsyncLLM | None = None

        def start(self) -> None:
            self.ready = False  # not ready until the engine is: /openai/v1/models/<name> answers 503 till then

        async def start_engine(self) -> None:
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.spec))
            c = self.llm.vllm_config
            import vllm

            self.applied_path.write_text(json.dumps({
                "vllm_version": vllm.__version__, "max_model_len": c.model_config.max_model_len,
                "max_num_seqs": c.scheduler_config.max_num_seqs, "dtype": str(c.model_config.dtype)}))
            self.ready = True

        def stop_engine(self) -> None:
            self.ready = False
            if self.llm is not None:
                self.llm.shutdown()

        async def create_completion(self, request, raw_request=None, context=None):
            if not isinstance(request.prompt, str) and not (
                    isinstance(request.prompt, list) and all(isinstance(t, int) for t in request.prompt)):
                return create_error_response("one prompt per request (text or token ids)", status_code=400)
            assert self.llm is not None
            prompt = request.prompt if isinstance(request.prompt, str) else {"prompt_token_ids": request.prompt}
            try:
                params = request.to_sampling_params(_max_tokens(self.llm, request))
            except ValueError as e:
                return create_error_response(str(e), status_code=400)
            params.output_kind = RequestOutputKind.DELTA if request.stream else RequestOutputKind.FINAL_ONLY
            request_id = f"cmpl-{uuid.uuid4().hex}"
            created = int(time.time())
            outputs = self.llm.generate(prompt, params, request_id)
            if not request.stream:
                final = None
                async for res in outputs:  # FINAL_ONLY: one output, the whole completion
                    final = res
                assert final is not None
                return _whole(final, request_id, created, self.name)
            usage = bool(request.stream_options and request.stream_options.include_usage)
            return self.stream(outputs, request_id, created, usage)

        async def stream(self, outputs, request_id: str, created: int, usage: bool):
            n_in = n_out = 0
            async for res in outputs:  # closing this generator (client gone) aborts the request in vLLM
                out = res.outputs[0]
                n_in, n_out = len(res.prompt_token_ids or ()), n_out + len(out.token_ids)
                yield sse(CompletionChunk(id=request_id, created=created, model=self.name, choices=[
                    CompletionChunkChoice(index=0, text=out.text, finish_reason=out.finish_reason)]))
            if usage:
                yield sse(CompletionChunk(id=request_id, created=created, model=self.name, choices=[],
                                          usage=UsageInfo(prompt_tokens=n_in, completion_tokens=n_out,
                                                          total_tokens=n_in + n_out)))
            yield "data: [DONE]\n\n"

        async def create_chat_completion(self, request, raw_request=None, context=None):
            return create_error_response("this model serves /openai/v1/completions only", status_code=400)

    return VllmInProcess(cfg["name"], cfg["engine"], Path(cfg["applied"]))


def proxy_model(cfg: dict):
    import httpx
    from kserve.protocol.rest.openai import OpenAIProxyModel

    class StreamingProxy(OpenAIProxyModel):
        """KServe 0.21's proxy returns a stream as an iterator of chunk objects, which its endpoint does not
        recognise as a stream (it checks for an async generator); serialize the chunks as the engine's own
        events, one by one, as KServe's chat adapter does."""

        async def create_completion(self, request, raw_request=None, context=None):
            result = await super().create_completion(request, raw_request, context)
            if not request.stream or not hasattr(result, "__anext__"):
                return result
            return self.events(result)

        @staticmethod
        async def events(chunks):
            async for chunk in chunks:
                yield sse(chunk)
            yield "data: [DONE]\n\n"

    # KServe's default client allows 100 connections and a 30 s read timeout: enough for the sweep's 64
    # streams, and the same for every level
    client = httpx.AsyncClient(timeout=httpx.Timeout(timeout=5.0, read=cfg.get("read_timeout_s", 30.0)))
    return StreamingProxy(cfg["name"], cfg["predictor_url"], http_client=client)


def main() -> int:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    alias_moved_vllm_modules()
    bind_loopback(cfg.get("host", "127.0.0.1"))
    import kserve

    model = inprocess_model(cfg) if cfg["mode"] == "inprocess" else proxy_model(cfg)
    # KServe's defaults otherwise, its per-request access and timing log lines included (they are part of what
    # its data plane costs)
    server = kserve.ModelServer(http_port=cfg["port"], enable_grpc=False, workers=1)
    print(f"LAYERBENCH_KSERVE {cfg['mode']} on {cfg.get('host', '127.0.0.1')}:{cfg['port']}", flush=True)
    server.start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
