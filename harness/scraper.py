"""Metrics scraper: reads every metric endpoint of a stack every interval, in its own thread so parsing
never stalls the event loop that timestamps SSE events. A failed scrape is recorded as a gap with its
reason (HTTP status, timeout, connection error, unparsable text); the loop never stops on its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

# Only summary samples are kept per scrape; histogram buckets would make scrapes.jsonl huge.
_SKIP_SUFFIXES = ("_bucket", "_created")


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
    level: int | None = None

    def to_json(self) -> dict:
        return self.__dict__.copy()


def parse_metrics(text: str) -> tuple[dict[str, str], dict[str, float]]:
    """Raises ValueError on text that is not Prometheus exposition format."""
    families: dict[str, str] = {}
    samples: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        families[fam.name] = fam.type
        for s in fam.samples:
            if s.name.endswith(_SKIP_SUFFIXES):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = float(s.value)
    if not families and text.strip():
        raise ValueError("no metric families in response")
    return families, samples


def scrape_once(client: httpx.Client, name: str, url: str) -> Scrape:
    now = time.time()
    try:
        resp = client.get(url)
    except httpx.TimeoutException:
        return Scrape(now, name, url, False, reason="timeout")
    except httpx.HTTPError as e:
        return Scrape(now, name, url, False, reason=f"connection: {type(e).__name__}")
    if resp.status_code != 200:
        return Scrape(now, name, url, False, status=resp.status_code, reason=f"http {resp.status_code}")
    try:
        families, samples = parse_metrics(resp.text)
    except (ValueError, TypeError, IndexError) as e:
        return Scrape(now, name, url, False, status=200, reason=f"unparsable: {str(e)[:120]}")
    return Scrape(now, name, url, True, status=200, families=families, samples=samples)


class Scraper:
    """Background scraping of {name: url}; `sink` receives every Scrape (gaps included) as it happens."""

    def __init__(self, endpoints: dict[str, str], interval_s: float, sink: Callable[[Scrape], None]):
        self.endpoints, self.interval_s, self.sink = endpoints, interval_s, sink
        self.level: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="layerbench-scraper", daemon=True)
        self.count = 0
        self.gaps = 0

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)

    def _loop(self) -> None:
        with httpx.Client(timeout=min(self.interval_s, 5.0)) as client:
            next_t = time.monotonic()
            while not self._stop.is_set():
                for name, url in self.endpoints.items():
                    try:
                        s = scrape_once(client, name, url)
                    except Exception as e:  # never die silently: anything unexpected is a gap too
                        s = Scrape(time.time(), name, url, False, reason=f"scraper error: {e!r}"[:200])
                    s.level = self.level
                    self.count += 1
                    self.gaps += not s.ok
                    self.sink(s)
                next_t += self.interval_s
                self._stop.wait(max(0.0, next_t - time.monotonic()))
