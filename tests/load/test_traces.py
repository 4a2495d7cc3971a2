"""Production traces read before anything is deployed: each format into one list of requests, the replay's window,
scale and length rules, a coarse grid flagged and spread, bad files refused with one message; blocks a trace shares
shared in the prompts, token for token; and the committed trace rewritten byte for byte from its seed.

The rows below are written by hand in each format's published layout (the sources are beside each reader in
harness/profile/traces.py); no row comes from a published trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.load.prompts import PromptGenerator, Workload
from harness.profile.schema import LoadProfile
from harness.profile.traces import load_trace
from harness.profile.workload import TraceReplay

ROOT = Path(__file__).resolve().parents[2]

MOONCAKE = """{"timestamp": 27482, "input_length": 1955, "output_length": 52, "hash_ids": [46, 47, 48, 49]}
{"timestamp": 30535, "input_length": 1472, "output_length": 26, "hash_ids": [46, 52, 53]}
{"timestamp": 30535, "input_length": 1200, "output_length": 8, "hash_ids": [60, 61, 62]}
"""
BAILIAN = """{"chat_id": 7, "parent_chat_id": -1, "timestamp": 61.5, "input_length": 40, "output_length": 9, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 9, "parent_chat_id": 7, "timestamp": 64.25, "input_length": 70, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 4, 5, 6]}
{"chat_id": 12, "parent_chat_id": 9, "timestamp": 70.0, "input_length": 90, "output_length": 5, "type": "text", "turn": 3, "hash_ids": [1, 2, 4, 5, 7, 8]}
"""  # noqa: E501
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,217,634,API log
"""
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens\r
2023-11-16 18:15:46.6805900,374,44\r
2023-11-16 18:15:50.9951690,396,109"""  # 2023's files: CRLF, no newline at the end
AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00+00:00,2048,28
2024-05-10 00:00:00.009930+00:00,130,9
"""
OURS = """{"t_ms": 0, "input_tokens": 64, "output_tokens": 8, "prefix_blocks": [3, 4], "session": "a"}
{"t_ms": 250.5, "input_tokens": 48, "output_tokens": 4}
"""


def trace(tmp_path: Path, text: str, fmt: str, max_len: int | None = None, **rules):
    p = tmp_path / f"t.{fmt}"
    p.write_text(text)
    return load_trace(TraceReplay(path=str(p), format=fmt, **rules), max_len)


@pytest.mark.parametrize(("fmt", "text", "want"), [
    ("mooncake", MOONCAKE, [(0.0, 1955, 52, (46, 47, 48, 49), None), (3053.0, 1472, 26, (46, 52, 53), None),
                            (3053.0, 1200, 8, (60, 61, 62), None)]),
    ("bailian", BAILIAN, [(0.0, 40, 9, (1, 2, 3), "7"), (2750.0, 70, 5, (1, 2, 4, 5, 6), "7"),
                          (8500.0, 90, 5, (1, 2, 4, 5, 7, 8), "7")]),  # turn 3's parent is turn 2: chat 7
    ("burstgpt", BURSTGPT, [(0.0, 472, 18, (), None), (113000.0, 417, 217, (), None)]),
    ("azure", AZURE, [(0.0, 374, 44, (), None), (4314.579, 396, 109, (), None)]),
    ("azure", AZURE_2024, [(0.0, 2048, 28, (), None), (9.93, 130, 9, (), None)]),
    ("jsonl", OURS, [(0.0, 64, 8, (3, 4), "a"), (250.5, 48, 4, (), None)]),
])
def test_each_format_is_read_into_arrivals_lengths_blocks_and_chats(tmp_path, fmt, text, want):
    t = trace(tmp_path, text, fmt)
    got = [(round(r.t_ms, 3), r.input_tokens, r.output_tokens, r.blocks, r.chat) for r in t.requests]
    assert got == want
    assert t.block_tokens == {"mooncake": 512, "bailian": 16, "jsonl": 16}.get(fmt, 0)
    assert t.failed == (1 if fmt == "burstgpt" else 0) and t.rows == len(want) + t.failed  # a failed row: counted


def test_the_window_scale_and_max_model_len_rules(tmp_path):
    rows = "".join(f'{{"t_ms": {i * 100}, "input_tokens": {40 + 10 * (i % 3)}, "output_tokens": 20}}\n'
                   for i in range(50))
    t = trace(tmp_path, rows, "jsonl", 60, start_s=1.0, duration_s=3.0, time_scale=2.0)
    # the window 1.0 <= t < 4.0 s holds requests 10..39; prompts of 60 tokens leave no room for an answer in
    # max_model_len 60 and are skipped; the others' answers are cut to fit (40 + 20 fits, 50 + 20 is cut to 10)
    assert t.outside == 20 and t.too_long == 10 and len(t.requests) == 20
    assert [r.t_ms for r in t.requests[:3]] == [0.0, 100.0, 150.0]  # after the window's first, at twice the speed
    assert {(r.input_tokens, r.output_tokens) for r in t.requests} == {(40, 20), (50, 10)} and t.cut == 10
    assert t.requests[-1].t_ms == pytest.approx((3900 - 1000) / 2)
    assert len(trace(tmp_path, rows, "jsonl", max_requests=7).requests) == 7
    even = trace(tmp_path, rows, "jsonl", 60, start_s=1.0, duration_s=3.0, time_scale=2.0, arrivals="even")
    assert [r.t_ms for r in even.requests] == pytest.approx([i * 1450 / 19 for i in range(20)])  # the same span
    assert [r.input_tokens for r in even.requests] == [r.input_tokens for r in t.requests]  # and requests


def test_a_coarse_grid_is_flagged_and_spread_over_its_ticks(tmp_path):
    rows = "".join(f'{{"timestamp": {3000 * (i // 4)}, "input_length": 100, "output_length": 4}}\n'
                   for i in range(12))
    kept = trace(tmp_path, rows, "mooncake")
    assert kept.grid_ms == 3000 and not kept.spread and [r.t_ms for r in kept.requests[:5]] == [0, 0, 0, 0, 3000]
    assert "sit on a 3 s grid" in kept.describe() and "jitter: spread" in kept.describe()
    even = trace(tmp_path, rows, "mooncake", jitter="spread")
    assert even.spread and [r.t_ms for r in even.requests[:5]] == [0, 750, 1500, 2250, 3000]
    poisson = "".join(f'{{"timestamp": {i * 37 + (i * i) % 11}, "input_length": 100, "output_length": 4}}\n'
                      for i in range(30))
    assert trace(tmp_path, poisson, "mooncake").grid_ms is None


def test_reuse_is_the_share_of_prompt_tokens_in_leading_blocks_sent_before(tmp_path):
    t = trace(tmp_path, MOONCAKE, "mooncake")
    assert t.reuse() == pytest.approx(512 / (1955 + 1472 + 1200))  # block 46, once again
    # a chat's turn sends its last turn's full blocks again (a partial last block, padded, hashes anew): turn 2
    # blocks 1, 2 of turn 1's, turn 3 blocks 1, 2, 4, 5 of turn 2's, 16 tokens each
    assert trace(tmp_path, BAILIAN, "bailian").reuse() == pytest.approx((32 + 64) / (40 + 70 + 90))
    assert trace(tmp_path, BURSTGPT, "burstgpt").reuse() is None


@pytest.mark.parametrize(("fmt", "text", "message"), [
    ("mooncake", "", "the file is empty"),
    ("mooncake", '{"timestamp": 1, "input_length": 5}\n', "line 1: no field 'output_length'"),
    ("mooncake", MOONCAKE + "{oops\n", "line 4 is not JSON"),
    ("mooncake", '{"timestamp": 1, "input_length": -5, "output_length": 3}\n', "line 1: -5 is not a whole number"),
    ("bailian", '{"chat_id": 1, "timestamp": "soon", "input_length": 5, "output_length": 3}\n', "line 1: "),
    ("burstgpt", "Time,Request tokens\n1,2\n", "line 1: the header lacks Timestamp, Response tokens"),
    ("burstgpt", BURSTGPT + "x,ChatGPT,1,2,3,API log\n", "line 5: "),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n1,m,40,0\n", "no request in it (1 failed"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n", "line 2: "),
    ("mooncake", MOONCAKE.replace("30535", "20535", 1), "line 2: its time goes back 6947 ms"),
    ("azure", AZURE_2024.replace(",130,", ",0,"), "line 3: a prompt of 0 tokens"),
    ("burstgpt", BURSTGPT.replace("118,", "4,"), "line 4: its time goes back 1000 ms"),
])
def test_a_bad_trace_is_refused_with_one_message(tmp_path, fmt, text, message):
    with pytest.raises(LayerbenchError) as e:
        trace(tmp_path, text, fmt)
    assert message in str(e.value) and str(e.value).startswith("trace ") and "\n" not in str(e.value), e.value


def test_a_missing_trace_or_format_or_an_empty_window_is_refused(tmp_path, write_profile):
    from harness.profile.loading import load_profile

    with pytest.raises(LayerbenchError, match="not found or not readable"):
        load_profile(str(write_profile(trace={"path": str(tmp_path / "none.jsonl"), "format": "mooncake"})))
    (tmp_path / "t.jsonl").write_text(MOONCAKE)
    with pytest.raises(LayerbenchError, match="field 'trace.format'.*'mooncake'"):
        load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "sharegpt"})))
    with pytest.raises(LayerbenchError, match="no request lies in the window"):
        load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "mooncake",
                                              "start_s": 60}, engine={"max_model_len": 8192})))
    for bad, match in (({"time_scale": 0}, "field 'trace.time_scale'.*greater than 0"),
                       ({"format": "azure", "block_tokens": 16}, "azure traces carry no hash ids")):
        with pytest.raises(LayerbenchError, match=match):
            load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "mooncake", **bad})))
    with pytest.raises(LayerbenchError, match=r"fewer than \d+ requests.*widen the trace's window"):
        load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "mooncake"},
                                       engine={"max_model_len": 8192})))  # its 3 requests
    with pytest.raises(LayerbenchError, match="remove `concurrency`, `rates`"):
        load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "mooncake"},
                                       rates=[2])))


def test_a_trace_profile_is_one_open_loop_level_at_the_replays_mean_rate(tmp_path, write_profile):
    from harness.profile.loading import load_profile

    rows = "".join(f'{{"t_ms": {i * 250}, "input_tokens": 40, "output_tokens": 8}}\n' for i in range(40))
    (tmp_path / "t.jsonl").write_text(rows)
    p: LoadProfile = load_profile(str(write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "jsonl"})))
    assert p.open_loop and p.levels() == [4.0] and p.requests_for(4.0) == 40
    with pytest.raises(LayerbenchError, match="replays a trace"):
        p.with_levels([8.0])


def test_blocks_the_trace_shares_are_shared_in_the_prompts_token_for_token(tmp_path, tokenizer_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    rows = ('{"t_ms": 0, "input_tokens": 60, "output_tokens": 4, "prefix_blocks": [1, 2, 3, 4]}\n'
            '{"t_ms": 10, "input_tokens": 56, "output_tokens": 4, "prefix_blocks": [1, 2, 7, 8]}\n'
            '{"t_ms": 20, "input_tokens": 40, "output_tokens": 4, "prefix_blocks": [9, 2, 3]}\n'
            '{"t_ms": 30, "input_tokens": 44, "output_tokens": 4, "prefix_blocks": [1]}\n')
    (tmp_path / "t.jsonl").write_text(rows)
    spec = TraceReplay(path=str(tmp_path / "t.jsonl"), format="jsonl")

    def ids(run: str, i: int, repeat: int = 0) -> list[int]:
        gen = PromptGenerator(run, f"w{i}", Workload(64, trace=spec, max_len=4096), tokenizer_path)
        req = gen.request(3.0, repeat * 1_000_000 + i)
        assert req.input_tokens == gen.trace.requests[i].input_tokens  # type: ignore[union-attr]
        return tok.encode(req.text, add_special_tokens=False).ids

    a, b, c, d = (ids("run", i) for i in range(4))
    assert [len(x) for x in (a, b, c, d)] == [60, 56, 40, 44]  # each prompt exactly its length
    assert a[:32] == b[:32] and a[32:48] != b[32:48]  # blocks 1, 2 shared, then not
    # a block id is one text wherever it recurs (after another first block too: the engine's chained block hash,
    # not the text, keeps it from hitting there); a part the trace names no block for is the request's own
    assert a[:16] != c[:16] and a[16:32] == c[16:32]
    assert a[:16] == d[:16] and d[16:] != a[16:44]
    assert ids("other", 0)[:16] != a[:16] and ids("run", 0, repeat=1)[:16] != a[:16]  # fresh per run and repeat
    warm = PromptGenerator("run", "w0", Workload(64, trace=spec, max_len=4096), tokenizer_path).request(3.0, 0,
                                                                                                       "warmup")
    assert tok.encode(warm.text, add_special_tokens=False).ids[:16] != a[:16]  # the warmup primes no block


def test_the_committed_trace_is_rewritten_byte_for_byte_from_its_seed(tmp_path):
    out = tmp_path / "again.jsonl"
    subprocess.run([sys.executable, "scripts/make_trace.py", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    assert out.read_bytes() == (ROOT / "traces" / "burst-prefix.jsonl").read_bytes()
    bad = subprocess.run([sys.executable, "scripts/make_trace.py", "--out", str(out), "--rate", "0"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--rate > 0" in bad.stderr


def test_a_trace_whose_busiest_second_the_pacer_cannot_hold_is_refused_before_anything_runs(tmp_path, write_profile,
                                                                                            capsys):
    from harness.cli.main import main

    rows = "".join(f'{{"t_ms": {i / 1000:.3f}, "input_tokens": 40, "output_tokens": 4}}\n' for i in range(100_000))
    (tmp_path / "t.jsonl").write_text(rows)  # 100,000 requests in 0.1 s: a send every microsecond
    profile = write_profile(trace={"path": str(tmp_path / "t.jsonl"), "format": "jsonl"})
    rc = main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "res")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "its busiest second (100000 requests) is more than this host's pacer holds" in err, err
    assert not (tmp_path / "res").exists()
