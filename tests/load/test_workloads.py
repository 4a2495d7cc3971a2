"""Workloads beyond one fixed shape: lengths drawn from the run's seed, dataset files, shared-prefix groups, and
both sides of a compare sending byte-identical requests in the same order (against the reference engine)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.load.datasets import load_dataset
from harness.load.prompts import PromptGenerator, Workload
from harness.profile.schema import LoadProfile
from harness.profile.workload import Lognormal, PrefixGroups, Uniform

LOGNORMAL = {"lognormal": {"mean": 96, "sigma": 0.6, "max": 400}}


def chars(text: str) -> int:
    return max(1, len(text) // 4)


def sharegpt(path: Path, n: int = 12, words: int = 30) -> Path:
    convs = [{"id": str(i), "conversations": [
        {"from": "system", "value": "be brief"},
        {"from": "human", "value": " ".join(f"question{i} word{j}" for j in range(words + i))},
        {"from": "gpt", "value": " ".join(f"answer{j}" for j in range(4 + 2 * i))}]} for i in range(n)]
    convs.append({"id": "no-answer", "conversations": [{"from": "human", "value": "hello?"}]})
    path.write_text(json.dumps(convs))
    return path


def test_lengths_are_drawn_from_the_run_alone(tokenizer_path):
    def lengths(run: str, key: str = "") -> list[tuple[int, int | None]]:
        gen = PromptGenerator(run, key, Workload(Lognormal.model_validate(LOGNORMAL),
                                                 output_tokens=Uniform(uniform=[4, 40])), tokenizer_path)
        return [(r.input_tokens, r.max_tokens) for r in (gen.request(4, i) for i in range(400))]

    a = lengths("run-a")
    assert a == lengths("run-a")  # the other side, a repeat's replay, a resume
    assert a != lengths("run-b")
    ins, outs = [x for x, _ in a], [y for _, y in a]
    assert 17 <= min(ins) and max(ins) <= 400 and len(set(ins)) > 50
    assert statistics.mean(ins) == pytest.approx(96, rel=0.15)  # the distribution's mean before the cap
    assert set(outs) <= set(range(4, 41)) and len(set(outs)) > 20


def test_drawn_prompts_have_the_drawn_length(tokenizer_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    gen = PromptGenerator("r", "", Uniform(uniform=[20, 3000]), tokenizer_path)
    for i in range(40):
        r = gen.request(1, i)
        assert abs(len(tok.encode(r.text, add_special_tokens=False).ids) - r.input_tokens) <= 1


def test_shared_prefix_groups_share_exactly_their_prefix(tokenizer_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    gen = PromptGenerator("r", "", Workload(300, prefix=PrefixGroups(groups=3, shared_tokens=200)), tokenizer_path)
    ids = [tok.encode(gen.prompt(1, i), add_special_tokens=False).ids for i in range(60)]
    groups: dict[tuple[int, ...], list[list[int]]] = {}
    for x in ids:
        groups.setdefault(tuple(x[:190]), []).append(x)
    assert len(groups) == 3 and min(len(g) for g in groups.values()) >= 10  # a seeded order over 3 groups
    for members in groups.values():  # within a group the prompts part right after the shared tokens
        assert len({tuple(x[:215]) for x in members}) == len(members)


def test_sharegpt_and_jsonl_datasets_are_read_and_sampled(tmp_path):
    d = load_dataset(str(sharegpt(tmp_path / "sg.json")), chars)
    assert d.layout == "sharegpt" and len(d.entries) == 12 and d.malformed == 1
    assert d.entries[0].prompt.startswith("question0 word0") and d.entries[3].output_tokens == chars(
        " ".join(f"answer{j}" for j in range(10)))
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps({"prompt": f"tell me about {i}", "output_tokens": 5 + i}) for i in range(8)))
    gen = PromptGenerator("r", "", Workload("dataset", output_tokens="dataset", dataset=str(jl)))
    reqs = [gen.request(2, i) for i in range(50)]
    assert {r.max_tokens for r in reqs} <= set(range(5, 13)) and len({r.max_tokens for r in reqs}) >= 5
    assert all(r.text.split(" ", 1)[1].startswith("tell me about ") for r in reqs)  # the dataset's own text


@pytest.mark.parametrize("content, message", [
    (None, "not found"),
    ("", "the file is empty"),
    ("name,prompt\na,b\n", "line 1 is not JSON"),
    ('{"text": "no prompt here"}\n{"text": "nor here"}\n', "an unknown layout"),
    ('[{"conversations": []}]', "no usable request"),
])
def test_bad_datasets_get_one_clear_message(tmp_path, content, message):
    path = tmp_path / "d.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(LayerbenchError, match=message):
        load_dataset(str(path), chars)


def test_conversations_beyond_max_model_len_are_skipped_or_refused(tmp_path):
    path = sharegpt(tmp_path / "sg.json", n=6, words=40)
    d = load_dataset(str(path), chars, max_len=210)  # prompt + 16 prefix tokens + answer: 190, 198, ... 232
    assert d.skipped == 3 and len(d.entries) == 3
    with pytest.raises(LayerbenchError, match="every one of its 6 requests is longer than max_model_len 150"):
        load_dataset(str(path), chars, max_len=150)


@pytest.mark.parametrize("fields, message", [
    ({"input_tokens": {"uniform": [300, 100]}}, "uniform takes [lo, hi]"),
    ({"output_tokens": {"lognormal": {"mean": 50, "sigma": 0.5, "max": 20}}}, "max (20) is below its mean"),
    ({"input_tokens": {"gauss": 3}}, "a length is a number of tokens"),
    ({"input_tokens": 2000, "output_tokens": {"uniform": [8, 100]}}, "beyond engine.max_model_len 2048"),
    ({"input_tokens": "dataset"}, "needs `dataset: PATH`"),
    ({"dataset": "x.json"}, "set input_tokens: dataset"),
    ({"prefix": {"groups": 2, "shared_tokens": 120}}, "at least shared_tokens + 17"),
])
def test_bad_workloads_are_refused_naming_the_field(write_profile, tmp_path, capsys, fields, message):
    profile = write_profile(**fields)
    assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "r")]) == 2
    assert message in " ".join(capsys.readouterr().err.split()) and not (tmp_path / "r").exists()


def test_a_missing_dataset_is_refused_before_anything_is_deployed(write_profile, tmp_path, capsys):
    profile = write_profile(input_tokens="dataset", dataset=str(tmp_path / "absent.json"))
    assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "r")]) == 2
    assert "absent.json: not found" in capsys.readouterr().err and not (tmp_path / "r").exists()


def digests(run_dir: Path) -> dict[str, list[tuple]]:
    """label -> (repeat, level, index, digest) of its measured requests, in the order they were taken."""
    out: dict[str, list[tuple]] = {}
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["phase"] == "measure":
            out.setdefault(d["label"], []).append((d["repeat"], d["level"], d["index"], d["digest"]))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.slow  # a compare of two reference-engine deployments
def test_both_sides_send_byte_identical_requests_in_the_same_order(tmp_path, write_profile):
    profile = write_profile(concurrency=[1, 4], requests=24, requests_per_concurrency=0, input_tokens=LOGNORMAL,
                            output_tokens={"uniform": [4, 12]}, warmup_sweep=False, pairs=1)
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--results-dir", str(tmp_path / "res"),
               "--reports-dir", str(tmp_path / "rep"), "--opt", "ttft_ms=5", "--opt", "itl_ms=2"])
    assert rc == 0
    run = next((tmp_path / "res").iterdir())
    got = digests(run)
    assert set(got) == {"baseline", "stack"} and len(got["baseline"]) == 48
    assert got["baseline"] == got["stack"]  # the same body for every (repeat, level, index)
    assert len({x[3] for x in got["baseline"]}) == 48  # and no two requests alike
    md = (tmp_path / "rep" / run.name / "report.md").read_text()
    assert "Request lengths, sent and confirmed (lognormal mean 96, sigma 0.6, max 400/uniform 4-12)" in md
    assert "confirmed p50 / p95 / max" in md


@pytest.mark.slow  # two runs against the reference engine, whose prefix cache counts 16-token blocks
def test_shared_prefix_groups_hit_the_engine_cache_and_unique_prefixes_do_not(tmp_path, write_profile):
    def hit_rate(**fields) -> float:
        profile = write_profile(concurrency=[4], requests=40, requests_per_concurrency=0, output_tokens=4,
                                warmup_sweep=False, warmup_waves=0, **fields)
        res = tmp_path / str(len(list(tmp_path.iterdir())))
        assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(res)]) == 0
        summary = json.loads((next(res.iterdir()) / "summary.json").read_text())
        server = summary["levels"][0]["server"]
        return server["prefix_cache_hits"] / server["prefix_cache_queries"]

    shared = hit_rate(input_tokens=200, prefix={"groups": 2, "shared_tokens": 100})
    unique = hit_rate(input_tokens=200)
    assert unique == 0 and shared >= 0.9  # 40 requests in 2 groups: all but each group's first hit


def test_the_profile_names_its_shape():
    p = LoadProfile.model_validate({"name": "x", "input_tokens": LOGNORMAL, "output_tokens": 32,
                                    "prefix": {"groups": 4, "shared_tokens": 10}, "engine": {"max_model_len": 4096}})
    assert p.shape_text() == "lognormal mean 96, sigma 0.6, max 400/32, 4 groups sharing 10 prefix tokens"


def test_a_study_is_set_beside_a_run_only_at_its_shape(write_profile):
    from harness.profile.loading import load_profile

    assert load_profile("gpu-like").builtin_shaped()
    assert not load_profile("gpu-like").model_copy(update={"input_tokens": 2048}).builtin_shaped()
    assert not load_profile(str(write_profile(name="gpu-like", input_tokens={"uniform": [20, 40]}))).builtin_shaped()


@pytest.mark.slow  # a compare of two reference-engine deployments
def test_chat_sessions_grow_their_context_turn_by_turn(tmp_path, write_profile):
    """3-turn chats at c=2: every turn sends the conversation so far (the engine's prompt_tokens grow), a prefill
    cost per prompt token makes each turn's TTFT longer than the last's, and the report has TTFT by turn."""
    profile = write_profile(concurrency=[2], requests=24, requests_per_concurrency=0, input_tokens=40,
                            output_tokens=8, warmup_sweep=False, warmup_waves=0, pairs=1,
                            sessions={"turns": 3, "think_time_s": 0.02})
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--results-dir", str(tmp_path / "res"),
               "--reports-dir", str(tmp_path / "rep"), "--opt", "ttft_ms=5", "--opt", "itl_ms=1",
               "--opt", "prefill_ms_per_token=0.5"])
    assert rc == 0
    run = next((tmp_path / "res").iterdir())
    recs = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["phase"] == "measure" and r["label"] == "baseline"]
    assert len(recs) == 24 and {r["turn"] for r in recs} == {0, 1, 2} and "answer" not in recs[0]
    by_turn = {t: [r for r in recs if r["turn"] == t] for t in range(3)}
    prompt = {t: statistics.median(r["prompt_tokens"] for r in rs) for t, rs in by_turn.items()}
    ttft = {t: statistics.median(r["ttft_ms"] for r in rs) for t, rs in by_turn.items()}
    assert prompt[0] < prompt[1] < prompt[2] and ttft[0] < ttft[1] < ttft[2]
    md = (tmp_path / "rep" / run.name / "report.md").read_text()
    assert "TTFT by turn" in md and "chats of 3 turns" in md
    assert "unique prefix did not hold" not in md  # a chat reuses its own history on purpose


def test_sessions_are_refused_where_they_cannot_run(write_profile, tmp_path, capsys):
    for fields, message in (({"rates": [2.0], "sessions": {"turns": 2}}, "set `sessions.rate`"),
                            ({"input_tokens": 600, "output_tokens": 100, "sessions": {"turns": 4}},
                             "up to 4 turns of 600 + 100 tokens is beyond engine.max_model_len 2048")):
        profile = write_profile(**fields)
        assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / "r")]) == 2
        assert message in " ".join(capsys.readouterr().err.split()) and not (tmp_path / "r").exists()


@pytest.mark.slow  # a run against the reference engine
def test_a_dataset_run_sends_the_datasets_prompts_and_answer_lengths(tmp_path, write_profile):
    data = tmp_path / "d.json"
    sharegpt(data, n=8)
    profile = write_profile(concurrency=[2], requests=24, requests_per_concurrency=0, input_tokens="dataset",
                            output_tokens="dataset", dataset=str(data), warmup_sweep=False, warmup_waves=0)
    res = tmp_path / "res"
    assert main(["run", "--stack", "sim", "--opt", "ttft_ms=2", "--opt", "itl_ms=1", "--profile", str(profile),
                 "--results-dir", str(res)]) == 0
    recs = [json.loads(x) for x in (next(res.iterdir()) / "requests.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["phase"] == "measure"]
    assert len(recs) == 24 and all(r["ok"] for r in recs)
    # each answer's length as the served model's tokenizer counts the dataset's answer (4 to 18 words here)
    assert len({r["output_tokens"] for r in recs}) >= 4 and all(2 <= r["output_tokens"] <= 100 for r in recs)
    assert all(r["input_asked"] > 30 for r in recs)  # a dataset prompt of 30+ words after the request's block
    assert all(r["output_tokens"] == r["output_asked"] for r in recs)  # the engine streamed what was asked


@pytest.mark.slow  # four closed-loop runs against the reference engine (~2 s each)
def test_one_seed_sends_byte_identical_requests_in_any_run_and_none_sends_new_ones(tmp_path, write_profile):
    def run(name: str, **seed) -> list[tuple]:
        profile = write_profile(concurrency=[2], requests=24, requests_per_concurrency=0, input_tokens=LOGNORMAL,
                                output_tokens={"uniform": [4, 12]}, prefix={"groups": 3, "shared_tokens": 24},
                                warmup_sweep=False, **seed)
        assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(tmp_path / name),
                     "--opt", "ttft_ms=2", "--opt", "itl_ms=1"]) == 0
        (got,) = digests(next((tmp_path / name).iterdir())).values()
        assert len(got) == 24 and len({d for *_, d in got}) == 24, got
        return got

    assert run("a", seed=7) == run("b", seed=7)  # closed loop: every draw from the seed, not the run
    assert not {d for *_, d in run("c", seed=8)} & {d for *_, d in run("a2", seed=7)}
    assert not {d for *_, d in run("d")} & {d for *_, d in run("e")}  # no seed: each run its own requests
