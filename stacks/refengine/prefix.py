"""The reference engine's prefix cache, in blocks of PREFIX_BLOCK_CHARS characters (BLOCK_TOKENS tokens at its 4
characters a token), the least recently used dropped first from a cache of `capacity` blocks (0: every one seen).

Two ways to count, `first` (the default) or `chain`:
- first: a prompt's first block alone stands for its prefix; a hit counts one block's tokens of one queried, so
  the hit rate is the share of requests whose first block was cached.
- chain: every full block of CHAIN_BLOCK_CHARS characters, each keyed by everything before it as vLLM chains its
  block hashes; a request hits its leading blocks up to the first one not cached, and queries all of its prompt's
  tokens, as vLLM's prefix_cache_hits and prefix_cache_queries count them (what a trace's reuse is checked
  against). The blocks are a quarter of the first's: a shared prefix ends inside a block it cannot hit, and with
  the tiny model's tokenizer (1.8 characters a token, measured on layerbench's filler) a 64-character block lost
  3 points of a trace's 73% reuse that way, a 16-character one under 1."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

PREFIX_BLOCK_CHARS = 64  # the "first KV block" of a prompt for the simulated prefix cache
BLOCK_TOKENS = 16
CHAIN_BLOCK_CHARS = 16  # 4 tokens at the engine's 4 characters a token


class PrefixCache:
    def __init__(self, capacity: int, count: str = "first"):
        self.capacity, self.count = capacity, count
        self.seen: OrderedDict[bytes | str, None] = OrderedDict()  # least recently used first
        self.hits = 0  # requests whose first block was cached

    def admit(self, prompt: str, prompt_tokens: int = 0) -> tuple[bool, int, int]:
        """(first block hit, cached tokens, queried tokens) for a prompt the engine admits; its blocks are the most
        recently used now."""
        if self.count == "chain":
            return self._chain(prompt, prompt_tokens)
        hit = self._use(prompt[:PREFIX_BLOCK_CHARS])
        self.hits += hit
        return hit, BLOCK_TOKENS * hit, BLOCK_TOKENS

    def _chain(self, prompt: str, prompt_tokens: int) -> tuple[bool, int, int]:
        h = hashlib.blake2b(digest_size=16)
        lead = 0
        for i in range(len(prompt) // CHAIN_BLOCK_CHARS):
            h.update(prompt[i * CHAIN_BLOCK_CHARS:(i + 1) * CHAIN_BLOCK_CHARS].encode())
            if self._use(h.digest()) and lead == i:
                lead += 1
        self.hits += lead > 0
        cached = lead * CHAIN_BLOCK_CHARS // 4
        return lead > 0, cached, max(prompt_tokens, cached)

    def _use(self, block: bytes | str) -> bool:
        """Whether `block` was in the cache; it is the most recently used one now."""
        hit = block in self.seen
        self.seen[block] = None
        self.seen.move_to_end(block)
        if self.capacity and len(self.seen) > self.capacity:
            self.seen.popitem(last=False)
        return hit
