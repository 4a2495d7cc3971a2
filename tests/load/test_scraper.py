"""The scraper must record failures as gaps with reasons and keep going (seed 000, section 9)."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.load.scraper import Scraper

GOOD = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 3.0\n"


class FlakyMetrics:
    """Serves a scripted sequence of behaviours, one per request, then stays good."""

    def __init__(self, script):
        self.script = list(script)
        self.lock = threading.Lock()
        owner = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                with owner.lock:
                    mode = owner.script.pop(0) if owner.script else "ok"
                if mode == "slow":
                    time.sleep(2.5)  # longer than the scraper's timeout (>= 1 s)
                    mode = "ok"
                code, body = {"ok": (200, GOOD), "500": (500, b"boom"), "garbage": (200, b"<html>oops</html>")}[mode]
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def scrape_until(endpoints: dict, n: int, out, interval_s: float, timeout_s: float = 60) -> list[dict]:
    """Run the scraper process until it has written n scrapes (polling its output file, with a deadline)."""
    got: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with Scraper(endpoints, interval_s=interval_s, out_path=out, tags={"label": "t"}) as scraper:
        while len(got) < n and time.monotonic() < deadline:
            got += scraper.new_scrapes()
            time.sleep(0.05)
    got += scraper.new_scrapes()
    assert len(got) >= n, f"scraper stalled after {len(got)} scrapes"
    assert scraper.count == len(got) and scraper.gaps == sum(not s["ok"] for s in got)
    return got


def test_gaps_are_recorded_with_reasons_and_the_loop_continues(tmp_path):
    srv = FlakyMetrics(["ok", "500", "500", "slow", "garbage", "garbage", "ok", "ok"])
    try:
        got = scrape_until({"api": srv.url}, 9, tmp_path / "scrapes.jsonl", interval_s=0.3)
    finally:
        srv.close()
    seq = [(s["ok"], s["reason"]) for s in got[:8]]
    assert seq[0] == (True, None)
    assert seq[1] == seq[2] == (False, "http 500")
    assert seq[3] == (False, "timeout")
    assert seq[4][0] is False and seq[4][1].startswith("unparsable")
    assert seq[6] == seq[7] == (True, None)  # good scrapes after the bad ones are kept
    assert got[0]["samples"] == {"vllm:num_requests_running{engine=0}": 3.0}
    assert all(s["label"] == "t" for s in got)


def test_unreachable_endpoint_is_a_gap_not_a_crash(tmp_path):
    got = scrape_until({"dead": "http://127.0.0.1:9/metrics"}, 3, tmp_path / "s.jsonl", interval_s=0.1)
    assert all(not s["ok"] and s["reason"].startswith("connection") for s in got)


def test_level_tag_follows_the_runner(tmp_path):
    srv = FlakyMetrics([])
    out = tmp_path / "s.jsonl"
    try:
        with Scraper({"api": srv.url}, interval_s=0.1, out_path=out) as scraper:
            scraper.level = 16
            deadline = time.monotonic() + 30
            tagged: list[dict] = []
            while not tagged and time.monotonic() < deadline:
                tagged = [s for s in scraper.new_scrapes() if s["level"] == 16]
                time.sleep(0.05)
    finally:
        srv.close()
    assert tagged and tagged[0]["ok"]


def test_counter_names_are_kept_as_exposed():
    """vLLM's counters end in _total (the parser drops it: it is put back); Triton's do not (none is invented)."""
    from harness.load.scraper import parse_metrics

    text = ("# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{engine=\"0\"} 2.0\n"
            "# TYPE vllm:request_success_total counter\n"
            "# TYPE nv_inference_count counter\nnv_inference_count{model=\"tiny\",version=\"1\"} 7\n")
    families, samples = parse_metrics(text)
    assert set(families) == {"vllm:num_preemptions_total", "vllm:request_success_total", "nv_inference_count"}
    assert samples["nv_inference_count{model=tiny,version=1}"] == 7.0
