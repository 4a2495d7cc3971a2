"""Dataset files a profile's prompts come from (`dataset: PATH`). Two layouts, told apart by their content:

- ShareGPT JSON: a list of `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...},
  ...]}`. As `vllm bench serve` samples it, each conversation gives one request: its first human turn is the
  prompt, and the token length of the answer after it is the request's output length.
- JSONL: one `{"prompt": "...", "output_tokens": N}` per line.

The file is read, never downloaded: a user points at one. Lengths are counted with the served model's tokenizer.
A request that would not fit max_model_len is skipped and counted; a file where every request would is refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LayerbenchError


@dataclass(frozen=True)
class Entry:
    prompt: str
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Dataset:
    path: str
    layout: str  # "sharegpt" | "jsonl"
    entries: list[Entry]
    skipped: int  # longer than max_model_len
    malformed: int  # conversations without a human turn and an answer, lines without a prompt


_CACHE: dict[tuple[str, float, int | None, int | None, str], Dataset] = {}


def load_dataset(path: str, count: Callable[[str], int], max_len: int | None = None,
                 out_max: int | None = None, counter: str = "") -> Dataset:
    """The file's requests (cached per file, bounds and `counter`, which names the tokenizer behind `count`; a
    prompt is counted as it follows the request's own block, after a space). out_max: the profile's own longest
    output, when it does not take the dataset's; None: each entry's own output length counts against
    max_model_len."""
    p = Path(path)
    try:
        key = (str(p.resolve()), p.stat().st_mtime, max_len, out_max, counter)
    except OSError as e:
        raise LayerbenchError(f"dataset {path}: not found or not readable ({e.strerror or e})") from None
    if key in _CACHE:
        return _CACHE[key]
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LayerbenchError(f"dataset {path}: cannot be read as UTF-8 text ({e})") from None
    if not text.strip():
        raise LayerbenchError(f"dataset {path}: the file is empty")
    layout, pairs, malformed = _parse(path, text)
    if not pairs:
        raise LayerbenchError(f"dataset {path}: no usable request in its {len(pairs) + malformed} records "
                              f"({_LAYOUTS})")
    entries, skipped = [], 0
    for prompt, out in pairs:
        e = Entry(prompt, count(" " + prompt), out if isinstance(out, int) else max(2, count(out)))
        if max_len is not None and e.prompt_tokens + 16 + (out_max or e.output_tokens) > max_len:
            skipped += 1
            continue
        entries.append(e)
    if not entries:
        raise LayerbenchError(f"dataset {path}: every one of its {skipped} requests is longer than max_model_len "
                              f"{max_len}: raise engine.max_model_len or use shorter conversations")
    _CACHE[key] = Dataset(path, layout, entries, skipped, malformed)
    return _CACHE[key]


_LAYOUTS = ("a ShareGPT JSON list of {conversations: [{from: human, value}, {from: gpt, value}]}, or JSONL lines of "
            "{prompt, output_tokens}")


def _parse(path: str, text: str) -> tuple[str, list[tuple[str, str | int]], int]:
    """(layout, [(prompt, answer text or output length)], malformed records)."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        pairs = [x for x in map(_conversation, doc) if x is not None]
        return "sharegpt", pairs, len(doc) - len(pairs)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    pairs, malformed = [], 0
    for n, line in enumerate(lines, 1):
        try:
            d = json.loads(line)
        except ValueError:
            raise LayerbenchError(f"dataset {path}: line {n} is not JSON; the layouts read are {_LAYOUTS}") from None
        prompt, out = (d.get("prompt"), d.get("output_tokens")) if isinstance(d, dict) else (None, None)
        if isinstance(prompt, str) and prompt.strip() and isinstance(out, int) and not isinstance(out, bool) \
                and out >= 2:
            pairs.append((prompt, out))
        else:
            malformed += 1
    if malformed == len(lines):
        raise LayerbenchError(f"dataset {path}: an unknown layout; the layouts read are {_LAYOUTS}")
    return "jsonl", pairs, malformed


def _conversation(c: object) -> tuple[str, str] | None:
    """A ShareGPT conversation's first human turn and the answer after it."""
    turns = c.get("conversations") if isinstance(c, dict) else None
    if not isinstance(turns, list):
        return None
    for a, b in zip(turns, turns[1:], strict=False):
        if isinstance(a, dict) and isinstance(b, dict) and a.get("from") == "human" and b.get("from") == "gpt":
            prompt, answer = a.get("value"), b.get("value")
            if isinstance(prompt, str) and prompt.strip() and isinstance(answer, str) and answer.strip():
                return prompt, answer
            return None
    return None
