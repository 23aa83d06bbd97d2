"""The real run's inputs, made locally (no hub): a tiny random-weight Qwen2 with a BPE tokenizer
trained here and a chat template, and GSM8K-shaped parquet files in verl's gsm8k schema
(``data_source`` ``openai/gsm8k``, so verl's own gsm8k reward scores the responses).

Run inside the real-run venv (transformers, tokenizers, pandas): ``python -m
verl_rl_insight.commands.demo.real.inputs FOLDER``. Idempotent: an existing folder is kept.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def problems(count: int, seed: int) -> list[tuple[str, int]]:
    """Grade-school word problems with their integer answers."""
    rng = random.Random(seed)
    names = ["Ann", "Ben", "Cho", "Dev", "Eli", "Fay", "Gus", "Hana"]
    things = ["apples", "books", "coins", "eggs", "pens", "shells"]
    out = []
    for _ in range(count):
        a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 5)
        name, thing = rng.choice(names), rng.choice(things)
        question = f"{name} has {a} {thing} and buys {b} more, then gives away one in {c} of them rounded down."
        total = a + b
        out.append((question, total - total // c))
    return out


def write_data(folder: Path) -> None:
    import pandas as pd  # type: ignore[import-untyped]  # the real-run venv's

    for split, count, seed in (("train", 24, 1), ("test", 4, 2)):
        rows = []
        for index, (question, answer) in enumerate(problems(count, seed)):
            rows.append(
                {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(answer)},
                    "extra_info": {"split": split, "index": index, "answer": f"#### {answer}", "question": question},
                }
            )
        pd.DataFrame(rows).to_parquet(folder / f"{split}.parquet")


def write_model(folder: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    corpus = [f"{q} {INSTRUCTION} #### {a}" for q, a in problems(400, 3)] + ["0123456789 + - * / = ####"] * 20
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # every byte a token (as in Qwen's own vocabulary): verl's agent loop needs "\n" to be exactly one
    # token (its Qwen chat-template builder checks), and no text may vanish from an encoding
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, initial_alphabet=alphabet)
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        torch_dtype="bfloat16",
    )
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": config.eos_token_id, "pad_token_id": config.pad_token_id})
    )


def make(folder: Path) -> tuple[Path, Path]:
    """The model folder and the data folder under ``folder`` (made once)."""
    model, data = folder / "model", folder / "data"
    if not (model / "config.json").exists():
        model.mkdir(parents=True, exist_ok=True)
        write_model(model)
    if not (data / "test.parquet").exists():
        data.mkdir(parents=True, exist_ok=True)
        write_data(data)
    return model, data


if __name__ == "__main__":
    made = make(Path(sys.argv[1]))
    print(json.dumps([str(p) for p in made]))
