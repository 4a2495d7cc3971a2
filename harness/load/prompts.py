"""The requests a load process sends. By default every prompt starts with a digest of (run, level, request,
phase), so no two requests of a run, or of two runs, share a first KV block and prefix caching cannot flatter a
stack (a profile's `seed` takes the run's place: two runs with one seed send the same requests, each to a fresh
deployment); the rest is filler to the request's length. A profile may instead draw lengths from a distribution, take
prompts from a dataset file, or put requests in groups that share a prefix (harness.profile.workload).

Nothing here depends on which side sends: both sides of a compare send byte-identical requests in the same order
(their engines are separate, so sharing them shares no cache)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harness.load.datasets import Entry, load_dataset
from harness.profile.traces import Trace, TraceRequest, load_trace
from harness.profile.workload import Length, PrefixGroups, Sessions, TraceReplay, bounds, draw, unit

# Filler is ordinary ASCII words; only the prefix has to differ between prompts.
_FILLER_WORDS = (
    "the quick brown fox jumps over a lazy dog while serving engineers measure tokens per second "
    "under load and count every request that misses its latency budget"
).split()
TURN_STRIDE = 1_000  # a chat's turns are requests chat * TURN_STRIDE + turn (sessions have at most 100 turns)
PREFIX_HEX = 16  # characters; at least one token per character, so 16 tokens always cover the whole digest


def unique_prefix(run_id: str, stack: str, level: int, index: int, phase: str = "measure") -> str:
    key = f"{run_id}|{stack}|{phase}|{level}|{index}".encode()
    return hashlib.blake2b(key, digest_size=PREFIX_HEX // 2).hexdigest()


def _words(n: int) -> str:
    return " ".join(_FILLER_WORDS[i % len(_FILLER_WORDS)] for i in range(n))


@dataclass(frozen=True)
class Request:
    text: str
    max_tokens: int | None  # None: the client's own
    input_tokens: int  # the length asked for (the engine's usage says what it counted)


@dataclass(frozen=True)
class Workload:
    """What a profile's requests look like (LoadProfile's workload fields): the prompt lengths, the answer lengths
    (None: the client's max_tokens), prefix groups, a dataset's prompts (capped at max_len, the model's context),
    and multi-turn chats."""

    input_tokens: Length
    output_tokens: Length | None = None
    prefix: PrefixGroups | None = None
    dataset: str | None = None
    max_len: int | None = None
    sessions: Sessions | None = None
    trace: TraceReplay | None = None

    @classmethod
    def of(cls, profile) -> Workload:
        """A LoadProfile's workload."""
        return cls(profile.input_tokens, output_tokens=profile.output_tokens, prefix=profile.prefix,
                   dataset=profile.dataset, max_len=profile.engine.max_model_len, sessions=profile.sessions,
                   trace=profile.trace)


NO_TOKENIZER = "4 characters a token (no tokenizer.json found): input lengths are not in the served model's tokens"


class PromptGenerator:
    """Builds each request of a profile. With the model's tokenizer.json lengths are fitted by real token counts;
    without one, ~4 characters per token are assumed (usage reports the truth). `stack` keys the prompts of one
    load process (a pod's, a worker's); it never names the side. A length alone as the workload: prompts of that
    length, answers of the client's max_tokens."""

    def __init__(self, run_id: str, stack: str, workload: Workload | Length, tokenizer_path: Path | None = None):
        w = workload if isinstance(workload, Workload) else Workload(workload)
        input_tokens, prefix, dataset, max_len = w.input_tokens, w.prefix, w.dataset, w.max_len
        self.run_id, self.stack, self.input_tokens = run_id, stack, input_tokens
        self.output_tokens, self.groups, self.sessions = w.output_tokens, prefix, w.sessions
        self._tokenizer = None
        self.tokenizer_path: Path | None = None  # the tokenizer.json that counts, None: 4 characters a token
        if tokenizer_path is not None and Path(tokenizer_path).exists():
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
            self.tokenizer_path = Path(tokenizer_path)
        self._entries: list[Entry] = load_dataset(dataset, self.count_tokens, max_len, self.longest_output(),
                                                  str(tokenizer_path) if self._tokenizer else "chars").entries \
            if dataset else []
        self.trace: Trace | None = load_trace(w.trace, max_len) if w.trace else None
        self._blocks: dict[tuple[int, int], int] = {}  # (repeat, block id) -> its digest's tokens
        # the default (a fixed length, no groups, no dataset, no trace) keeps its exactly fitted filler
        fixed = isinstance(input_tokens, int) and prefix is None and self.trace is None
        self._fixed = self._fit_filler() if fixed else None
        shared = prefix.shared_tokens if prefix else 0
        longest = max(r.input_tokens for r in self.trace.requests) if self.trace else self._longest()
        self._cut = None if self._fixed is not None else self._cutter(max(longest, shared))

    @classmethod
    def for_profile(cls, run_id: str, key: str, profile, tokenizer_path: Path | None) -> PromptGenerator:
        """A load process's requests for `profile` (a LoadProfile): drawn from its `seed` where it sets one, so two
        runs send byte-identical requests, else from the run id, so no two runs share one."""
        draws = run_id if profile.seed is None else f"seed {profile.seed}"
        return cls(draws, key, Workload.of(profile), tokenizer_path)

    def counted_with(self, whose: str) -> str:
        """What the run summary says counted prompt lengths: the tokenizer.json and whose it is, or NO_TOKENIZER."""
        return f"{self.tokenizer_path} ({whose})" if self.tokenizer_path is not None else NO_TOKENIZER

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is None:
            return max(1, len(text) // 4)
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _fit_filler(self) -> str:
        """The fewest filler words that bring a prompt to input_tokens, by bisection: adding a word at a time and
        counting again took minutes at 32K tokens."""
        sample = unique_prefix("fit", "fit", 0, 0)

        def fits(n: int) -> bool:
            return self.count_tokens(f"{sample} {_words(n)}") >= self.input_tokens  # type: ignore[operator]

        if fits(0):
            return ""
        lo, hi = 0, 1  # fits(lo) is False, fits(hi) is True once found
        while not fits(hi):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return _words(hi)

    def longest_output(self) -> int | None:
        """The profile's own longest max_tokens; None where each dataset entry's answer sets it."""
        o = self.output_tokens
        return None if o is None or o == "dataset" else bounds(o)[1]  # type: ignore[index]

    def _longest(self) -> int:
        b = bounds(self.input_tokens)
        return b[1] if b else 0

    def _cutter(self, tokens: int):
        """filler(n): the first n tokens' worth of filler text, from one tokenization of the longest filler (a
        bisection per drawn length would take minutes for a wide distribution)."""
        text = _words(tokens + 8)
        if self._tokenizer is None:
            return lambda n: text[:max(0, 4 * n)].rstrip()
        ends = [end for _, end in self._tokenizer.encode(text, add_special_tokens=False).offsets]
        return lambda n: text[:ends[min(n, len(ends)) - 1]] if n > 0 else ""

    def _max_tokens(self, key: tuple, entry: Entry | None) -> int | None:
        o = self.output_tokens
        if o is None or isinstance(o, int):
            return o
        return entry.output_tokens if o == "dataset" and entry else draw(o, unit(*key, "out"), 2)

    def prompt(self, level: int, index: int, phase: str = "measure") -> str:
        return self.request(level, index, phase).text

    def request(self, level: float, index: int, phase: str = "measure") -> Request:
        """The request at (level, index, phase): its prompt, max_tokens and asked-for prompt length."""
        head = unique_prefix(self.run_id, self.stack, level, index, phase)  # type: ignore[arg-type]
        if self.trace is not None:
            return self._replayed(head, index, phase)
        key = (self.run_id, self.stack, phase, level, index)
        entry = self._entries[int(unit(*key, "entry") * len(self._entries))] if self._entries else None
        out = self._max_tokens(key, entry)
        if self._fixed is not None:
            return Request(f"{head} {self._fixed}", out, self.input_tokens)  # type: ignore[arg-type]
        shared = ""
        if self.groups is not None:
            g = int(unit(*key, "group") * self.groups.groups)
            lead = unique_prefix(self.run_id, "group", 0, g, "shared")
            shared = f"{lead} {self._cut(self.groups.shared_tokens - self.count_tokens(lead))} "  # type: ignore[misc]
        if entry is not None:
            text = f"{shared}{head} {entry.prompt}"
            return Request(text, out, entry.prompt_tokens + self.count_tokens(f"{shared}{head}"))
        floor = 17 + (self.groups.shared_tokens if self.groups else 0)
        n = draw(self.input_tokens, unit(*key, "in"), floor)
        rest = n - self.count_tokens(head) - (self.groups.shared_tokens if self.groups else 0)
        return Request(f"{shared}{head} {self._cut(rest)}", out, n)  # type: ignore[misc]

    def turn(self, level: float, chat: int, turn: int, history: str, history_tokens: int,
             phase: str = "measure") -> Request:
        """Turn `turn` of chat `chat`: the conversation so far (`history`, of `history_tokens`: every earlier prompt
        and answer, counted from the engine's usage rather than tokenized again on the send path), then a new user
        message, drawn as the request (level, chat, phase) of turn `turn` would be."""
        new = self.request(level, chat * TURN_STRIDE + turn, phase)
        if not history:
            return new
        return Request(f"{history}\n{new.text}", new.max_tokens, history_tokens + 1 + new.input_tokens)

    def _replayed(self, head: str, index: int, phase: str) -> Request:
        """A trace's request `index` (plus repeat x 1,000,000): measured, its prompt is its blocks' text, each
        block's the same wherever its id recurs in this repeat (the run's or seed's own, so nothing an earlier run
        or repeat sent is cached), then a unique part for any tokens its blocks do not cover; any other phase (the
        warmup) sends a unique prompt of its lengths, which primes no block."""
        assert self.trace is not None and self._cut is not None
        repeat, i = divmod(index, 1_000_000)
        r: TraceRequest = self.trace.requests[i % len(self.trace.requests)]
        b, n = self.trace.block_tokens, r.input_tokens
        blocks = r.blocks[:-(-n // b)] if phase == "measure" and b else ()
        text = "".join(self._block(repeat, h, min(b, n - j * b)) for j, h in enumerate(blocks))
        rest = n - sum(min(b, n - j * b) for j in range(len(blocks)))
        if rest > 0:  # a unique head, then filler to the length (a head longer than what is left overshoots it)
            text += f" {head} {self._cut(rest - self.count_tokens(' ' + head))}".rstrip()
        return Request(text, r.output_tokens, n)

    def _block(self, repeat: int, block: int, n: int) -> str:
        """The first n tokens of block `block`: a space and a digest of (seed, repeat, block), so that no two blocks
        begin alike, then the filler every block shares. Each piece starts with a space, where a tokenizer splits,
        so a prompt's tokens are its blocks' tokens one after another and a block's tokens are counted once."""
        key = (repeat, block)
        lead = f" {unique_prefix(self.run_id, 'block', repeat, block, 'trace')}"
        if key not in self._blocks:
            self._blocks[key] = self.count_tokens(lead)
        own = self._blocks[key]
        if n > own:
            return f"{lead} {self._cut(n - own)}"  # type: ignore[misc]
        if self._tokenizer is None:
            return lead[:4 * n]
        return lead[:self._tokenizer.encode(lead, add_special_tokens=False).offsets[n - 1][1]]
