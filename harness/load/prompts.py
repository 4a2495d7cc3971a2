"""Unique-prefix prompts: every prompt starts with a digest of (run, stack, level, request), so no two
requests of a run, or of two runs, share a first KV block and prefix caching cannot flatter a stack."""

from __future__ import annotations

import hashlib
from pathlib import Path

# Filler is ordinary ASCII words; only the prefix has to differ between prompts.
_FILLER_WORDS = (
    "the quick brown fox jumps over a lazy dog while serving engineers measure tokens per second "
    "under load and count every request that misses its latency budget"
).split()
PREFIX_HEX = 16  # characters; at least one token per character, so 16 tokens always cover the whole digest


def unique_prefix(run_id: str, stack: str, level: int, index: int, phase: str = "measure") -> str:
    key = f"{run_id}|{stack}|{phase}|{level}|{index}".encode()
    return hashlib.blake2b(key, digest_size=PREFIX_HEX // 2).hexdigest()


class PromptGenerator:
    """Builds prompts of about `input_tokens` tokens. With the model's tokenizer.json the filler length is
    fitted by real token counts; without one, ~4 characters per token are assumed (usage reports the truth)."""

    def __init__(self, run_id: str, stack: str, input_tokens: int, tokenizer_path: Path | None = None):
        self.run_id, self.stack, self.input_tokens = run_id, stack, input_tokens
        self._tokenizer = None
        if tokenizer_path is not None and Path(tokenizer_path).exists():
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._filler = self._fit_filler()

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            return max(1, len(text) // 4)
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _fit_filler(self) -> str:
        """The fewest filler words that bring a prompt to input_tokens, by bisection: adding a word at a time and
        counting again took minutes at 32K tokens."""
        sample = unique_prefix("fit", "fit", 0, 0)

        def words(n: int) -> str:
            return " ".join(_FILLER_WORDS[i % len(_FILLER_WORDS)] for i in range(n))

        def fits(n: int) -> bool:
            return self.count_tokens(f"{sample} {words(n)}") >= self.input_tokens

        if fits(0):
            return ""
        lo, hi = 0, 1  # fits(lo) is False, fits(hi) is True once found
        while not fits(hi):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return words(hi)

    def prompt(self, level: int, index: int, phase: str = "measure") -> str:
        return f"{unique_prefix(self.run_id, self.stack, level, index, phase)} {self._filler}"
