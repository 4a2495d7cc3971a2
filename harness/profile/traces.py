"""Production traces a user already has, replayed on both sides of a compare (profile `trace:`). Each format is read
into one list of requests, each with its arrival (ms after the trace's first), its prompt and answer lengths, and,
where the trace has them, the ids of the prompt's blocks (`hash_ids`: requests that share an id share that block's
tokens) and its chat. Nothing is downloaded; where each trace is published is in docs/reference.md.

The replay rules, the same on both sides: a window of the trace's own time (`start_s`, `duration_s`), at most
`max_requests` of it, its arrivals divided by `time_scale` (2: twice as fast); a request whose prompt does not fit
max_model_len is skipped and counted, and an answer that would overrun it is cut to fit. A trace whose arrivals sit
on a coarse grid (many requests at one instant, the instants far apart) is flagged: `jitter: spread` spreads each
instant's requests evenly over the tick that follows it."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from statistics import median

from harness.errors import LayerbenchError
from harness.profile.workload import TraceReplay

ROOT = Path(__file__).resolve().parents[2]
GRID_MIN_MS = 100.0  # a tick at least this long, with GRID_MIN_PER_TICK requests on it on average, is a grid
GRID_MIN_PER_TICK = 2.0


@dataclass(frozen=True)
class TraceRequest:
    t_ms: float  # arrival, ms after the trace's first request (the trace's own time, before any window or scale)
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()  # ids of the prompt's blocks of Trace.block_tokens tokens; (): none in the trace
    chat: str | None = None  # the conversation it belongs to, where the trace says


@dataclass(frozen=True)
class Trace:
    """A trace as it will be replayed: its requests (arrivals in ms after the first, scaled), and what was left
    out and why."""

    path: str
    format: str
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    rows: int  # requests read from the file
    failed: int = 0  # rows the trace marks as failed requests (BurstGPT: no answer), skipped
    too_long: int = 0  # prompts beyond max_model_len, skipped
    cut: int = 0  # answers cut to fit max_model_len
    outside: int = 0  # requests outside the window or past max_requests
    grid_ms: float | None = None  # the tick the trace's arrivals sit on, when they sit on one
    spread: bool = False  # each tick's requests spread evenly over it (jitter: spread)
    time_scale: float = 1.0
    even: bool = False  # arrivals: even
    notes: list[str] = field(default_factory=list)

    def offsets_ns(self) -> list[int]:
        return [round(r.t_ms * 1e6) for r in self.requests]

    def segments(self, n: int) -> list[tuple[float, list[int]]]:
        """The replay cut into n stretches of equal time: each one's rate (its requests over its length, with the
        one mean gap mean_rate adds) and its requests (positions in arrival order)."""
        span_ms = self.span_s * 1e3
        parts: list[list[int]] = [[] for _ in range(n)]
        for i, r in enumerate(self.requests):
            parts[min(n - 1, int(r.t_ms * n / span_ms)) if span_ms > 0 else 0].append(i)
        stretch_s = self.span_s / n
        scale = (len(self.requests) - 1) / len(self.requests) if len(self.requests) > 1 else 1.0
        return [(len(p) * scale / stretch_s if stretch_s > 0 else float(len(p)), p) for p in parts]

    def share(self, index: int, count: int, by_chat: bool) -> list[int]:
        """The requests load process `index` of `count` sends: every count-th, or with by_chat every count-th chat
        (in order of first arrival), so that a chat's turns go out from one process."""
        if not by_chat:
            return list(range(index, len(self.requests), count))
        order: dict[object, int] = {}
        keys = [r.chat if r.chat is not None else ("request", i) for i, r in enumerate(self.requests)]
        return [i for i, k in enumerate(keys) if order.setdefault(k, len(order)) % count == index]

    def previous_turns(self, positions: Sequence[int]) -> tuple[int, ...]:
        """For each of `positions` (requests in arrival order), where among them its chat's previous request is,
        or -1 for a chat's first request in the window (or one outside any chat)."""
        last: dict[str, int] = {}
        out = []
        for j, i in enumerate(positions):
            chat = self.requests[i].chat
            out.append(last.get(chat, -1) if chat is not None else -1)
            if chat is not None:
                last[chat] = j
        return tuple(out)

    @property
    def span_s(self) -> float:
        return self.requests[-1].t_ms / 1e3 if self.requests else 0.0

    def mean_rate(self) -> float:
        """Requests per second over the replay (n / span, with one mean gap added so that a replay of n
        requests at a constant rate r reads r)."""
        n = len(self.requests)
        return n / (self.span_s * n / (n - 1)) if n > 1 and self.span_s > 0 else float(n)

    def peak_rate(self) -> int:
        """The most requests whose arrivals lie within one second of each other."""
        t, most, j = [r.t_ms for r in self.requests], 0, 0
        for i in range(len(t)):
            while t[i] - t[j] >= 1000:
                j += 1
            most = max(most, i - j + 1)
        return most

    def busiest(self) -> list[int]:
        """The arrivals (ns, from the first) of the busiest second: what a pacer probe replays."""
        t, best, j, at = [r.t_ms for r in self.requests], (0, 0), 0, 0
        for i in range(len(t)):
            while t[i] - t[j] >= 1000:
                j += 1
            if i - j + 1 > best[1] - best[0]:
                best, at = (j, i + 1), j
        return [round((x - t[at]) * 1e6) for x in t[best[0]:best[1]]]

    def reuse(self, within: Sequence[int] | None = None) -> float | None:
        """The share of the replay's prompt tokens (of its requests `within`, default all) that lie in leading
        blocks an earlier request of the replay sent: what a prefix cache that kept every block would hit, counted
        as an engine counts its hits (a request's blocks up to its first one not seen before); None for a trace
        without block ids."""
        seen: set[int] = set()
        counted = set(range(len(self.requests)) if within is None else within)
        total = hits = 0
        b = self.block_tokens
        for i, r in enumerate(self.requests):
            mine = i in counted
            total += r.input_tokens if mine else 0
            lead = True
            for j, h in enumerate(r.blocks[:-(-r.input_tokens // b) if b else 0]):
                lead = lead and h in seen
                hits += min(b, r.input_tokens - j * b) if lead and mine else 0
                seen.add(h)
        return hits / total if total and any(r.blocks for r in self.requests) else None

    def describe(self) -> str:
        """One line for the report: what was replayed and how."""
        left = [f"{n} {what}" for n, what in ((self.failed, "failed in the trace"),
                                              (self.too_long, "beyond max_model_len"),
                                              (self.outside, "outside the window")) if n]
        text = (f"{Path(self.path).name} ({self.format}): {len(self.requests)} of its {self.rows} requests over "
                f"{self.span_s:.1f} s, {self.mean_rate():.2f} req/s on average and {self.peak_rate()} at its busiest "
                "second")
        if self.time_scale != 1:
            text += f" at {self.time_scale:g}x the trace's speed"
        if self.even:
            text += ", evenly spaced (arrivals: even)"
        if left:
            text += f" ({', '.join(left)} skipped)"
        if self.cut:
            text += f"; {self.cut} answers cut to fit max_model_len"
        if (reuse := self.reuse()) is not None:
            text += f"; {reuse:.0%} of its prompt tokens in {self.block_tokens}-token blocks sent before in the replay"
        if self.grid_ms is not None:
            text += (f"; its arrivals sit on a {self.grid_ms / 1e3:g} s grid, "
                     + ("each tick's requests spread evenly over it (jitter: spread)" if self.spread
                        else "sent as the trace has them, in bursts (jitter: spread evens them out)"))
        return text


# --- the formats --------------------------------------------------------------------------------------------------

Row = tuple[float, int, int, tuple[int, ...], str | None]  # t_ms (absolute, the trace's clock), in, out, blocks, chat


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{v!r} is not a number")
    f = float(v)
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise ValueError(f"{v!r} is not a whole number of tokens")
    return int(f)


def _time(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{v!r} is not a time")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{v!r} is not a time")
    return f


def _ids(v: object) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError("hash_ids is not a list of integers")
    return tuple(v)


def _jsonl(text: str) -> Iterator[tuple[int, dict]]:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                d = json.loads(line)
            except ValueError:
                raise ValueError(f"line {n} is not JSON") from None
            if not isinstance(d, dict):
                raise ValueError(f"line {n} is not a JSON object")
            yield n, d


def _mooncake(text: str) -> Iterator[tuple[int, Row | None]]:
    # kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl and its README: one JSON object a line, `timestamp` in ms
    # after the trace's start, `input_length`, `output_length`, and `hash_ids` of the prompt's 512-token blocks
    for n, d in _jsonl(text):
        try:
            yield n, (_time(d["timestamp"]), _int(d["input_length"]), _int(d["output_length"]),
                   _ids(d.get("hash_ids", [])), None)
        except (KeyError, ValueError) as e:
            raise ValueError(f"line {n}: {_why(e)}") from None


def _bailian(text: str) -> Iterator[tuple[int, Row | None]]:
    # alibaba-edu/qwen-bailian-usagetraces-anon: one JSON object a line, `chat_id`, `parent_chat_id` (-1 for a
    # chat's first request), `timestamp` in seconds after the trace's start, `input_length`, `output_length`,
    # `type`, `turn`, and `hash_ids` of 16-token blocks
    roots: dict[object, str] = {}  # a request's chat: its first turn's chat_id, followed up the parents
    for n, d in _jsonl(text):
        try:
            parent = d.get("parent_chat_id", -1)
            chat = roots[d["chat_id"]] = str(d["chat_id"]) if parent in (-1, None) else roots.get(parent, str(parent))
            yield n, (_time(d["timestamp"]) * 1e3, _int(d["input_length"]), _int(d["output_length"]),
                   _ids(d.get("hash_ids", [])), chat)
        except (KeyError, ValueError) as e:
            raise ValueError(f"line {n}: {_why(e)}") from None


def _csv(text: str, need: tuple[str, ...], source: str) -> Iterator[tuple[int, dict]]:
    rows = csv.DictReader(text.splitlines())
    missing = [c for c in need if c not in (rows.fieldnames or [])]
    if missing:
        raise ValueError(f"line 1: the header lacks {', '.join(missing)} ({source}: {', '.join(need)})")
    yield from enumerate(rows, 2)


def _burstgpt(text: str) -> Iterator[tuple[int, Row | None]]:
    # HPMLL/BurstGPT, data/BurstGPT_*.csv and its README: `Timestamp` in seconds after the trace's start, `Model`,
    # `Request tokens`, `Response tokens`, `Total tokens`, `Log Type`; a failed request has 0 response tokens
    for n, row in _csv(text, ("Timestamp", "Request tokens", "Response tokens"), "BurstGPT's columns"):
        try:
            t, ins, outs = _time(row["Timestamp"]) * 1e3, _int(row["Request tokens"]), _int(row["Response tokens"])
        except ValueError as e:
            raise ValueError(f"line {n}: {_why(e)}") from None
        yield n, None if outs == 0 else (t, ins, outs, (), None)


def _azure(text: str) -> Iterator[tuple[int, Row | None]]:
    # Azure/AzurePublicDataset, AzureLLMInferenceTrace_{code,conv}.csv (2023) and AzureLLMInferenceTrace_*_1week.csv
    # (2024): `TIMESTAMP` a date and time with up to 7 fractional digits, `ContextTokens`, `GeneratedTokens`
    for n, row in _csv(text, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "Azure's columns"):
        try:
            yield n, (_stamp(row["TIMESTAMP"]) * 1e3, _int(row["ContextTokens"]), _int(row["GeneratedTokens"]),
                      (), None)
        except ValueError as e:
            raise ValueError(f"line {n}: {_why(e)}") from None


_STAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?")


def _stamp(v: str) -> float:
    """Seconds since the epoch of `2023-11-16 18:15:46.6805900` (2023's files: 7 fractional digits, no zone) or
    `2024-05-10 00:00:00.009930+00:00` (2024's); Python 3.10's fromisoformat reads neither whole."""
    m = _STAMP.fullmatch(v.strip())
    if m is None:
        raise ValueError(f"{v!r} is not a date and time")
    zone = m[3] or ""
    base = datetime.fromisoformat(m[1] + ("+00:00" if zone == "Z" else zone))
    return base.timestamp() + (float(m[2]) if m[2] else 0.0)


def _ours(text: str) -> Iterator[tuple[int, Row | None]]:
    # layerbench's own: {"t_ms": ..., "input_tokens": ..., "output_tokens": ..., "prefix_blocks": [...]?,
    # "session": ...?}, one a line
    for n, d in _jsonl(text):
        try:
            chat = d.get("session")
            yield n, (_time(d["t_ms"]), _int(d["input_tokens"]), _int(d["output_tokens"]),
                   _ids(d.get("prefix_blocks", [])), None if chat is None else str(chat))
        except (KeyError, ValueError) as e:
            raise ValueError(f"line {n}: {_why(e)}") from None


def _why(e: Exception) -> str:
    return f"no field {e.args[0]!r}" if isinstance(e, KeyError) else str(e)


READERS: dict[str, tuple[Callable[[str], Iterator[tuple[int, Row | None]]], int]] = {
    "mooncake": (_mooncake, 512), "bailian": (_bailian, 16), "burstgpt": (_burstgpt, 0), "azure": (_azure, 0),
    "jsonl": (_ours, 16)}


# --- reading and selecting ----------------------------------------------------------------------------------------

_CACHE: dict[tuple, Trace] = {}


def load_trace(spec: TraceReplay, max_model_len: int | None = None) -> Trace:
    """The requests `spec` replays, read and selected before anything is deployed (cached per file and rules);
    any problem is one LayerbenchError naming the file (and the line)."""
    p = Path(spec.path)
    if not p.is_absolute() and not p.exists() and (ROOT / p).exists():  # a built-in profile's trace (traces/)
        p = ROOT / p
    try:
        key = (str(p.resolve()), p.stat().st_mtime_ns, spec.model_dump_json(), max_model_len)
    except OSError as e:
        raise LayerbenchError(f"trace {spec.path}: not found or not readable ({e.strerror or e})") from None
    if key not in _CACHE:
        _CACHE[key] = _select(spec, _read(spec.model_copy(update={"path": str(p)}), p), max_model_len)
    return _CACHE[key]


def _read(spec: TraceReplay, p: Path) -> Trace:
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise LayerbenchError(f"trace {spec.path}: cannot be read as UTF-8 text ({e})") from None
    if not text.strip():
        raise LayerbenchError(f"trace {spec.path}: the file is empty")
    reader, block = READERS[spec.format]
    rows: list[Row] = []
    failed = 0
    try:
        for n, row in reader(text):
            if row is None:
                failed += 1
            elif row[1] < 1:
                raise ValueError(f"line {n}: a prompt of 0 tokens")
            elif rows and row[0] < rows[-1][0]:
                raise ValueError(f"line {n}: its time goes back {rows[-1][0] - row[0]:g} ms from the request before "
                                 "it (a trace is replayed in its file's order: sort it by time)")
            else:
                rows.append(row)
    except ValueError as e:
        raise LayerbenchError(f"trace {spec.path} ({spec.format}): {e}") from None
    if not rows:
        raise LayerbenchError(f"trace {spec.path} ({spec.format}): no request in it"
                              + (f" ({failed} failed ones skipped)" if failed else ""))
    t0 = rows[0][0]
    reqs = tuple(TraceRequest(t - t0, i, o, b, c) for t, i, o, b, c in rows)
    return Trace(spec.path, spec.format, spec.block_tokens or block, reqs, rows=len(rows) + failed, failed=failed)


def grid(reqs: tuple[TraceRequest, ...] | list[TraceRequest]) -> float | None:
    """The tick arrivals sit on, when they do: at least GRID_MIN_PER_TICK requests per distinct instant on
    average, the instants GRID_MIN_MS or more apart (the median gap)."""
    stamps = sorted({r.t_ms for r in reqs})
    if len(stamps) < 2 or len(reqs) / len(stamps) < GRID_MIN_PER_TICK:
        return None
    tick = median(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    return tick if tick >= GRID_MIN_MS else None


def _spread(reqs: list[TraceRequest], tick: float) -> list[TraceRequest]:
    """Each instant's m requests at instant + k * tick / m, k = 0..m-1, in the trace's order."""
    out: list[TraceRequest] = []
    i = 0
    while i < len(reqs):
        j = i
        while j < len(reqs) and reqs[j].t_ms == reqs[i].t_ms:
            j += 1
        out.extend(replace(r, t_ms=r.t_ms + k * tick / (j - i)) for k, r in enumerate(reqs[i:j]))
        i = j
    return out


def _select(spec: TraceReplay, trace: Trace, max_model_len: int | None) -> Trace:
    start, end = spec.start_s * 1e3, (spec.start_s + spec.duration_s) * 1e3 if spec.duration_s else math.inf
    window = [r for r in trace.requests if start <= r.t_ms < end]
    if spec.max_requests is not None:
        window = window[:spec.max_requests]
    outside = len(trace.requests) - len(window)
    tick = grid(window)
    if tick is not None and spec.jitter == "spread":
        window = _spread(window, tick)
    kept: list[TraceRequest] = []
    too_long = cut = 0
    for r in window:
        if max_model_len is not None and r.input_tokens + 1 > max_model_len:
            too_long += 1
            continue
        out = max(1, r.output_tokens)
        if max_model_len is not None and r.input_tokens + out > max_model_len:
            out, cut = max_model_len - r.input_tokens, cut + 1
        kept.append(replace(r, output_tokens=out))
    if not kept:
        why = (f"every one of its {too_long} requests in the window has a prompt beyond max_model_len "
               f"{max_model_len}" if too_long else "no request lies in the window "
               f"(start_s {spec.start_s:g}, duration_s {spec.duration_s or 'all'})")
        raise LayerbenchError(f"trace {spec.path}: {why}")
    t0 = kept[0].t_ms
    kept = [replace(r, t_ms=(r.t_ms - t0) / spec.time_scale) for r in kept]
    if spec.arrivals == "even" and len(kept) > 1:  # the same span and requests, one gap between each two
        gap = kept[-1].t_ms / (len(kept) - 1)
        kept = [replace(r, t_ms=i * gap) for i, r in enumerate(kept)]
    return replace(trace, requests=tuple(kept), too_long=too_long, cut=cut, outside=outside, grid_ms=tick,
                   spread=tick is not None and spec.jitter == "spread", time_scale=spec.time_scale,
                   even=spec.arrivals == "even")
