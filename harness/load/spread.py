"""The bare side of a compare with replicas: N engines and no layer, the load client itself picking the engine of
each request (Endpoint.spread). Nothing is added to a request's path: the choice is a counter or one hash of the
prompt's first characters, made before the request's clock starts, and each engine has its own keep-alive
connection per slot.

- round_robin: each request to the next engine in turn (per load process: each counts its own turns);
- hash: the engine a hash of the prompt's first HASH_CHARS characters picks, so a shared-prefix group, or a
  chat's every turn (each starts with the conversation so far), always lands on one engine."""

from __future__ import annotations

import hashlib
from typing import Literal

from harness.load.client import RequestRecord, StreamClient
from harness.load.http1 import Connection

# about one KV block or more: vLLM's block is 16 tokens where the platform does not choose
# (CacheConfig.DEFAULT_BLOCK_SIZE, vllm/config/cache.py, vLLM 0.32.0), a prompt's first characters run at least
# one a token (harness.load.prompts.PREFIX_HEX), and the reference engine keys its cache by its first 64 characters
HASH_CHARS = 64


class Spread:
    """A slot's connections: one to each engine, opened on first use."""

    def __init__(self, parts: list[Connection]):
        self.parts = parts

    def close(self) -> None:
        for c in self.parts:
            c.close()


class SpreadClient:
    """N clients of one protocol, one per engine, measured as one: `measure` picks the engine and records which
    (RequestRecord.replica)."""

    def __init__(self, clients: list[StreamClient], by: Literal["round_robin", "hash"], start: int = 0):
        """start: where this load process's turns begin (its index among the side's load processes), so several
        processes' in-turn spreads interleave instead of sending their first requests to one engine together."""
        self.clients, self.by = clients, by
        self.protocol, self.max_tokens = clients[0].protocol, clients[0].max_tokens
        self.turn = start

    @property
    def keep_text(self) -> bool:
        return self.clients[0].keep_text

    @keep_text.setter
    def keep_text(self, value: bool) -> None:
        for c in self.clients:
            c.keep_text = value

    @property
    def keep_headers(self) -> tuple[str, ...]:
        return self.clients[0].keep_headers

    @keep_headers.setter
    def keep_headers(self, value: tuple[str, ...]) -> None:
        for c in self.clients:
            c.keep_headers = value

    def connection(self) -> Spread:
        return Spread([c.connection() for c in self.clients])

    def pick(self, prompt: str) -> int:
        n = len(self.clients)
        if self.by == "hash":
            return int.from_bytes(hashlib.blake2b(prompt[:HASH_CHARS].encode(), digest_size=8).digest(), "big") % n
        i, self.turn = self.turn % n, self.turn + 1
        return i

    async def measure(self, conn: Spread, prompt: str, rec: RequestRecord, max_tokens: int | None = None
                      ) -> RequestRecord:
        i = self.pick(prompt)
        rec.replica = i
        return await self.clients[i].measure(conn.parts[i], prompt, rec, max_tokens)


def client_for(clients: dict, endpoint: tuple[str, str, str], spread: tuple[list[str], str], start: int = 0,
               **kwargs):
    """The client of `endpoint` (base_url, model, protocol) from `clients` (protocol -> class), or a SpreadClient
    over spread's base URLs, each picked by spread's rule (start: the load process's index)."""
    base_url, model, protocol = endpoint
    urls, by = spread
    cls = clients[protocol]
    if len(urls) <= 1:
        return cls(base_url, model, **kwargs)
    return SpreadClient([cls(u, model, **kwargs) for u in urls], by, start)  # type: ignore[arg-type]
