"""Streaming client for OpenAI `/v1/completions` and `/v1/chat/completions` (SSE).

The hot path is an asyncio protocol on a raw socket on purpose (harness/load/http1.py): on the 2-core CPU host
an httpx streaming client over-reported TTFT by +40 ms p50 (4 s p99) at c=64 and aiohttp (`vllm bench serve`) by
+37 ms, while raw sockets stay within a fraction of a millisecond of the reference engine's own send times
(`make bench-harness`). Per read there is one perf_counter_ns, chunked decoding and SSE splitting; JSON is parsed
once per event. httpx is used for control calls only.

Each closed-loop slot owns one keep-alive `Connection`, so no pool lock sits on the hot path.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from harness.load.fastjson import loads
from harness.load.http1 import Connection, Response, StreamProtocolError

if sys.version_info >= (3, 11):
    from asyncio import timeout
else:  # Python 3.10 (Ubuntu 22.04's): the backport asyncio.timeout came from, raising asyncio.TimeoutError
    from async_timeout import timeout
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # one class from 3.11 on

CONNECT_TIMEOUT_S = 10.0


@dataclass(slots=True)
class RequestRecord:
    """One request as measured. Times are ns (perf_counter) or ms offsets from `t_start_ns`."""

    level: int
    index: int
    repeat: int = 0
    phase: str = "measure"
    ok: bool = False
    error: str | None = None  # http_<status> | timeout | disconnect | malformed | connect | server_error
    error_detail: str | None = None
    http_status: int | None = None
    t_due_ns: int = 0  # closed loop: when the slot was free to send; open loop: the scheduled send time
    t_task_ns: int = 0  # open loop: when the request's task began, before any connect (0 in closed loop)
    t_start_ns: int = 0
    t_end_ns: int = 0
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    event_ms: list[float] = field(default_factory=list)  # arrival of every content event
    output_tokens: int | None = None  # from usage only; never counted from chunks
    prompt_tokens: int | None = None
    output_chars: int = 0
    input_asked: int = 0  # the prompt length the profile drew (the engine's usage counts prompt_tokens)
    output_asked: int = 0  # its max_tokens
    digest: str = ""  # of the request body as sent: both sides of a compare send the same ones in the same order
    turn: int = 0  # a multi-turn chat's turn (0: the first, or a profile without sessions)
    chat: int = -1  # its chat (repeat x 1,000,000 + its number in its load process, beside `worker`; -1: none)
    held_ms: float = 0.0  # a trace's turn: how long it waited past its own time for its chat's previous answer
    answer: str = ""  # the streamed text, kept only for a chat's next turn (StreamClient.keep_text); not written
    headers: dict[str, str] = field(default_factory=dict)  # the layer's timing headers (StreamClient.keep_headers)
    replica: int = -1  # the engine the load client sent it to, where it spreads over several (load/spread.py)

    @property
    def dispatch_delay_ms(self) -> float:
        """How late the client itself was. Closed loop: slot free -> request written. Open loop: scheduled ->
        the request's task began (the client's lateness; connecting is the server's side, counted in latency)."""
        if self.t_task_ns:
            return (self.t_task_ns - self.t_due_ns) / 1e6
        return (self.t_start_ns - self.t_due_ns) / 1e6

    @classmethod
    def from_json(cls, d: dict) -> RequestRecord:
        """Inverse of to_json (derived keys such as dispatch_delay_ms and labels are dropped)."""
        return cls(**{k: v for k, v in d.items() if k in cls.__slots__})

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__slots__}  # no asdict: it deep-copies and was slower
        if not self.t_task_ns:  # closed loop: its records keep their shape
            del d["t_task_ns"]
        del d["answer"]
        if not self.headers:  # a stack that declares none: its records keep their shape
            del d["headers"]
        if self.replica < 0:  # one endpoint: the same
            del d["replica"]
        if self.chat < 0:  # no sessions: the same
            del d["chat"]
        if not self.held_ms:
            del d["held_ms"]
        d["event_ms"] = [round(x, 3) for x in self.event_ms]
        d["dispatch_delay_ms"] = round(self.dispatch_delay_ms, 4)
        return d


class StreamClient:
    """Builds requests for one wire protocol and measures one streamed response."""

    protocol = "openai"
    temperature = 0.0  # greedy: every request of both sides of a compare samples alike

    def __init__(self, base_url: str, model: str, api: str = "completions", max_tokens: int = 64,
                 ignore_eos: bool = True, timeout_s: float = 120.0):
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.model, self.api, self.max_tokens = model, api, max_tokens
        self.ignore_eos, self.timeout_s = ignore_eos, timeout_s
        self.keep_text = False  # multi-turn chats: each answer goes into the next turn's prompt
        self.keep_headers: tuple[str, ...] = ()  # response headers each record keeps (Stack.layer_headers)

    def connection(self) -> Connection:
        return Connection(self.host, self.port)

    # --- request building (off the timed path: done before t_start) ---
    def path(self) -> str:
        return f"{self.prefix}/v1/{'chat/completions' if self.api == 'chat' else 'completions'}"

    def body(self, prompt: str, max_tokens: int | None = None) -> dict:
        body: dict = {
            "model": self.model,
            "max_tokens": max_tokens or self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
        }
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def encode(self, prompt: str, max_tokens: int | None = None) -> bytes:
        return self.frame(self.payload(prompt, max_tokens))

    def payload(self, prompt: str, max_tokens: int | None = None) -> bytes:
        return json.dumps(self.body(prompt, max_tokens), separators=(",", ":")).encode()

    def frame(self, payload: bytes) -> bytes:
        head = (
            f"POST {self.path()} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        return head + payload

    # --- event interpretation ---
    def on_event(self, rec: RequestRecord, data: bytes) -> tuple[bool, bool]:
        """Returns (carries_text, done). Raises StreamProtocolError for error / malformed events."""
        if data == b"[DONE]":
            return False, True
        try:
            obj = loads(data)
        except ValueError:
            raise StreamProtocolError("malformed", f"event is not JSON: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamProtocolError("malformed", f"event is not an object: {data[:80]!r}")
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            raise StreamProtocolError("server_error", f"error event: {msg[:200]}")
        usage = obj.get("usage")
        if usage:
            rec.output_tokens = usage.get("completion_tokens")
            rec.prompt_tokens = usage.get("prompt_tokens")
        text = ""
        for ch in obj.get("choices") or ():
            t = ch.get("text")
            if t is None:
                t = (ch.get("delta") or {}).get("content")
            if t:
                text += t
        rec.output_chars += len(text)
        if self.keep_text:
            rec.answer += text
        return bool(text), False

    def finish(self, rec: RequestRecord) -> None:
        if rec.output_tokens is None:
            raise StreamProtocolError("malformed", "stream ended without a usage block")

    async def measure(self, conn: Connection, prompt: str, rec: RequestRecord, max_tokens: int | None = None
                      ) -> RequestRecord:
        payload = self.payload(prompt, max_tokens)
        rec.digest = hashlib.blake2b(payload, digest_size=8).hexdigest()
        request = self.frame(payload)
        clock = time.perf_counter_ns
        response = None
        try:
            async with timeout(self.timeout_s):
                try:
                    async with timeout(CONNECT_TIMEOUT_S):
                        await conn.ensure()
                except OSError as e:
                    raise StreamProtocolError("connect", f"{type(e).__name__}: {e}") from None
                except TIMEOUTS:  # a host that drops packets: unreachable, not a slow response
                    raise StreamProtocolError("connect", f"no connection within {CONNECT_TIMEOUT_S:.0f} s") from None
                response = Response(self._events(rec), asyncio.get_running_loop().create_future())
                rec.t_start_ns = clock()
                conn.send(request, response)
                await response.done
            self._check(rec)
            if not response.keep_alive or not response.chunked:
                conn.close()
        except StreamProtocolError as e:
            rec.ok, rec.error, rec.error_detail = False, e.kind, e.detail
            rec.http_status = e.status or rec.http_status
            conn.close()
        except TIMEOUTS:
            rec.ok, rec.error, rec.error_detail = False, "timeout", f"no complete response in {self.timeout_s}s"
            conn.close()
        except ValueError as e:  # bad chunk framing
            rec.ok, rec.error, rec.error_detail = False, "malformed", f"{type(e).__name__}: {e}"[:300]
            conn.close()
        except (ConnectionError, OSError) as e:
            rec.ok, rec.error, rec.error_detail = False, "disconnect", f"{type(e).__name__}: {e}"
            conn.close()
        if response is not None and response.status is not None:
            rec.http_status = response.status
            if self.keep_headers:
                rec.headers = {k: response.headers[k] for k in self.keep_headers if k in response.headers}
        if not rec.t_start_ns:
            rec.t_start_ns = clock()
        rec.t_end_ns = (response.t_end_ns if response is not None else 0) or clock()
        rec.e2e_ms = (rec.t_end_ns - rec.t_start_ns) / 1e6 if rec.ok else None
        return rec

    def _events(self, rec: RequestRecord):
        """The response's event callback: interprets each event, stamps the content events (in the loop's read
        callback, at the read that carried the event's first byte)."""
        on_event = self.on_event

        def event(payload: bytes, t_ev: int) -> bool:
            has_text, is_done = on_event(rec, payload)
            if has_text:
                ms = (t_ev - rec.t_start_ns) / 1e6
                if rec.ttft_ms is None:
                    rec.ttft_ms = ms
                rec.event_ms.append(ms)
            return is_done

        return event

    def _check(self, rec: RequestRecord) -> None:
        self.finish(rec)
        if rec.ttft_ms is None:
            raise StreamProtocolError("malformed", "stream carried no text")
        rec.ok = True
