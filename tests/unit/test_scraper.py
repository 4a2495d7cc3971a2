"""The scraper must record failures as gaps with reasons and keep going (seed 000, section 9)."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.scraper import Scraper

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
                    time.sleep(1.0)  # longer than the scraper's timeout
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


def test_gaps_are_recorded_with_reasons_and_the_loop_continues():
    srv = FlakyMetrics(["ok", "500", "500", "slow", "garbage", "garbage", "ok", "ok"])
    got = []
    done = threading.Event()

    def sink(s):
        got.append(s)
        if len(got) >= 9:
            done.set()

    try:
        with Scraper({"api": srv.url}, interval_s=0.3, sink=sink) as scraper:
            assert done.wait(30), f"scraper stalled after {len(got)} scrapes"
    finally:
        srv.close()
    seq = [(s.ok, s.reason) for s in got[:8]]
    assert seq[0] == (True, None)
    assert seq[1] == seq[2] == (False, "http 500")
    assert seq[3] == (False, "timeout")
    assert seq[4][0] is False and seq[4][1].startswith("unparsable")
    assert seq[6] == seq[7] == (True, None)  # good scrapes after the bad ones are kept
    assert got[0].samples == {'vllm:num_requests_running{engine=0}': 3.0}
    assert scraper.gaps == sum(not s.ok for s in got)


def test_unreachable_endpoint_is_a_gap_not_a_crash():
    got = []
    done = threading.Event()

    def sink(s):
        got.append(s)
        if len(got) >= 3:
            done.set()

    with Scraper({"dead": "http://127.0.0.1:9/metrics"}, interval_s=0.1, sink=sink):
        assert done.wait(20)
    assert all(not s.ok and s.reason.startswith("connection") for s in got)
