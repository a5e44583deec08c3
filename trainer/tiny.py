"""The embedded default task, built here, deterministically, with no download.

* a tiny Qwen2 model (hidden 128, 2 layers, vocab 320, tied embeddings, ~0.34M parameters),
* a small byte-level BPE tokenizer with a ChatML template, trained offline with `tokenizers` using
  Qwen2's own pre-tokenizer pipeline (so AutoTokenizer and tokenizer.json give the same ids),
* a synthetic "digits" task stored in verl's GSM8K parquet layout (data_source, prompt as a chat
  list, ability, reward_model.ground_truth, extra_info).

The task ("say a digit greater than t") is one an untrained policy sometimes gets right, so
GRPO shows learning within minutes on a 2-core CPU. Its scorer is `trainer.reward.digits_score`.

Everything is built once into a cache folder (temp folder + rename, so a crash never leaves a
half-built copy) and reused.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

BUILD_VERSION = "tiny-v1"
DATA_SOURCE = "verl_doctor/digits"

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0 (pad), 1, 2 (eos)

TEMPLATES = [
    "Say a digit from 0-9 that is greater than {t}.",
    "Name one digit bigger than {t}.",
    "Reply with a digit above {t}.",
    "Which digit is more than {t}? Answer with digits only.",
]

MODEL_SIZES = {
    # name: (hidden, layers, heads, kv heads, intermediate)
    "tiny": (128, 2, 4, 2, 256),
    "small": (256, 4, 4, 2, 768),
}


def cache_root() -> Path:
    from matching.cache import cache_dir

    return Path(os.environ.get("VERL_DOCTOR_CACHE") or cache_dir())


def prompt_text(template: int, threshold: int) -> str:
    return TEMPLATES[template % len(TEMPLATES)].format(t=threshold)


def task_rows(n: int, split: str, seed: int) -> list[dict]:
    """Rows in verl's GSM8K layout; thresholds cycle 2..6 so a random digit is right 30-70% of the time."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        t = 2 + i % 5
        question = prompt_text(rng.randrange(len(TEMPLATES)), t)
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(t)},
            "extra_info": {"split": split, "index": i, "question": question, "answer": str(9)},
        })
    return rows


def _tokenizer_corpus() -> list[str]:
    rng = random.Random(0)
    corpus = []
    for t in range(10):
        for k in range(len(TEMPLATES)):
            corpus.append(prompt_text(k, t))
    for _ in range(400):
        corpus.append(" ".join(str(rng.randrange(10)) for _ in range(rng.randrange(1, 8))))
        corpus.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randrange(5, 30))))
    corpus += ["user", "assistant", "system", "The answer is 9.", "#### 9"] * 4
    return corpus


def build_tokenizer(out: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, size: str = "tiny", vocab_size: int = 320) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, kv_heads, inter = MODEL_SIZES[size]
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=2, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def _build(dest: Path, size: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model_dir = tmp / "model"
        build_tokenizer(model_dir)
        build_model(model_dir, size)
        (tmp / "data").mkdir()
        write_parquet(task_rows(512, "train", seed=0), tmp / "data" / "train.parquet")
        write_parquet(task_rows(64, "test", seed=1), tmp / "data" / "test.parquet")
        try:
            os.rename(tmp, dest)
        except OSError:  # another process built it first: theirs is as good as ours
            if not (dest / "model" / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_tiny(size: str = "tiny") -> Path:
    """The folder holding `model/` (config, weights, tokenizer) and `data/{train,test}.parquet`."""
    dest = cache_root() / f"{BUILD_VERSION}-{size}"
    if not (dest / "model" / "config.json").exists():
        _build(dest, size)
    return dest
