"""vLLM's render endpoints on the reference engine: POST /v1/completions/render and /v1/chat/completions/render
turn a request into the token ids the engine would run, without running it. A prefix-aware router asks each worker
for them before it places a request (vllm-router 0.1.17's cache_aware routes on token ids, not text).

The reference engine counts a token per 4 characters (server.py); its ids here are one per 4-character chunk, a
hash of the chunk, so two prompts that share a text prefix share a token prefix, as a tokenizer's would. The shapes
are vLLM 0.32's (vllm/entrypoints/scale_out/render/api_router.py): a list of GenerateRequest for completions, one
for chat, each `{"request_id", "token_ids"}` (token_in_token_out/protocol.py). vLLM serves them only when started
with --enable-scale-out (403 otherwise: scale_out/factories.py); the reference engine always does."""

from __future__ import annotations

import hashlib
import itertools

from stacks.refengine.http import Request

VOCAB = 50_000
_ids = itertools.count()


def token_ids(text: str) -> list[int]:
    return [int.from_bytes(hashlib.blake2b(text[i:i + 4].encode(), digest_size=4).digest(), "big") % VOCAB
            for i in range(0, max(4, len(text) // 4 * 4), 4)]


def render(req: Request, model: str) -> tuple[int, object]:
    """(HTTP status, JSON body) for a render request."""
    chat = req.path.startswith("/v1/chat/")
    try:
        body = req.json()
    except ValueError:
        return 400, {"error": {"message": "body is not JSON", "code": 400}}
    if not isinstance(body, dict) or body.get("model") != model:
        return 404, {"error": {"message": f"model {body.get('model') if isinstance(body, dict) else None!r} does "
                               "not exist", "code": 404}}
    text = (" ".join(str(m.get("content", "")) for m in body.get("messages", [])) if chat
            else str(body.get("prompt", "")))
    one = {"request_id": f"render-{next(_ids)}", "token_ids": token_ids(text)}
    return 200, (one if chat else [one])
