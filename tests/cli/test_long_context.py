"""Long contexts through the real client: 32K-token prompts (128 KB request bodies) and SSE events larger than
the client's 64 KB read, against the reference engine; and the SSE parser finding an event's end in the new
bytes only, however many reads the event spans."""

from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from harness.load.sse import SSEParser
from harness.schemas import RunSummary


@pytest.mark.slow  # ~10 s: 20 requests of 32K tokens in, 40K out
def test_32k_prompts_and_events_over_64_kb_are_read_whole(tmp_path, write_profile):
    profile = write_profile(concurrency=[2], requests=20, requests_per_concurrency=0, warmup_sweep=False,
                            input_tokens=32_768, output_tokens=40_000, request_timeout_s=120,
                            engine={"max_model_len": 80_000, "max_num_seqs": 8})
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "results"),
               "--opt", "ttft_ms=5", "--opt", "itl_ms=0", "--opt", "tokens_per_chunk=20000",
               "--opt", "max_position_embeddings=80000"])
    run = next((tmp_path / "results").iterdir())
    s = RunSummary.model_validate_json((run / "summary.json").read_text())
    assert rc == 0, s.stopped
    records = [r for r in map(json.loads, (run / "requests.jsonl").read_text().splitlines())
               if r["phase"] == "measure"]
    assert len(records) == 20 and all(r["ok"] for r in records), [r["error_detail"] for r in records][:3]
    # 32,768 tokens by the served model's tokenizer where it has one (the tiny model's: ~59,000 characters; 4 per
    # token without): the reference engine counts 4 characters a token, so its usage says ~14,700 or 32,768
    assert len({r["prompt_tokens"] for r in records}) == 1 and records[0]["prompt_tokens"] > 14_000
    for r in records:
        assert r["output_tokens"] == 40_000 and len(r["event_ms"]) == 2  # two events of 20,000 tokens each
        assert r["output_chars"] == 4 * 40_000  # every byte of both 80 KB events was parsed
    (lv,) = s.levels
    assert lv.stats.tokens_per_chunk == pytest.approx(20_000)


def test_an_event_spanning_many_reads_is_found_once_it_ends():
    p = SSEParser()
    payload = b"x" * 300_000
    event = b"data: " + payload + b"\n\n" + b"data: [DONE]\n\n"
    got = []
    for i in range(0, len(event), 65_536):
        got += p.feed(event[i:i + 65_536], t_ns=i)
    assert [d for _, d in got] == [payload, b"[DONE]"]
    assert got[0][0] == 0  # stamped at the read that carried its first byte


def test_a_blank_line_split_across_two_reads_still_ends_the_event():
    p = SSEParser()
    assert p.feed(b"data: " + b"y" * 70_000 + b"\n", t_ns=1) == []
    assert p.feed(b"\ndata: z\n\n", t_ns=2) == [(1, b"y" * 70_000), (2, b"z")]
