"""Generate the tiny test model locally (no hub): Qwen2 with GQA, random weights, ASCII byte-level BPE.

Runs in the engine environment (it needs torch + transformers). Why each choice:
- GQA (2 KV heads < 4 attention heads) so KV-cache arithmetic that confuses heads with KV heads shows up.
- ASCII-only byte-level alphabet: with all 256 bytes, random weights emit partial UTF-8 tokens that vLLM
  holds back, and a stream of N tokens arrives as fewer than N chunks.
- ByteLevel pre-tokenizer (not Metaspace, which loses spaces with transformers 5).
- Untied LM head with zero rows for the special tokens: random logits of ordinary tokens always beat 0, so
  greedy decoding never emits a special token, which vLLM would skip and stream as an event without text.

Usage: python scripts/make_model.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB_SIZE = 1024
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    """Deterministic ASCII text: words, hex strings and digits, like the prompts the harness sends."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = []
    for _ in range(n_lines):
        words = []
        for _ in range(rng.randint(4, 16)):
            kind = rng.random()
            if kind < 0.7:
                words.append("".join(rng.choice(letters) for _ in range(rng.randint(1, 9))))
            elif kind < 0.85:
                words.append(f"{rng.getrandbits(32):08x}")
            else:
                words.append(str(rng.randint(0, 99999)))
        lines.append(" ".join(words) + rng.choice([".", ",", "?", "!", ":"]))
    return lines


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # ByteLevel.alphabet() is unordered; rebuild the GPT-2 byte->unicode map to pick the ASCII subset.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_to_char = {b: chr(c) for b, c in zip(bs, cs, strict=True)}
    ascii_alphabet = [byte_to_char[b] for b in list(range(0x20, 0x7F)) + [0x09, 0x0A]]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=ascii_alphabet,
        limit_alphabet=len(ascii_alphabet),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, vocab_size: int, special_ids: list[int]) -> int:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        eos_token_id=vocab_size - 1,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight[special_ids] = 0.0
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    build_tokenizer(tmp)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp)
    eos_id = tok.convert_tokens_to_ids("<|im_end|>")
    params = build_model(tmp, vocab_size=len(tok), special_ids=tok.convert_tokens_to_ids(SPECIALS))
    # keep eos consistent with the tokenizer (random weights rarely emit it; runs use ignore_eos anyway)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eos_token_id"] = eos_id
    cfg_path.write_text(json.dumps(cfg, indent=2))
    sample = "3f9a1b2c hello world 12345."
    assert tok.decode(tok(sample)["input_ids"]) == sample, "tokenizer does not round-trip ASCII"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)  # atomic: a half-made model never looks finished
    print(f"model: {out} params={params} vocab={len(tok)} kv_heads=2 heads=4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
