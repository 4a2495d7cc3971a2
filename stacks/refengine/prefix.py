"""The reference engine's prefix cache: the first PREFIX_BLOCK_CHARS characters of a prompt stand for its first KV
block; a cache of `capacity` of them (0: every one seen) drops the least recently used first."""

from __future__ import annotations

from collections import OrderedDict

PREFIX_BLOCK_CHARS = 64  # the "first KV block" of a prompt for the simulated prefix cache
BLOCK_TOKENS = 16


class PrefixCache:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.seen: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self.hits = 0  # requests whose first block was cached

    def admit(self, prompt: str) -> tuple[bool, int, int]:
        """(first block hit, cached tokens, queried tokens) for a prompt the engine admits; its blocks are the most
        recently used now."""
        hit = self._use(prompt[:PREFIX_BLOCK_CHARS])
        self.hits += hit
        return hit, BLOCK_TOKENS * hit, BLOCK_TOKENS

    def _use(self, block: str) -> bool:
        """Whether `block` was in the cache; it is the most recently used one now."""
        hit = block in self.seen
        self.seen[block] = None
        self.seen.move_to_end(block)
        if self.capacity and len(self.seen) > self.capacity:
            self.seen.popitem(last=False)
        return hit
