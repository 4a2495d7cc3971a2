"""Metrics scraper: reads every metric endpoint of a stack and appends each scrape to scrapes.jsonl, by the
profile's policy (`scrape`):
- boundary (default): just before and just after each measured window (`mark`), never during it. vLLM renders
  /metrics inside the process that streams tokens: on a 2-core host a 2 s poll moved TTFT p50 at c=1 from
  ~19 ms to 106-149 ms, and it costs the bare baseline but not Ray, whose metrics come from an agent process.
  Counter deltas over a level stay exact; gauges are read at the boundaries.
- interval: boundary marks plus a poll every interval (seed 000's 2 s time series); the poll runs in its own
  *process* (in a thread its HTTP and Prometheus parsing held the GIL for milliseconds, which showed up as
  event-loop lag in the SSE timestamps). Its cost is in the measured figures, and the report says so.
- none: nothing is scraped.
A failed scrape is recorded as a gap with its reason (HTTP status, timeout, connection error, unparsable
text); the loop never stops on its own."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness.childproc import StopFlag, child_signals, start_child, stop_child
from harness.errors import LayerbenchError

# Only summary samples are kept per scrape; histogram buckets would make scrapes.jsonl huge.
_SKIP_SUFFIXES = ("_bucket", "_created")
_COUNTER_TYPE = re.compile(r"^# TYPE (\S+) counter\s*$", re.M)


@dataclass
class Scrape:
    t: float  # unix time
    endpoint: str
    url: str
    ok: bool
    status: int | None = None
    reason: str | None = None  # set on gaps
    families: dict[str, str] = field(default_factory=dict)  # name -> type
    samples: dict[str, float] = field(default_factory=dict)  # 'name{labels}' -> value
    level: float | None = None  # a concurrency, or an open-loop level's rate (req/s)
    phase: str | None = None  # "start" / "end" of a measured window; None for interval polls
    dur_ms: float | None = None  # how long the endpoint took to answer

    def to_json(self) -> dict:
        return self.__dict__.copy()


def parse_metrics(text: str) -> tuple[dict[str, str], dict[str, float]]:
    """Raises ValueError, and only ValueError, on text that is not Prometheus exposition format."""
    families: dict[str, str] = {}
    samples: dict[str, float] = {}
    bare_counters = {n for n in _COUNTER_TYPE.findall(text) if not n.endswith("_total")}
    try:
        for fam in text_string_to_metric_families(text):
            # the parser drops a counter family's _total and adds it to every sample: keep the names as exposed,
            # with _total (vllm:num_preemptions_total) or without (Triton's nv_inference_count)
            bare = fam.type == "counter" and fam.name in bare_counters
            name = f"{fam.name}_total" if fam.type == "counter" and not bare else fam.name
            families[name] = fam.type
            for s in fam.samples:
                if s.name.endswith(_SKIP_SUFFIXES):
                    continue
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                sample = fam.name if bare and s.name == f"{fam.name}_total" else s.name
                samples[f"{sample}{{{labels}}}"] = float(s.value)
    except ValueError:
        raise
    except Exception as e:
        # the response is untrusted: prometheus_client's parser also fails on malformed text with IndexError,
        # TypeError, ...; whatever it raises means "unparsable", reported as one error type
        raise ValueError(f"{type(e).__name__}: {e}") from e
    if not families and text.strip():
        raise ValueError("no metric families in response")
    return families, samples


def scrape_once(client: httpx.Client, name: str, url: str) -> Scrape:
    s = _scrape(client, name, url)
    if s.dur_ms is None:
        s.dur_ms = round((time.time() - s.t) * 1e3, 2)
    return s


def _scrape(client: httpx.Client, name: str, url: str) -> Scrape:
    now = time.time()
    try:
        resp = client.get(url)
    except httpx.TimeoutException:
        return Scrape(now, name, url, False, reason="timeout")
    except httpx.HTTPError as e:
        return Scrape(now, name, url, False, reason=f"connection: {type(e).__name__}")
    dur_ms = round(resp.elapsed.total_seconds() * 1e3, 2)
    if resp.status_code != 200:
        return Scrape(now, name, url, False, status=resp.status_code, reason=f"http {resp.status_code}")
    try:
        families, samples = parse_metrics(resp.text)
    except ValueError as e:  # parse_metrics raises nothing else
        return Scrape(now, name, url, False, status=200, reason=f"unparsable: {str(e)[:120]}", dur_ms=dur_ms)
    return Scrape(now, name, url, True, status=200, families=families, samples=samples, dur_ms=dur_ms)


_ROUNDS = itertools.count()


def _scrape_all(client: httpx.Client, endpoints: dict[str, str], out, tags: dict, level: float | None,
                phase: str | None) -> None:
    """One round: every endpoint once, each line tagged with the round (the writing process and its count), so the
    scrapes of several engines are read as one engine round by round, also where the interval poller's rounds and
    the window edges' interleave in the file (harness.analysis.replicas.merged)."""
    round_id = f"{os.getpid()}:{next(_ROUNDS)}"
    for name, url in endpoints.items():
        try:
            s = scrape_once(client, name, url)
        except Exception as e:  # never die silently: anything unexpected is a gap too
            s = Scrape(time.time(), name, url, False, reason=f"scraper error: {e!r}"[:200])
        s.level, s.phase = level, phase
        out.write(json.dumps({**s.to_json(), "round": round_id, **tags}, separators=(",", ":")) + "\n")
        out.flush()


def _scrape_loop(endpoints: dict[str, str], interval_s: float, out_path: str, tags: dict,
                 level, stop: StopFlag) -> None:
    child_signals(stop)
    # a loaded engine can take longer than a short interval to answer: give each scrape at least 1 s
    with httpx.Client(timeout=max(1.0, min(interval_s, 5.0))) as client, open(out_path, "a") as out:
        next_t = time.monotonic()
        while not stop.is_set():
            try:
                _scrape_all(client, endpoints, out, tags, level.value or None, None)
            except OSError as e:  # the disk is full: the load client reports it when it writes next
                print(f"layerbench scraper: stopped, cannot write {out_path}: {e.strerror or e}", file=sys.stderr)
                return
            next_t += interval_s
            stop.wait(max(0.0, next_t - time.monotonic()))


class Scraper:
    """Scraping of {name: url} into `out_path` (JSONL, appended; `tags` added to each line) by `policy`.
    Call `mark(level, phase)` at the edges of each measured window; set `level` while a level runs;
    `new_scrapes()` returns the lines written since the last call."""

    def __init__(self, endpoints: dict[str, str], interval_s: float, out_path: Path, tags: dict | None = None,
                 policy: str = "interval"):
        ctx = mp.get_context("spawn")  # no fork of a process with threads and an event loop
        self.policy, self.endpoints, self.tags = policy, endpoints, tags or {}
        self.out_path = Path(out_path)
        self.out_path.touch()
        self._offset = self.out_path.stat().st_size
        self._level = ctx.RawValue("d", 0.0)  # no lock: one double, written by us, read by the poller
        self._stop = StopFlag(ctx)
        self._proc = ctx.Process(target=_scrape_loop, name="layerbench-scraper", daemon=True,
                                 args=(endpoints, interval_s, str(self.out_path), self.tags, self._level,
                                       self._stop)) if policy == "interval" else None
        self._client: httpx.Client | None = None
        self.interval_s = interval_s
        self.count = 0
        self.gaps = 0
        self.gap_reasons: dict[str, int] = {}  # reason class ("http 500", "timeout", ...) -> count

    @property
    def level(self) -> float | None:
        return self._level.value or None

    @level.setter
    def level(self, value: float | None) -> None:
        self._level.value = value or 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def mark(self, level: float, phase: str) -> None:
        """Scrape every endpoint now, from this process (called between windows, when nothing is measured)."""
        if self.policy == "none" or not self.endpoints:
            return
        if self._client is None:
            self._client = httpx.Client(timeout=10.0)
        try:
            with self.out_path.open("a") as out:
                _scrape_all(self._client, self.endpoints, out, self.tags, level, phase)
        except OSError as e:
            raise LayerbenchError(f"cannot write {self.out_path}: {e.strerror or e} (is the disk full?)") from None

    def __enter__(self) -> Scraper:
        """Starts the poller (interval policy) and returns once its first scrape is on disk, so load never
        starts unobserved (spawning it and importing httpx takes seconds on a loaded host)."""
        if self._proc is None:
            return self
        start_child(self._proc)
        deadline = time.monotonic() + 60
        while self.out_path.stat().st_size <= self._offset and self._proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the file the process writes; the condition above is the readiness check
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is not None:
            stop_child(self._proc, self._stop, timeout=max(1.0, min(self.interval_s, 5.0)) + 2)  # its scrape timeout

    def new_scrapes(self) -> list[dict]:
        """Complete lines appended since the last call (a line being written is left for next time)."""
        with self.out_path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        scrapes = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        self.count += len(scrapes)
        for s in scrapes:
            if not s["ok"]:
                self.gaps += 1
                why = gap_class(s.get("reason") or "unknown")
                self.gap_reasons[why] = self.gap_reasons.get(why, 0) + 1
        return scrapes


def gap_class(reason: str) -> str:
    """'unparsable: <parser message>' -> 'unparsable'; 'http 500', 'timeout' stay as they are."""
    return reason.split(":", 1)[0]
