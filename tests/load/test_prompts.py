from tokenizers import Tokenizer

from harness.load.prompts import PromptGenerator
from harness.results import new_run_id


def first_tokens(tok: Tokenizer, text: str, n: int = 16) -> tuple[int, ...]:
    return tuple(tok.encode(text, add_special_tokens=False).ids[:n])


def test_no_two_prompts_share_first_16_tokens_within_or_across_runs(tokenizer_path):
    tok = Tokenizer.from_file(str(tokenizer_path))
    seen: dict[tuple[int, ...], str] = {}
    for run in (new_run_id("a"), new_run_id("a")):  # two runs of the same stack, same second
        for stack in ("baseline:vllm", "stack:ray"):
            gen = PromptGenerator(run, stack, 64, tokenizer_path)
            for level in (1, 16, 64):
                for phase in ("warmup", "measure"):
                    for i in range(70):
                        key = first_tokens(tok, gen.prompt(level, i, phase))
                        where = f"{run}/{stack}/{level}/{phase}/{i}"
                        assert key not in seen, f"{where} shares its first 16 tokens with {seen[key]}"
                        seen[key] = where
    assert len(seen) == 2 * 2 * 3 * 2 * 70


def test_prompt_length_fits_target_tokens(tokenizer_path):
    tok = Tokenizer.from_file(str(tokenizer_path))
    gen = PromptGenerator("r", "s", 128, tokenizer_path)
    lengths = [len(tok.encode(gen.prompt(1, i)).ids) for i in range(20)]
    assert all(120 <= n <= 140 for n in lengths), lengths


def test_run_ids_differ():
    assert len({new_run_id("x") for _ in range(50)}) == 50
